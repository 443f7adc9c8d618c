"""RC under a misbehaving network, in virtual time on the in-memory fabric: scripted scenarios
check the packets sent and the completions; a seeded soak checks exactly-once, in-order
delivery against a fault-free run of the same work."""

from __future__ import annotations

import random

import pytest

from pyroce.link.faults import FaultConfig, ScriptRule
from pyroce.testbench.fabric import Fabric
from pyroce.transport import RecvWork, SendWork, Sge, WcStatus, WorkOp
from pyroce.transport.rc import ACK_TIMEOUT_UNIT_S
from pyroce.wire.opcodes import Opcode, opcode_name
from pyroce.wire.psn import psn_add
from tests.fabric_pair import Node, fabric_pair

START = 0xFFFF00


def script(*rules: str) -> FaultConfig:
    return FaultConfig(script=tuple(ScriptRule.parse(rule) for rule in rules))


def requests(fabric: Fabric, qpn: int = 0x22) -> list[tuple[str, int]]:
    """(opcode name, PSN) of every packet sent to ``qpn``, in order."""
    return [(opcode_name(p.bth.opcode), p.bth.psn) for p in fabric.sent if p.bth.dqpn == qpn]


def write(a: Node, b: Node, counter: int, length: int, offset: int = 0) -> SendWork:
    return SendWork(counter, WorkOp.RDMA_WRITE, (Sge(a.mr.addr + offset, length, a.mr.key),),
                    raddr=b.mr.addr + offset, rkey=b.mr.key)  # fmt: skip


def test_partial_write_retry_resumes_inside_the_message() -> None:
    fabric, a, b = fabric_pair(script("drop:3:RC_RDMA_WRITE_MIDDLE"))
    a.buf[:8192] = random.Random(1).randbytes(8192)
    a.qp.post_send(write(a, b, 1, 8192))
    fabric.run_until(lambda: bool(a.drain()))
    assert [(c.wqe_counter, c.status) for c in a.done] == [(1, WcStatus.SUCCESS)]
    assert b.buf[:8192] == a.buf[:8192]
    sent = requests(fabric)
    first = [(name, psn) for name, psn in sent][:8]
    assert first == [("RC_RDMA_WRITE_FIRST", START)] + [("RC_RDMA_WRITE_MIDDLE", psn_add(START, i)) for i in
                                                         range(1, 7)] + [("RC_RDMA_WRITE_LAST", psn_add(START, 7))]  # fmt: skip
    # The responder NAKs the gap at PSN+3 once; the requester goes back there, with MIDDLE packets (no RETH).
    naks = [p for p in fabric.sent if p.bth.dqpn == 0x11 and p.aeth is not None and p.aeth.syndrome == 0x60]
    assert [p.bth.psn for p in naks] == [psn_add(START, 3)]
    assert sent[8:] == [("RC_RDMA_WRITE_MIDDLE", psn_add(START, i)) for i in range(3, 7)] + [
        ("RC_RDMA_WRITE_LAST", psn_add(START, 7))]  # fmt: skip


def test_partial_read_retry_asks_for_the_rest_only() -> None:
    fabric, a, b = fabric_pair(script("drop:2:RC_RDMA_READ_RESPONSE_MIDDLE"))
    b.buf[:8192] = random.Random(2).randbytes(8192)
    a.qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(a.mr.addr, 8192, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key))
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is WcStatus.SUCCESS and a.done[0].byte_len == 8192
    assert a.buf[:8192] == b.buf[:8192]
    reads = [p for p in fabric.sent if p.bth.opcode == Opcode.RC_RDMA_READ_REQUEST]
    assert [(p.bth.psn, p.reth.va - b.mr.addr, p.reth.dma_len) for p in reads] == [
        (START, 0, 8192), (psn_add(START, 2), 2048, 6144)]  # fmt: skip


