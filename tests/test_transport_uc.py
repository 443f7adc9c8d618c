"""UC on the in-memory fabric, in virtual time: segmentation, no ACKs, completion on
transmission, and silent message drops (IBA 9.8; rxe's UC cases), packet by packet."""

from __future__ import annotations

import random

import pytest

from pyroce.link.faults import FaultConfig, ScriptRule
from pyroce.nic.memory import MrTable
from pyroce.testbench.fabric import Fabric
from pyroce.transport import Access, QpConfig, RcQp, RecvWork, SendWork, Sge, WcFlag, WcOpcode, WcStatus, WorkOp
from pyroce.transport.rc import QpState
from pyroce.wire.bth import BTH
from pyroce.wire.opcodes import OpFlag, Transport, opcode_name
from pyroce.wire.packet import Packet
from pyroce.wire.psn import psn_add
from tests.fabric_pair import Node, fabric_pair
from tests.test_captures import roce_frames

START = 0xFFFF00
PMTU = 1024
IMM = 0x12345678


def uc_pair(*rules: str) -> tuple[Fabric, Node, Node]:
    faults = FaultConfig(script=tuple(ScriptRule.parse(rule) for rule in rules))
    return fabric_pair(faults, transport=Transport.UC)


def sent_to(fabric: Fabric, qpn: int) -> list[tuple[str, int, bool]]:
    """(opcode name, PSN, AckReq) of every packet sent to ``qpn``, in order."""
    return [(opcode_name(p.bth.opcode), p.bth.psn, p.bth.ackreq) for p in fabric.sent if p.bth.dqpn == qpn]


def settle(fabric: Fabric) -> None:
    """Run until every packet is delivered: a UC sender's completion says nothing of arrival."""
    fabric.transmit()
    fabric.run_until(lambda: fabric.next_event() is None)


