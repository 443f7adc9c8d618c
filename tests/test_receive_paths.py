"""Header prediction changes how fast a packet is placed, never what happens: the same
datagrams given to one QP through ``Demux`` (prediction, GRO runs placed in one loop) and to
a twin QP only through the general path (parse, ``RcQp.receive``) leave the same memory, the
same completions, the same responses and the same counters, whatever is lost, repeated or
reordered on the way; for RC and for UC (whose lost packets drop their messages)."""

from __future__ import annotations

import random
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pyroce.transport import RecvWork, SendWork, Sge, WorkOp
from pyroce.transport.demux import Demux
from pyroce.wire.aeth import AethKind, syndrome_kind
from pyroce.wire.framing import IPv4Header, RocePath, UdpHeader
from pyroce.wire.opcodes import Opcode, Transport
from pyroce.wire.packet import Packet, parse_packet
from pyroce.wire.psn import psn_diff
from tests.fabric_pair import Node, make_node

PATH = RocePath(IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])), UdpHeader(4791))
SIZE = 1 << 17
NOW = 1.0


def datagrams(packets: list[Packet]) -> list[bytes]:
    buf = bytearray(SIZE + 256)
    return [bytes(buf[: PATH.build_into(buf, 0, pkt)]) for pkt in packets]


def runs(data: list[bytes]) -> list[tuple[bytes, int]]:
    """Consecutive datagrams of one size joined as GRO joins them (a shorter one ends a run)."""
    out: list[tuple[bytes, int]] = []
    for datagram in data:
        if out and len(datagram) <= out[-1][1] and len(out[-1][0]) % out[-1][1] == 0 and len(out[-1][0]) < 64000:
            out[-1] = (out[-1][0] + datagram, out[-1][1])
        else:
            out.append((datagram, len(datagram)))
    return out


def _raise(qpn: int, exc: Exception) -> None:
    raise exc


def through_both(twins: tuple[Node, Node], data: list[bytes]) -> Demux:
    """``data`` to the first twin by ``Demux`` (in runs), to the second by the general path;
    returns the ``Demux`` (its counters say how much prediction took)."""
    predicted, general = twins
    demux = Demux(_raise)
    demux.qps[predicted.qp.config.qpn] = predicted.qp
    for run, step in runs(data):
        demux.receive(memoryview(run), step, PATH, NOW)
    for datagram in data:
        general.qp.receive(parse_packet(datagram), NOW)
    return demux


def assert_same(twins: tuple[Node, Node]) -> None:
    """The same state; the one freedom is ACK coalescing (IBA 9.7.5.1.1): where an AckReq falls
    inside a GRO run, the run loop acknowledges the last PSN it placed, the general path the
    AckReq's own, and both are right."""
    a, b = twins
    assert a.buf == b.buf
    assert a.drain() == b.drain()
    predicted, general = a.qp.packets_to_send(NOW, 1 << 20), b.qp.packets_to_send(NOW, 1 << 20)
    assert [_coalescable(p) for p in predicted] == [_coalescable(p) for p in general]
    for ours, theirs in zip(predicted, general):
        assert ours == theirs or psn_diff(ours.bth.psn, theirs.bth.psn) > 0, (ours, theirs)
    assert a.qp.counts() == b.qp.counts()
    assert a.qp.error_detail == b.qp.error_detail


def _coalescable(pkt: Packet) -> Packet:
    """A positive ACK with its PSN left out (what coalescing may move); anything else whole."""
    if pkt.bth.opcode == Opcode.RC_ACKNOWLEDGE and syndrome_kind(pkt.aeth.syndrome) is AethKind.ACK:  # type: ignore[union-attr]
        return pkt._replace(bth=pkt.bth._replace(psn=0))
    return pkt


def mangle(data: list[bytes], seed: int, faults: bool) -> list[bytes]:
    """Lose, repeat and swap a few datagrams (seeded)."""
    if not faults:
        return data
    rng = random.Random(seed)
    out = list(data)
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        index = rng.randrange(len(out))
        action = rng.choice(("drop", "repeat", "swap"))
        if action == "drop":
            del out[index]
        elif action == "repeat":
            out.insert(index, out[index])
        elif index + 1 < len(out):
            out[index], out[index + 1] = out[index + 1], out[index]
    return out