def test_local_ack_timeout_within_and_beyond_the_retry_limit() -> None:
    fabric, a, b = fabric_pair(script(*(f"drop:{n}:RC_SEND_ONLY" for n in range(1, 4))), timeout=10, retry_cnt=3)
    b.qp.post_recv(RecvWork(5, (Sge(b.mr.addr, 100, b.mr.key),)))
    a.qp.post_send(SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 10, a.mr.key),)))
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is WcStatus.SUCCESS  # the 4th try got through: 3 retries were allowed
    timeout = ACK_TIMEOUT_UNIT_S * (1 << 10)
    assert fabric.now == pytest.approx(3 * timeout, rel=0.01)
    assert a.qp.counters["local_ack_timeout_err"] == 3

    # two SENDs in flight: each attempt sends both, so 4 attempts are 8 packets, all lost
    fabric, a, b = fabric_pair(script(*(f"drop:{n}:RC_SEND_ONLY" for n in range(1, 9))), timeout=10, retry_cnt=3)
    b.qp.post_recv(RecvWork(5, (Sge(b.mr.addr, 100, b.mr.key),)))
    a.qp.post_send(SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 10, a.mr.key),)))
    a.qp.post_send(SendWork(2, WorkOp.SEND, (Sge(a.mr.addr, 10, a.mr.key),)))
    fabric.run_until(lambda: len(a.drain()) == 2)
    assert [(c.wqe_counter, c.status) for c in a.done] == [(1, WcStatus.RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state.name == "ERR"


@pytest.mark.parametrize(("rnr_retry", "expected"), [(2, WcStatus.SUCCESS), (1, WcStatus.RNR_RETRY_EXC_ERR)])
def test_rnr_nak_within_and_beyond_the_limit(rnr_retry: int, expected: WcStatus) -> None:
    fabric, a, b = fabric_pair(rnr_retry=rnr_retry, min_rnr_timer=14)  # 1.28 ms
    a.qp.post_send(SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 10, a.mr.key),)))
    fabric.run_until(lambda: b.qp.counters["send_rnr_err"] == 2)
    b.qp.post_recv(RecvWork(5, (Sge(b.mr.addr, 100, b.mr.key),)))
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is expected
    assert [name for name, _ in requests(fabric)][:2] == ["RC_SEND_ONLY", "RC_SEND_ONLY"]
    assert fabric.now >= min(rnr_retry, 2) * 1.28e-3  # each RNR NAK made the requester wait its timer


def test_duplicate_atomic_is_executed_once() -> None:
    fabric, a, b = fabric_pair(script("duplicate:1:RC_FETCH_ADD", "drop:1:RC_ATOMIC_ACKNOWLEDGE"))
    b.buf[0:8] = (40).to_bytes(8, "little")
    a.qp.post_send(SendWork(1, WorkOp.ATOMIC_FETCH_AND_ADD, (Sge(a.mr.addr, 8, a.mr.key),), raddr=b.mr.addr,
                            rkey=b.mr.key, swap_add=2))  # fmt: skip
    fabric.run_until(lambda: bool(a.drain()))
    assert int.from_bytes(b.buf[0:8], "little") == 42  # once, although it arrived twice (and then a third time)
    assert int.from_bytes(a.buf[0:8], "little") == 40
    assert b.qp.counters["duplicate_request"] >= 1


def test_ghost_ack_changes_nothing() -> None:
    fabric, a, b = fabric_pair()
    from pyroce.wire.aeth import ack_syndrome
    from pyroce.wire.bth import BTH
    from pyroce.wire.headers import Aeth
    from pyroce.wire.packet import Packet

    ghost = Packet(BTH(Opcode.RC_ACKNOWLEDGE, 0x11, psn_add(START, 5)), aeth=Aeth(ack_syndrome(), 0))
    a.qp.post_send(write(a, b, 1, 100))
    a.qp.receive(ghost, 0.0)  # an ACK for a PSN never sent
    assert a.drain() == [] and a.qp.counters["ghost_responses"] == 1
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is WcStatus.SUCCESS


def test_corrupted_packet_is_never_applied() -> None:
    fabric, a, b = fabric_pair(script("corrupt:2:RC_RDMA_WRITE_MIDDLE"))
    a.buf[:8192] = random.Random(3).randbytes(8192)
    a.qp.post_send(write(a, b, 1, 8192))
    fabric.run_until(lambda: bool(a.drain()))
    assert fabric.counters["icrc_errors"] == 1 and fabric.faults.counters["corrupt"] == 1
    assert a.done[0].status is WcStatus.SUCCESS and b.buf[:8192] == a.buf[:8192]


