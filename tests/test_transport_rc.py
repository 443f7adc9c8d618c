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