def twins(qpn: int = 0x22, dqpn: int = 0x11, base: int = 0x9000000, pmtu: int = 256,
          transport: Transport = Transport.RC) -> tuple[Node, Node]:  # fmt: skip
    """Two identical QPs with identical memory (the same MR key, where it is random otherwise)."""
    with mock.patch("pyroce.nic.memory.secrets.randbits", return_value=0x5A), \
            mock.patch("pyroce.nic.memory.secrets.randbelow", return_value=0x1233):  # fmt: skip
        return tuple(make_node(qpn, dqpn, SIZE, base, pmtu=pmtu, transport=transport) for _ in range(2))  # type: ignore[return-value]


# Lengths up to 80 path MTUs of 256 B, so a run crosses the AckReq every 64 packets carry
OPS = st.lists(st.tuples(st.sampled_from([WorkOp.SEND, WorkOp.RDMA_WRITE, WorkOp.RDMA_WRITE_WITH_IMM]),
                         st.integers(0, 80 * 256)), min_size=1, max_size=5)  # fmt: skip


@pytest.mark.parametrize("transport", [Transport.RC, Transport.UC], ids=["rc", "uc"])
@settings(max_examples=60, deadline=None)
@given(OPS, st.integers(0, 2**32), st.booleans(), st.integers(0, 24000))
@example([(WorkOp.RDMA_WRITE, 14593), (WorkOp.RDMA_WRITE, 17921)], 0, False, 0)  # an AckReq inside a run
def test_requests_place_the_same_either_way(transport: Transport, ops: list[tuple[WorkOp, int]], seed: int,
                                            faults: bool, recv_size: int) -> None:  # fmt: skip
    sender = make_node(0x11, 0x22, SIZE, 0x10000, pmtu=256, transport=transport)
    sender.buf[:] = random.Random(seed).randbytes(SIZE)
    pair = twins(transport=transport)
    for node in pair:
        for counter in range(len(ops)):
            node.qp.post_recv(RecvWork(counter, (Sge(node.mr.addr, recv_size, node.mr.key),)))
    for counter, (op, length) in enumerate(ops):
        sender.qp.post_send(SendWork(counter, op, (Sge(sender.mr.addr, length, sender.mr.key),),
                                     raddr=pair[0].mr.addr + 64, rkey=pair[0].mr.key, imm=counter))  # fmt: skip
    through_both(pair, mangle(datagrams(sender.qp.packets_to_send(NOW, 1 << 20)), seed, faults))
    assert_same(pair)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 80 * 256), min_size=1, max_size=4), st.integers(0, 2**32), st.booleans())
def test_read_responses_place_the_same_either_way(lengths: list[int], seed: int, faults: bool) -> None:
    responder = make_node(0x22, 0x11, SIZE, 0x9000000, pmtu=256)
    responder.buf[:] = random.Random(seed).randbytes(SIZE)
    pair = twins(0x11, 0x22, 0x10000)
    for node in pair:
        for counter, length in enumerate(lengths):
            node.qp.post_send(SendWork(counter, WorkOp.RDMA_READ, (Sge(node.mr.addr + 8 * counter, length, node.mr.key),),
                                       raddr=responder.mr.addr + 100 * counter, rkey=responder.mr.key))  # fmt: skip
    requests = pair[0].qp.packets_to_send(NOW, 1 << 20)
    assert requests == pair[1].qp.packets_to_send(NOW, 1 << 20)
    for datagram in datagrams(requests):
        responder.qp.receive(parse_packet(datagram), NOW)
    responses = datagrams(responder.qp.packets_to_send(NOW, 1 << 20))
    through_both(pair, mangle(responses, seed, faults))
    assert_same(pair)


@pytest.mark.parametrize("transport", [Transport.RC, Transport.UC], ids=["rc", "uc"])
def test_the_middle_and_last_of_a_message_take_the_predicted_path(transport: Transport) -> None:
    sender = make_node(0x11, 0x22, SIZE, 0x10000, pmtu=256, transport=transport)
    pair = twins(transport=transport)
    sender.qp.post_send(SendWork(0, WorkOp.RDMA_WRITE, (Sge(sender.mr.addr, 10 * 256, sender.mr.key),),
                                 raddr=pair[0].mr.addr, rkey=pair[0].mr.key))  # fmt: skip
    demux = through_both(pair, datagrams(sender.qp.packets_to_send(NOW, 1 << 20)))
    assert demux.predicted_pkts == 10  # the FIRST too, its RETH checked
    assert_same(pair)