def run_mix(faults: FaultConfig, seed: int, count: int = 250) -> tuple[Fabric, Node, Node, list[tuple[int, int]]]:
    """A seeded random mix of SEND/WRITE/READ/atomics from a to b; returns the expected
    (wqe_counter, byte_len) of b's receive completions."""
    rng = random.Random(seed)
    fabric, a, b = fabric_pair(faults)
    a.buf[:] = rng.randbytes(len(a.buf))
    b.buf[:] = rng.randbytes(len(b.buf))
    receives = []
    for index in range(count):
        op = rng.choice(["send", "write", "read", "fetch_add", "cmp_swap"])
        size = rng.choice([0, 1, 1000, 1023, 1024, 1025, 3000, 5000])
        offset = rng.randrange(60000)
        local = (Sge(a.mr.addr + offset, size, a.mr.key),)
        if op == "send":
            slot = len(receives) * 5000
            b.qp.post_recv(RecvWork(index, (Sge(b.mr.addr + 600000 + slot, 5000, b.mr.key),)))
            a.qp.post_send(SendWork(index, WorkOp.SEND, local))
            receives.append((index, size))
        elif op == "write":
            # Fenced: a READ of this region retried after the write ran would see the new bytes
            # (IBA 10.8.3.3; real RC NICs behave the same), so writes wait for earlier reads.
            a.qp.post_send(SendWork(index, WorkOp.RDMA_WRITE, local, raddr=b.mr.addr + 100000 + offset, rkey=b.mr.key,
                                    fence=True))  # fmt: skip
        elif op == "read":
            a.qp.post_send(SendWork(index, WorkOp.RDMA_READ, (Sge(a.mr.addr + 200000 + offset, size, a.mr.key),),
                                    raddr=b.mr.addr + 100000 + offset, rkey=b.mr.key))  # fmt: skip
        else:
            atomic = WorkOp.ATOMIC_FETCH_AND_ADD if op == "fetch_add" else WorkOp.ATOMIC_CMP_AND_SWP
            a.qp.post_send(SendWork(index, atomic, (Sge(a.mr.addr + 400000 + 8 * index, 8, a.mr.key),),
                                    raddr=b.mr.addr + 8, rkey=b.mr.key, swap_add=rng.randrange(1 << 64),
                                    compare=rng.randrange(3)))  # fmt: skip
        if index % 16 == 15:
            fabric.run_until(lambda at_least=index - 8: len(a.drain()) >= at_least)
    fabric.run_until(lambda: len(a.drain()) == count and len(b.drain()) == len(receives))
    return fabric, a, b, receives


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_soak_delivers_exactly_once_in_order(seed: int) -> None:
    faults = FaultConfig(loss=0.05, reorder=0.05, duplicate=0.01, corrupt=0.01, seed=seed)
    _, clean_a, clean_b, _ = run_mix(FaultConfig(), seed)
    fabric, a, b, receives = run_mix(faults, seed)
    assert fabric.faults.counters["drop"] > 10 and fabric.faults.counters["corrupt"] > 0
    assert [(c.wqe_counter, c.status) for c in a.done] == [(i, WcStatus.SUCCESS) for i in range(len(a.done))]
    assert [(c.wqe_counter, c.byte_len, c.status) for c in b.done] == [(i, n, WcStatus.SUCCESS) for i, n in receives]
    assert a.buf == clean_a.buf  # read data and atomic results as in the fault-free run
    assert b.buf == clean_b.buf  # written, sent and atomically updated bytes too
    assert a.qp.counters["completer_retry_err"] > 0
    assert fabric.now < 60  # virtual seconds: bounded


