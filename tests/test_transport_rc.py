"""The RC transport packet by packet on the fabric (no faults): opcodes, PSNs, AckReq and SE
as rxe puts them on the wire, MSN in the responses, ACK coalescing."""

from __future__ import annotations

from pyroce.transport import RecvWork, SendWork, Sge, WcStatus, WorkOp
from pyroce.wire.opcodes import opcode_name
from pyroce.wire.packet import PacketRun
from pyroce.wire.psn import psn_add
from tests.fabric_pair import fabric_pair

START = 0xFFFF00


def test_ackreq_on_the_last_packet_and_every_64() -> None:
    fabric, a, b = fabric_pair()
    a.qp.post_send(SendWork(1, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 70 * 1024, a.mr.key),), raddr=b.mr.addr,
                            rkey=b.mr.key))  # fmt: skip
    fabric.run_until(lambda: bool(a.drain()))
    requests = [p for p in fabric.sent if p.bth.dqpn == 0x22]
    assert [p.bth.psn for p in requests] == [psn_add(START, i) for i in range(70)]  # crosses 2**24
    assert [i for i, p in enumerate(requests) if p.bth.ackreq] == [63, 69]  # rxe: 64 packets, then the last
    # All 70 arrived before the responder's next turn to send: the ACK it owed for packet 63 was
    # replaced by the one for 69, which acknowledges everything up to it (coalescing).
    acks = [p for p in fabric.sent if p.bth.dqpn == 0x11]
    assert [(opcode_name(p.bth.opcode), p.bth.psn, p.aeth.msn) for p in acks] == [  # type: ignore[union-attr]
        ("RC_ACKNOWLEDGE", psn_add(START, 69), 1)]  # fmt: skip


def test_solicited_event_bit_on_the_last_packet_only() -> None:
    fabric, a, b = fabric_pair()
    b.qp.post_recv(RecvWork(1, (Sge(b.mr.addr, 4096, b.mr.key),)))
    a.qp.post_send(SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 3000, a.mr.key),), solicited=True))
    fabric.run_until(lambda: bool(a.drain()))
    sends = [(opcode_name(p.bth.opcode), p.bth.se) for p in fabric.sent if p.bth.dqpn == 0x22]
    assert sends == [("RC_SEND_FIRST", False), ("RC_SEND_MIDDLE", False), ("RC_SEND_LAST", True)]


def test_unsignaled_work_completes_silently_but_errors_always_report() -> None:
    fabric, a, b = fabric_pair()
    a.qp.post_send(SendWork(1, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 8, a.mr.key),), signaled=False,
                            raddr=b.mr.addr, rkey=b.mr.key))  # fmt: skip
    a.qp.post_send(SendWork(2, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 8, a.mr.key),), signaled=False,
                            raddr=b.mr.addr, rkey=b.mr.key ^ 0x100))  # fmt: skip
    fabric.run_until(lambda: bool(a.drain()))
    assert [(c.wqe_counter, c.status) for c in a.done] == [(2, WcStatus.REM_ACCESS_ERR)]