def expected_opcodes(kind: str, length: int, imm: bool) -> list[str]:
    count = max(1, -(-length // PMTU))
    suffix = "_WITH_IMMEDIATE" if imm else ""
    if count == 1:
        return [f"UC_{kind}_ONLY{suffix}"]
    return [f"UC_{kind}_FIRST"] + [f"UC_{kind}_MIDDLE"] * (count - 2) + [f"UC_{kind}_LAST{suffix}"]


def post(a: Node, b: Node, counter: int, op: WorkOp, length: int, offset: int = 0, **extra: int) -> None:
    remote = (
        {"raddr": b.mr.addr + offset, "rkey": b.mr.key} if op in (WorkOp.RDMA_WRITE, WorkOp.RDMA_WRITE_WITH_IMM) else {}
    )
    a.qp.post_send(SendWork(counter, op, (Sge(a.mr.addr + offset, length, a.mr.key),), **{**remote, **extra}))


def recv(b: Node, counter: int, length: int = 1 << 16) -> None:
    b.qp.post_recv(RecvWork(counter, (Sge(b.mr.addr, length, b.mr.key),)))


@pytest.mark.parametrize("length", [0, 1, PMTU, PMTU + 1, 10 * PMTU + 3])
@pytest.mark.parametrize(("op", "kind", "imm"), [(WorkOp.SEND, "SEND", False), (WorkOp.SEND_WITH_IMM, "SEND", True),
                                                 (WorkOp.RDMA_WRITE, "RDMA_WRITE", False),
                                                 (WorkOp.RDMA_WRITE_WITH_IMM, "RDMA_WRITE", True)])  # fmt: skip
def test_a_message_goes_in_uc_packets_with_no_ack(op: WorkOp, kind: str, imm: bool, length: int) -> None:
    fabric, a, b = uc_pair()
    a.buf[:length] = random.Random(length).randbytes(length)
    if kind == "SEND" or imm:
        recv(b, 7)
    post(a, b, 1, op, length, imm=IMM)
    settle(fabric)
    a.drain()
    b.drain()
    names = expected_opcodes(kind, length, imm)
    assert sent_to(fabric, 0x22) == [(name, psn_add(START, i), False) for i, name in enumerate(names)]
    assert sent_to(fabric, 0x11) == []  # no ACK, ever
    wc_opcode = WcOpcode.SEND if kind == "SEND" else WcOpcode.RDMA_WRITE
    assert a.done == [a.done[0]._replace(wqe_counter=1, status=WcStatus.SUCCESS, opcode=wc_opcode)]
    assert b.buf[:length] == a.buf[:length]
    if kind == "SEND" or imm:
        (done,) = b.done
        assert (done.wqe_counter, done.status, done.byte_len) == (7, WcStatus.SUCCESS, length)
        assert done.opcode is (WcOpcode.RECV if kind == "SEND" else WcOpcode.RECV_RDMA_WITH_IMM)
        assert (done.flags, done.imm) == ((WcFlag.WITH_IMM, IMM) if imm else (WcFlag.NONE, 0))
    assert a.qp.get_timer() is None  # nothing to retransmit, no ACK timer


def test_the_sender_completes_when_the_last_packet_leaves() -> None:
    _, a, b = uc_pair()
    post(a, b, 1, WorkOp.RDMA_WRITE, 3 * PMTU)
    assert [p.bth.opcode for p in a.qp.packets_to_send(0.0, 2)] != []
    assert a.qp.completions == []  # two of three packets out: not done yet
    a.qp.packets_to_send(0.0, 1)
    assert [(c.wqe_counter, c.status) for c in a.qp.completions] == [(1, WcStatus.SUCCESS)]


def test_a_lost_middle_drops_that_send_whole_and_the_next_arrives_intact() -> None:
    fabric, a, b = uc_pair("drop:1:UC_SEND_MIDDLE")
    a.buf[: 8 * PMTU] = random.Random(3).randbytes(8 * PMTU)
    recv(b, 5)
    recv(b, 6)
    post(a, b, 1, WorkOp.SEND, 4 * PMTU)
    post(a, b, 2, WorkOp.SEND, 2 * PMTU + 5, offset=4 * PMTU)
    settle(fabric)
    a.drain()
    b.drain()
    assert [(c.wqe_counter, c.status) for c in a.done] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    # The first message is lost, silently; its receive WQE (5) takes the second message.
    assert [(c.wqe_counter, c.status, c.byte_len) for c in b.done] == [(5, WcStatus.SUCCESS, 2 * PMTU + 5)]
    assert b.buf[: 2 * PMTU + 5] == a.buf[4 * PMTU : 6 * PMTU + 5]
    assert sent_to(fabric, 0x11) == []
    counters = b.qp.counters
    assert (
        counters["uc_messages_dropped"],
        counters["drop_uc_psn_out_of_seq"],
        counters["drop_uc_rest_of_message"],
    ) == (1, 1, 1)
    assert b.qp.state is QpState.RTS


def test_reordered_packets_drop_the_message_they_break() -> None:
    _, a, b = uc_pair()
    a.buf[: 4 * PMTU] = random.Random(4).randbytes(4 * PMTU)
    b.buf[: 4 * PMTU] = bytes(4 * PMTU)
    post(a, b, 1, WorkOp.RDMA_WRITE, 3 * PMTU)
    post(a, b, 2, WorkOp.RDMA_WRITE, PMTU, offset=3 * PMTU)
    first, middle, last, only = a.qp.packets_to_send(0.0)
    for pkt in (first, last, middle, only):  # LAST overtakes MIDDLE
        b.qp.receive(pkt, 0.0)
    assert b.buf[PMTU : 3 * PMTU] == bytes(2 * PMTU)  # the broken message placed nothing after the gap
    assert b.buf[3 * PMTU : 4 * PMTU] == a.buf[3 * PMTU : 4 * PMTU]  # the next one arrived
    assert (b.qp.counters["uc_messages_dropped"], b.qp.counters["drop_uc_rest_of_message"]) == (1, 1)
    assert b.qp.packets_to_send(0.0) == []


def test_a_wrong_rkey_is_dropped_silently_and_counted() -> None:
    fabric, a, b = uc_pair()
    a.buf[:100] = b"x" * 100
    a.qp.post_send(SendWork(1, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 100, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key ^ 1))
    post(a, b, 2, WorkOp.RDMA_WRITE, 10)
    settle(fabric)
    a.drain()
    assert [c.status for c in a.done] == [WcStatus.SUCCESS, WcStatus.SUCCESS]  # the sender never knows
    assert b.buf[:100] == b"x" * 10 + bytes(90)
    assert (b.qp.counters["uc_messages_dropped"], b.qp.counters["drop_uc_rkey_violation"]) == (1, 1)
    assert sent_to(fabric, 0x11) == [] and b.qp.state is QpState.RTS


def test_a_send_with_no_receive_posted_is_dropped_not_rnr_naked() -> None:
    fabric, a, b = uc_pair()
    post(a, b, 1, WorkOp.SEND, 10)
    settle(fabric)
    assert sent_to(fabric, 0x11) == [] and b.qp.counters["drop_uc_rnr"] == 1


def test_ackreq_from_the_peer_gets_no_ack() -> None:
    _, _a, b = uc_pair()
    recv(b, 1)
    b.qp.receive(Packet(BTH(Transport.UC | 0x04, 0x22, START, True), b"abcd"), 0.0)  # UC_SEND_ONLY, AckReq set
    assert b.qp.packets_to_send(0.0) == []
    assert [c.byte_len for c in b.qp.completions] == [4]


def test_rc_packets_at_a_uc_qp_are_another_transports() -> None:
    _, _a, b = uc_pair()
    recv(b, 1)
    b.qp.receive(Packet(BTH(0x04, 0x22, START, True), b"abcd"), 0.0)  # RC_SEND_ONLY
    assert b.qp.counters["drop_wrong_transport"] == 1 and b.qp.completions == []


@pytest.mark.parametrize("op", [WorkOp.RDMA_READ, WorkOp.ATOMIC_FETCH_AND_ADD, WorkOp.SEND_WITH_INV])
def test_uc_has_no_reads_atomics_or_invalidate(op: WorkOp) -> None:
    _, a, b = uc_pair()
    post(a, b, 1, op, 8, raddr=b.mr.addr, rkey=b.mr.key)
    assert a.qp.packets_to_send(0.0) == []
    assert [(c.wqe_counter, c.status) for c in a.qp.completions] == [(1, WcStatus.LOC_QP_OP_ERR)]
    assert a.qp.state is QpState.ERR


def test_rxe_uc_pingpong_traffic_is_accepted_by_a_uc_responder(capture_records: dict[str, tuple[int, list]]) -> None:
    """tests/data/uc_pingpong.pcap (ibv_uc_pingpong between two rxe): every message of each
    direction completes a receive, whole, with nothing dropped and nothing sent back."""
    linktype, records = capture_records["uc_pingpong.pcap"]
    packets = [frame.packet for _, _, frame in roce_frames(linktype, records)]
    for dqpn in sorted({p.bth.dqpn for p in packets}):
        mine = [p for p in packets if p.bth.dqpn == dqpn]
        pmtu = max(len(p.payload) for p in mine)
        memory = MrTable()
        buf = bytearray(1 << 16)
        mr = memory.register(1, memoryview(buf), 0x10000, Access.LOCAL_WRITE)
        qp = RcQp(QpConfig(qpn=dqpn, pdn=1, pmtu=pmtu, rq_psn=mine[0].bth.psn, transport=Transport.UC), memory)
        for state in (QpState.INIT, QpState.RTR):
            qp.modify(state)
        ends = [p for p in mine if p.info.flags & OpFlag.END]
        for counter in range(len(ends)):
            qp.post_recv(RecvWork(counter, (Sge(mr.addr, len(buf), mr.key),)))
        for pkt in mine:
            qp.receive(pkt, 0.0)
        sizes = [sum(len(p.payload) for p in mine[: mine.index(end) + 1]) for end in ends]
        assert [(c.wqe_counter, c.status) for c in qp.completions] == [(n, WcStatus.SUCCESS) for n in range(len(ends))]
        assert [c.byte_len for c in qp.completions] == [b - a for a, b in zip([0, *sizes], sizes)]
        assert qp.counters["uc_messages_dropped"] == 0 and qp.packets_to_send(0.0) == []