def test_lost_read_request_is_resent_after_the_sequence_nak() -> None:
    fabric, a, b = fabric_pair(script("drop:1:RC_RDMA_READ_REQUEST"))
    b.buf[:3000] = random.Random(4).randbytes(3000)
    b.qp.post_recv(RecvWork(9, (Sge(b.mr.addr + 8192, 100, b.mr.key),)))
    a.qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(a.mr.addr, 3000, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key))
    a.qp.post_send(SendWork(2, WorkOp.SEND, (Sge(a.mr.addr + 4096, 10, a.mr.key),)))
    fabric.run_until(lambda: len(a.drain()) == 2)
    assert [(c.wqe_counter, c.status) for c in a.done] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    assert a.buf[:3000] == b.buf[:3000]
    # the SEND (PSN +3) arrived first: one sequence NAK for the READ's PSN, then the READ again
    assert a.qp.counters["rcvd_seq_err"] == 1
    assert [name for name, _ in requests(fabric)] == ["RC_RDMA_READ_REQUEST", "RC_SEND_ONLY",
                                                       "RC_RDMA_READ_REQUEST", "RC_SEND_ONLY"]  # fmt: skip


def test_read_responses_lost_beyond_the_retry_limit() -> None:
    rules = [f"drop:{n}:RC_RDMA_READ_RESPONSE_ONLY" for n in range(1, 10)]
    fabric, a, b = fabric_pair(script(*rules), retry_cnt=2, timeout=8)
    a.qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(a.mr.addr, 100, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key))
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is WcStatus.RETRY_EXC_ERR
    assert a.qp.counters["local_ack_timeout_err"] == 3  # the first try and two retries, each timed out


def test_a_response_of_the_wrong_kind_is_ignored() -> None:
    from pyroce.wire.aeth import ack_syndrome
    from pyroce.wire.bth import BTH
    from pyroce.wire.headers import Aeth, AtomicAckEth
    from pyroce.wire.packet import Packet

    fabric, a, b = fabric_pair()
    a.qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(a.mr.addr, 100, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key))
    (request,) = a.qp.packets_to_send(0.0)
    bogus = Packet(BTH(Opcode.RC_ATOMIC_ACKNOWLEDGE, 0x11, request.bth.psn), aeth=Aeth(ack_syndrome(), 1),
                   atomicacketh=AtomicAckEth(0xDEAD))  # fmt: skip
    a.qp.receive(bogus, 0.0)
    assert a.drain() == [] and a.qp.counters["bad_response"] == 1
    b.qp.receive(request, 0.0)
    fabric.run_until(lambda: bool(a.drain()))
    assert a.done[0].status is WcStatus.SUCCESS and a.buf[:100] == b.buf[:100]


def test_receive_buffer_with_a_bad_lkey_is_a_remote_operational_error() -> None:
    fabric, a, b = fabric_pair()
    b.qp.post_recv(RecvWork(9, (Sge(b.mr.addr, 100, b.mr.key ^ 0xFF),)))
    a.qp.post_send(SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 10, a.mr.key),)))
    fabric.run_until(lambda: bool(a.drain()) and bool(b.drain()))
    assert a.done[0].status is WcStatus.REM_OP_ERR
    assert (b.done[0].wqe_counter, b.done[0].status) == (9, WcStatus.LOC_PROT_ERR)


def test_wrong_pkey_and_other_transports_are_dropped_and_counted() -> None:
    from pyroce.wire.bth import BTH
    from pyroce.wire.headers import Reth
    from pyroce.wire.packet import Packet

    _, _, b = fabric_pair()
    before = bytes(b.buf)
    b.qp.receive(Packet(BTH(Opcode.RC_RDMA_WRITE_ONLY, 0x22, START, True, pkey=0x7FFF), b"x",
                        reth=Reth(b.mr.addr, b.mr.key, 1)), 0.0)  # fmt: skip
    b.qp.receive(Packet(BTH(Opcode.UC_RDMA_WRITE_ONLY, 0x22, START), b"x", reth=Reth(b.mr.addr, b.mr.key, 1)), 0.0)
    assert b.qp.packets_to_send(0.0) == [] and bytes(b.buf) == before
    assert (b.qp.counters["drop_pkey"], b.qp.counters["drop_wrong_transport"]) == (1, 1)