def test_a_message_goes_as_one_run_but_a_first_with_reth_and_a_last_with_more_than_a_bth() -> None:
    """What the requester hands the engine: a run ([first, middle, last] opcodes) for every
    packet that is a BTH and a full PMTU, a ``Packet`` for a LAST with an immediate; a packet
    that is a BTH and payload alone but not a full run (a short LAST, a SEND ONLY, a solicited
    LAST), or a BTH, a RETH and payload (a WRITE's FIRST or ONLY), comes as bytes from the QP's
    template."""
    _, a, _ = fabric_pair()

    def shapes(op: WorkOp, length: int, **extra: object) -> list[object]:
        a.qp.post_send(SendWork(1, op, (Sge(a.mr.addr, length, a.mr.key),), raddr=0x9000000, rkey=1, **extra))  # type: ignore[arg-type]
        items, count = a.qp.output(0.0, 1 << 10)
        assert count == -(-length // 1024)
        return [
            (len(item.payload) // 1024, opcode_name(item.first_opcode), opcode_name(item.last_opcode))
            if isinstance(item, PacketRun)
            else f"{opcode_name(item[0])} bytes"
            if isinstance(item, bytes)
            else opcode_name(item.bth.opcode)
            for item in items
        ]

    assert shapes(WorkOp.SEND, 4096) == [(4, "RC_SEND_FIRST", "RC_SEND_LAST")]
    assert shapes(WorkOp.RDMA_WRITE, 4096) == ["RC_RDMA_WRITE_FIRST bytes",
                                               (3, "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST")]  # fmt: skip
    assert shapes(WorkOp.SEND, 4000) == [(3, "RC_SEND_FIRST", "RC_SEND_MIDDLE"), "RC_SEND_LAST bytes"]
    assert shapes(WorkOp.SEND, 2) == ["RC_SEND_ONLY bytes"]
    assert shapes(WorkOp.SEND_WITH_IMM, 4096, imm=7) == [(3, "RC_SEND_FIRST", "RC_SEND_MIDDLE"),
                                                         "RC_SEND_LAST_WITH_IMMEDIATE"]  # fmt: skip
    assert shapes(WorkOp.SEND, 4096, solicited=True) == [(3, "RC_SEND_FIRST", "RC_SEND_MIDDLE"), "RC_SEND_LAST bytes"]
    assert shapes(WorkOp.RDMA_WRITE, 2048) == ["RC_RDMA_WRITE_FIRST bytes", (1, "RC_RDMA_WRITE_LAST", "RC_RDMA_WRITE_LAST")]
    assert shapes(WorkOp.RDMA_WRITE, 2) == ["RC_RDMA_WRITE_ONLY bytes"]
    assert shapes(WorkOp.RDMA_WRITE_WITH_IMM, 2, imm=7) == ["RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"]


def test_every_packet_of_both_sides_carries_the_qps_pkey() -> None:
    """A QP's P_Key goes in every packet it sends, requests and responses alike (SEND, WRITE,
    READ request and responses, atomic and its ACK, ACKs, a NAK), and the peer takes them: a
    packet with another P_Key is dropped (``drop_pkey``), so one left at the default would stall."""
    fabric, a, b = fabric_pair(pkey=0x8001)
    b.qp.post_recv(RecvWork(1, (Sge(b.mr.addr, 4096, b.mr.key),)))
    requests = [
        SendWork(1, WorkOp.SEND, (Sge(a.mr.addr, 3000, a.mr.key),)),
        SendWork(2, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 2, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(3, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 3000, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(4, WorkOp.RDMA_READ, (Sge(a.mr.addr, 3000, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(5, WorkOp.RDMA_READ, (Sge(a.mr.addr, 2, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(6, WorkOp.ATOMIC_FETCH_AND_ADD, (Sge(a.mr.addr, 8, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key,
                 swap_add=1),
        SendWork(7, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 8, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key ^ 0x100),
    ]
    for work in requests:
        a.qp.post_send(work)
    fabric.run_until(lambda: len(a.drain()) == len(requests))
    assert [(c.wqe_counter, c.status) for c in a.done] == [(n, WcStatus.SUCCESS) for n in range(1, 7)] + [
        (7, WcStatus.REM_ACCESS_ERR)]  # fmt: skip
    kinds = {opcode_name(p.bth.opcode) for p in fabric.sent}
    assert {"RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_ONLY", "RC_ATOMIC_ACKNOWLEDGE",
            "RC_ACKNOWLEDGE", "RC_RDMA_WRITE_ONLY", "RC_SEND_FIRST"} <= kinds  # fmt: skip
    assert {p.bth.pkey for p in fabric.sent} == {0x8001}
    assert a.qp.counters["drop_pkey"] == b.qp.counters["drop_pkey"] == 0


def test_a_fatal_nak_goes_out_after_the_responses_to_the_reads_before_it() -> None:
    """READs and an atomic, then a WRITE with a bad R_Key: the responder answers the READs and
    the atomic in PSN order and only then its NAK, so the READs complete and only the WRITE
    fails (dropping the unsent responses left the requester retrying its first READ against a
    responder in ERROR: RETRY_EXC_ERR, the rest flushed)."""
    fabric, a, b = fabric_pair()
    requests = [
        SendWork(1, WorkOp.RDMA_READ, (Sge(a.mr.addr, 3000, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(2, WorkOp.RDMA_READ, (Sge(a.mr.addr + 4096, 2, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key),
        SendWork(3, WorkOp.ATOMIC_FETCH_AND_ADD, (Sge(a.mr.addr + 8192, 8, a.mr.key),), raddr=b.mr.addr + 8192,
                 rkey=b.mr.key, swap_add=1),
        SendWork(4, WorkOp.RDMA_WRITE, (Sge(a.mr.addr, 8, a.mr.key),), raddr=b.mr.addr, rkey=b.mr.key ^ 0x100),
    ]
    for work in requests:
        a.qp.post_send(work)
    fabric.run_until(lambda: len(a.drain()) == len(requests))
    assert [(c.wqe_counter, c.status) for c in a.done] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS),
                                                           (3, WcStatus.SUCCESS), (4, WcStatus.REM_ACCESS_ERR)]  # fmt: skip
    responses = [(opcode_name(p.bth.opcode), p.bth.psn - START) for p in fabric.sent if p.bth.dqpn == 0x11]
    assert responses == [("RC_RDMA_READ_RESPONSE_FIRST", 0), ("RC_RDMA_READ_RESPONSE_MIDDLE", 1),
                         ("RC_RDMA_READ_RESPONSE_LAST", 2), ("RC_RDMA_READ_RESPONSE_ONLY", 3),
                         ("RC_ATOMIC_ACKNOWLEDGE", 4), ("RC_ACKNOWLEDGE", 5)]  # fmt: skip
    assert b.qp.counters["resp_err_rkey_violation"] == 1 and a.qp.counters["retransmitted_pkts"] == 0
