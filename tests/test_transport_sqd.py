"""The send queue drain (SQD) and COMM_EST in the sans-IO transport, on the fabric: in SQD a
message already started goes on to its end (retransmissions included) and completes (RC: on its
ACK), no WQE starts, and SQ_DRAINED is raised once, after the drained completions; back in RTS
the queue goes on. COMM_EST is raised once, by the first packet a QP receives in RTR."""

from __future__ import annotations

from pyroce.ib.enums import EventType, QpState
from pyroce.transport import SendWork, Sge, WcStatus, WorkOp
from pyroce.wire.opcodes import Transport
from tests.fabric_pair import Node, fabric_pair

KIB = 1024


def write(a: Node, b: Node, wqe: int, length: int, offset: int) -> None:
    a.qp.post_send(SendWork(wqe, WorkOp.RDMA_WRITE, (Sge(a.mr.addr + offset, length, a.mr.key),),
                            raddr=b.mr.addr + offset, rkey=b.mr.key))  # fmt: skip


def events(node: Node) -> list[EventType]:
    return [event for event, _ in node.qp.events]


def test_a_started_message_finishes_in_sqd_and_the_next_waits() -> None:
    fabric, a, b = fabric_pair()
    a.buf[: 20 * KIB] = bytes(range(256)) * 80
    write(a, b, 1, 10 * KIB, 0)  # ten packets
    write(a, b, 2, 4 * KIB, 10 * KIB)
    assert len(a.qp.packets_to_send(fabric.now, 3)) == 3  # the first three leave, and are lost
    a.qp.config.sqd_notify = True
    a.qp.modify(QpState.SQD)
    assert a.qp.sq_draining
    # The rest of message 1 goes; the responder NAKs the gap, message 1 is resent and ACKed
    fabric.run_until(lambda: bool(a.qp.events))
    assert events(a) == [EventType.SQ_DRAINED] and not a.qp.sq_draining
    assert [(c.wqe_counter, c.status) for c in a.drain()] == [(1, WcStatus.SUCCESS)]
    assert b.buf[: 10 * KIB] == a.buf[: 10 * KIB] and not any(b.buf[10 * KIB : 14 * KIB])
    requests = [p.bth.psn for p in fabric.sent if p.bth.dqpn == 0x22]
    assert len(requests) > 10 and len(set(requests)) == 10  # resent in SQD; message 2 never started
    a.qp.events.clear()
    fabric.transmit()
    assert a.qp.events == []  # once
    a.qp.modify(QpState.RTS)
    fabric.run_until(lambda: len(a.drain()) == 2)
    assert b.buf[: 14 * KIB] == a.buf[: 14 * KIB] and a.qp.events == []


def test_an_idle_queue_is_drained_at_once_and_sqd_to_sqd_drains_nothing_more() -> None:
    _, a, _ = fabric_pair()
    a.qp.config.sqd_notify = True
    a.qp.modify(QpState.SQD)
    a.qp.output(0.0)
    assert events(a) == [EventType.SQ_DRAINED]
    a.qp.modify(QpState.SQD)  # an attribute change in SQD: no new drain
    a.qp.output(0.0)
    assert events(a) == [EventType.SQ_DRAINED]


def test_without_the_notify_the_drain_ends_silently() -> None:
    fabric, a, b = fabric_pair()
    write(a, b, 1, 2 * KIB, 0)
    a.qp.packets_to_send(fabric.now, 1)
    a.qp.modify(QpState.SQD)
    fabric.run_until(lambda: not a.qp.sq_draining)
    assert a.drain()[0].wqe_counter == 1 and a.qp.events == []


def test_uc_drains_on_transmission() -> None:
    fabric, a, b = fabric_pair(transport=Transport.UC)
    write(a, b, 1, 3 * KIB, 0)
    write(a, b, 2, KIB, 3 * KIB)
    assert len(a.qp.packets_to_send(fabric.now, 1)) == 1
    a.qp.config.sqd_notify = True
    a.qp.modify(QpState.SQD)
    assert [p.bth.psn for p in a.qp.packets_to_send(fabric.now, 10)] == [0xFFFF01, 0xFFFF02]  # no ACK awaited
    assert [c.wqe_counter for c in a.drain()] == [1] and events(a) == [EventType.SQ_DRAINED]
    a.qp.modify(QpState.RTS)
    assert len(a.qp.packets_to_send(fabric.now, 10)) == 1 and [c.wqe_counter for c in a.drain()] == [1, 2]


def test_comm_est_once_for_the_first_packet_in_rtr() -> None:
    fabric, a, b = fabric_pair()
    b.qp.modify(QpState.RESET)
    for state in (QpState.INIT, QpState.RTR):
        b.qp.modify(state)
    write(a, b, 1, 3 * KIB, 0)
    write(a, b, 2, 8, 0)
    fabric.run_until(lambda: len(a.drain()) == 2)
    assert [(event, reason) for event, reason in b.qp.events] == [
        (EventType.COMM_EST, "QP 0x22: first packet received in RTR")]  # fmt: skip
    assert a.qp.events == []  # a was in RTS


def test_no_comm_est_for_a_qp_that_reached_rts_first() -> None:
    fabric, a, b = fabric_pair()
    write(a, b, 1, 8, 0)
    fabric.run_until(lambda: bool(a.drain()))
    assert b.qp.events == [] and a.qp.events == []