WRITE_TARGETS = {  # (offset into the twin's MR, rkey change, length): a WRITE ONLY's RETH
    "fits": (100, 0, 200),
    "bad_rkey": (100, 1, 200),
    "past_the_mr": (SIZE - 100, 0, 200),
    "empty": (100, 0, 0),
}


@pytest.mark.parametrize("transport", [Transport.RC, Transport.UC], ids=["rc", "uc"])
@pytest.mark.parametrize(("target", "predicted"), [("fits", 3), ("bad_rkey", 1), ("past_the_mr", 1), ("empty", 0)])
def test_a_write_only_takes_the_predicted_path_when_its_reth_reaches_the_mr(transport: Transport, target: str,
                                                                            predicted: int) -> None:  # fmt: skip
    """Small WRITEs (one ONLY packet each, a RETH and the payload) are placed by prediction when
    the RETH names a range of the MR with remote write. A wrong key or a range past the MR is
    answered where it was checked, as the general path answers it (RC: a NAK and the QP in
    error; UC: the message dropped), and what follows goes the general way; a zero-length
    WRITE goes the general way. The outcome is the twin's, which only has the general path."""
    sender = make_node(0x11, 0x22, SIZE, 0x10000, pmtu=256, transport=transport)
    sender.buf[:] = random.Random(3).randbytes(SIZE)
    pair = twins(transport=transport)
    offset, key_change, length = WRITE_TARGETS[target]
    for counter in range(3):
        sender.qp.post_send(SendWork(counter, WorkOp.RDMA_WRITE, (Sge(sender.mr.addr + 10 * counter, length, sender.mr.key),),
                                     raddr=pair[0].mr.addr + offset + 256 * counter * (target != "past_the_mr"),
                                     rkey=pair[0].mr.key ^ key_change))  # fmt: skip
    demux = through_both(pair, datagrams(sender.qp.packets_to_send(NOW, 1 << 20)))
    assert demux.predicted_pkts == predicted
    assert_same(pair)


@pytest.mark.parametrize("transport", [Transport.RC, Transport.UC], ids=["rc", "uc"])
@pytest.mark.parametrize(("recv", "predicted"), [("fits", 3), ("too_short", 0), ("none", 0), ("bad_lkey", 0)])
def test_a_send_only_takes_the_predicted_path_when_its_receive_wqe_holds_it(transport: Transport, recv: str,
                                                                            predicted: int) -> None:  # fmt: skip
    """Small SENDs (one ONLY packet each) are placed by prediction into the receive WQEs
    waiting for them; a WQE too short or unusable, or none, leaves the packet to the general
    path, with the same outcome (NAK, error completion, RNR) as the twin that only has it."""
    sender = make_node(0x11, 0x22, SIZE, 0x10000, pmtu=256, transport=transport)
    sender.buf[:] = random.Random(7).randbytes(SIZE)
    pair = twins(transport=transport)
    for node in pair:
        if recv != "none":
            for counter in range(3):
                length, key = (2 if recv == "too_short" else 200), node.mr.key ^ (recv == "bad_lkey")
                node.qp.post_recv(RecvWork(counter, (Sge(node.mr.addr + 256 * counter, length, key),)))
    for counter in range(3):
        sender.qp.post_send(SendWork(counter, WorkOp.SEND, (Sge(sender.mr.addr + 10 * counter, 100, sender.mr.key),)))
    demux = through_both(pair, datagrams(sender.qp.packets_to_send(NOW, 1 << 20)))
    assert demux.predicted_pkts == predicted
    assert_same(pair)


def test_the_twins_differ_when_the_paths_would() -> None:
    """The comparison can fail: one twin given one datagram fewer is told apart."""
    sender = make_node(0x11, 0x22, SIZE, 0x10000, pmtu=256)
    sender.buf[:] = random.Random(1).randbytes(SIZE)
    a, b = twins()
    sender.qp.post_send(SendWork(0, WorkOp.RDMA_WRITE, (Sge(sender.mr.addr, 5000, sender.mr.key),),
                                 raddr=a.mr.addr, rkey=a.mr.key))  # fmt: skip
    data = datagrams(sender.qp.packets_to_send(NOW, 1 << 20))
    through_both((a, b), data[:-1])
    b.qp.receive(parse_packet(data[-1]), NOW)
    try:
        assert_same((a, b))
    except AssertionError:
        return
    raise AssertionError("twins with different input compared equal")
