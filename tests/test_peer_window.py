"""The engine's window per peer (``nic.engine``): QPs sending to one peer begin no message while
``PEER_WINDOW`` PSNs are in flight with it, begin theirs as the ACKs open the window again, and
all complete; a QP that goes takes its count and its place in the queue with it. Two NICs on an
in-memory wire in host mode, stepped by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyroce.host.assembly import build_device
from pyroce.link.base import MIN_PEER_WINDOW, PEER_WINDOW, peer_window
from pyroce.link.memory import MemoryWire
from pyroce.nic.engine import BACKLOG_GRACE_S, RX_BATCH
from pyroce.verbs import enums as e
from pyroce.verbs.addr import AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, SendWR

QPS = 100
SIZE = 1 << 16  # 16 PSNs at a 4 KiB MTU: 100 QPs are 1 600, past the window
PSNS = SIZE // 4096
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


class Side:
    """A NIC in host mode with an MR of a message per QP and ``QPS`` RC QPs on one CQ."""

    def __init__(self, wire: MemoryWire, address: str, receive_buffer: int | None = None) -> None:
        self.address = address
        link = wire.link(address)
        link.receive_buffer = receive_buffer  # as a UDP link's socket would say
        self.device = build_device(f"sim-{address}", link, progress="host")
        self.ctx = Context(device=self.device)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, SIZE * QPS, ACCESS)
        self.cq = CQ(self.ctx, 2 * QPS)
        cap = QPCap(max_send_wr=2, max_recv_wr=1)
        self.qps = [QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
                    for _ in range(QPS)]  # fmt: skip

    def connect(self, peer: Side) -> None:
        for qp, remote in zip(self.qps, peer.qps):
            attr = QPAttr(port_num=1, path_mtu=e.IBV_MTU_4096)
            attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote.qp_num, 0, 0
            gid = peer.ctx.query_gid(1, 1)
            attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=1))
            attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = 14, 7, 7, 12
            attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
            attr.qp_access_flags = ACCESS
            qp.to_rts(attr)

    def close(self) -> None:
        self.ctx.close()
        self.device.close()


@pytest.fixture
def sides() -> Iterator[tuple[Side, Side]]:
    wire = MemoryWire()
    requester, responder = Side(wire, "10.9.1.1"), Side(wire, "10.9.1.2")
    requester.connect(responder)
    responder.connect(requester)
    yield requester, responder
    requester.close()
    responder.close()


def test_the_window_is_half_of_what_the_socket_holds_in_4_kib_psns() -> None:
    assert peer_window(None) == PEER_WINDOW  # a link in memory drops nothing
    assert peer_window(8 << 20) == PEER_WINDOW  # net.core.rmem_max 4 MiB, doubled by the kernel
    assert peer_window(425984) == 52  # the default 208 KiB, doubled
    assert peer_window(4096) == MIN_PEER_WINDOW


def test_a_link_with_a_small_socket_buffer_keeps_a_small_window() -> None:
    """A host left at the default ``net.core.rmem_max`` (a UDP link's socket holds 416 KiB): no
    more than about 208 KiB begins at once, and all completes."""
    wire = MemoryWire()
    requester, responder = Side(wire, "10.9.1.1", receive_buffer=425984), Side(wire, "10.9.1.2")
    try:
        requester.connect(responder)
        responder.connect(requester)
        post_writes(requester, responder)
        requester.device.step(0.0)
        sent = requester.device.stats()["sent_pkts"]
        assert requester.device.engine.peer_window == 52
        assert 52 <= sent < 52 + PSNS
        done = run_until(requester, responder, QPS)
        assert sorted(done) == [(index, e.IBV_WC_SUCCESS) for index in range(QPS)]
    finally:
        requester.close()
        responder.close()


def test_a_qp_whose_own_acks_open_the_window_begins_again() -> None:
    """One QP, two 64 KiB WRITEs, a window of one message (a socket of 4 KiB): the first fills
    it, the second waits; the first's ACK opens it, and with no other QP to wake the waiting
    one, the QP itself must begin the second."""
    wire = MemoryWire()
    requester, responder = Side(wire, "10.9.1.1", receive_buffer=4096), Side(wire, "10.9.1.2")
    try:
        requester.connect(responder)
        responder.connect(requester)
        assert requester.device.engine.peer_window == MIN_PEER_WINDOW == PSNS
        engine = requester.device.engine
        for index in range(2):  # the second posted once the first has filled the window
            wr = SendWR(wr_id=index, opcode=e.IBV_WR_RDMA_WRITE, send_flags=e.IBV_SEND_SIGNALED,
                        sg=[SGE(requester.mr.buf + index * SIZE, SIZE, requester.mr.lkey)])  # fmt: skip
            wr.set_wr_rdma(responder.mr.rkey, responder.mr.buf + index * SIZE)
            requester.qps[0].post_send(wr)
            requester.device.step(0.0)
        assert engine.in_flight[responder.address] == PSNS and engine.window_waiting[responder.address]
        assert sorted(run_until(requester, responder, 2)) == [(0, e.IBV_WC_SUCCESS), (1, e.IBV_WC_SUCCESS)]
    finally:
        requester.close()
        responder.close()


def post_writes(requester: Side, responder: Side) -> None:
    """A 64 KiB WRITE on every QP, each from and to its own slot of the MRs."""
    for index, qp in enumerate(requester.qps):
        requester.mr.write(bytes([index]) * SIZE, SIZE, index * SIZE)
        wr = SendWR(wr_id=index, opcode=e.IBV_WR_RDMA_WRITE, send_flags=e.IBV_SEND_SIGNALED,
                    sg=[SGE(requester.mr.buf + index * SIZE, SIZE, requester.mr.lkey)])  # fmt: skip
        wr.set_wr_rdma(responder.mr.rkey, responder.mr.buf + index * SIZE)
        qp.post_send(wr)


def run_until(requester: Side, responder: Side, completions: int, start: float = 0.0) -> list[tuple[int, int]]:
    """Step both NICs from ``start`` on until ``completions`` WCs: their (wr_id, status)."""
    done: list[tuple[int, int]] = []
    for step in range(1, 1000):
        requester.device.step(start + step * 1e-6)
        responder.device.step(start + step * 1e-6)
        done += [(wc.wr_id, wc.status) for wc in requester.cq.poll(2 * QPS)[1]]
        if len(done) >= completions:
            return done
    raise AssertionError(f"{len(done)} of {completions} completions")


def test_qps_to_one_peer_keep_its_window_and_all_complete(sides: tuple[Side, Side]) -> None:
    requester, responder = sides
    engine = requester.device.engine
    post_writes(requester, responder)
    requester.device.step(0.0)  # the doorbells' pass: what the window lets begin
    sent = requester.device.stats()["sent_pkts"]
    assert PEER_WINDOW <= sent < PEER_WINDOW + PSNS  # the message that reached the window, no more
    assert engine.in_flight[responder.address] == sent
    assert len(engine.window_waiting[responder.address]) == QPS - sent // PSNS
    done = run_until(requester, responder, QPS)
    assert sorted(done) == [(index, e.IBV_WC_SUCCESS) for index in range(QPS)]
    assert all(responder.mr.read(SIZE, index * SIZE) == bytes([index]) * SIZE for index in range(QPS))
    assert engine.in_flight[responder.address] == 0 and not engine.window_waiting[responder.address]
    assert requester.device.stats().get("retransmitted_pkts", 0) == 0


def test_qps_that_go_return_their_count_and_their_place(sides: tuple[Side, Side]) -> None:
    """Every QP with PSNs in flight goes, and five waiting ones: no ACK will come to open the
    window, so their going opens it, and the QPs left begin and complete."""
    requester, responder = sides
    engine = requester.device.engine
    post_writes(requester, responder)
    requester.device.step(0.0)
    waiting = engine.window_waiting[responder.address]
    sending = [qp for qp in requester.qps if engine.qps[qp.qp_num] not in waiting]
    gone = sending + [qp for qp in requester.qps if engine.qps[qp.qp_num] in waiting][:5]
    for qp in gone:
        qp.close()
    assert engine.in_flight[responder.address] == 0
    left = QPS - len(gone)
    done = run_until(requester, responder, left)
    assert len(done) == left and all(status == e.IBV_WC_SUCCESS for _, status in done)
    assert engine.in_flight[responder.address] == 0 and not waiting


def test_qps_that_time_out_keep_what_they_sent_counted(sides: tuple[Side, Side]) -> None:
    """The responder stalls past the ACK timeout: every QP that sent goes back and sends again,
    but what it sent first is still in flight (a stalled receiver holds it in its socket), so
    no waiting QP begins meanwhile; once the responder runs, all complete."""
    requester, responder = sides
    engine = requester.device.engine
    post_writes(requester, responder)
    requester.device.step(0.0)
    waiting = set(engine.window_waiting[responder.address])
    counted = engine.in_flight[responder.address]
    sent = requester.device.stats()["sent_pkts"]
    requester.device.step(0.1)  # past the ACK timeout (timeout 14: 67 ms), the responder silent
    requester.device.step(0.1 + 1e-6)  # a pass more: what the window would let begin now
    stats = requester.device.stats()
    resent = stats["retransmitted_pkts"]
    assert stats["local_ack_timeout_err"] == QPS - len(waiting)  # each QP that had sent
    assert stats["sent_pkts"] == sent + resent  # resends only: no waiting QP began
    assert not any(qp.rc.sent_pkts for qp in waiting)
    assert engine.in_flight[responder.address] == counted
    done: list[tuple[int, int]] = []
    for step in range(1, 1000):
        now = 0.1 + step * 1e-6
        responder.device.step(now)
        requester.device.step(now)
        done += [(wc.wr_id, wc.status) for wc in requester.cq.poll(2 * QPS)[1]]
        if len(done) == QPS:
            break
    assert sorted(done) == [(index, e.IBV_WC_SUCCESS) for index in range(QPS)]
    assert all(responder.mr.read(SIZE, index * SIZE) == bytes([index]) * SIZE for index in range(QPS))
    assert engine.in_flight[responder.address] == 0


def test_timers_wait_for_the_acks_a_stalled_requester_has_not_read(sides: tuple[Side, Side]) -> None:
    """Every QP has a 4 KiB WRITE acknowledged, but the requester ran no pass until past the
    ACK timeout (a stall: a collection, the host's scheduling): its first pass reads an
    ``RX_BATCH`` of the ACKs, and the timers of the QPs whose ACKs still wait fire only once
    those are read; no QP resends or times out. A timer fires at the latest
    ``BACKLOG_GRACE_S`` after it fell due while packets keep waiting."""
    requester, responder = sides
    for index, qp in enumerate(requester.qps):
        wr = SendWR(wr_id=index, opcode=e.IBV_WR_RDMA_WRITE, send_flags=e.IBV_SEND_SIGNALED,
                    sg=[SGE(requester.mr.buf + index * SIZE, 4096, requester.mr.lkey)])  # fmt: skip
        wr.set_wr_rdma(responder.mr.rkey, responder.mr.buf + index * SIZE)
        qp.post_send(wr)
    requester.device.step(0.0)
    while responder.device.stats().get("sent_pkts", 0) < QPS:  # a pass reads RX_BATCH requests
        responder.device.step(0.0)
    assert QPS > RX_BATCH  # an ACK for each QP, waiting unread: more than a pass reads
    requester.device.step(0.1)  # past the ACK timeout (timeout 14: 67 ms)
    assert requester.device.engine.rx_full
    done = run_until(requester, responder, QPS, start=0.1)
    assert sorted(done) == [(index, e.IBV_WC_SUCCESS) for index in range(QPS)]
    stats = requester.device.stats()
    assert stats.get("local_ack_timeout_err", 0) == 0 and stats.get("retransmitted_pkts", 0) == 0


def test_a_timer_waits_for_a_backlog_no_longer_than_the_grace(sides: tuple[Side, Side]) -> None:
    """Another host floods the requester with junk faster than a pass reads it, and the
    responder is silent: the QP's ACK timeout still fires, ``BACKLOG_GRACE_S`` after it fell
    due at the latest, and the QP sends again."""
    requester, responder = sides
    flood = requester.device.engine.port.link  # junk delivered to the requester's own queue
    wr = SendWR(wr_id=0, opcode=e.IBV_WR_RDMA_WRITE, send_flags=e.IBV_SEND_SIGNALED,
                sg=[SGE(requester.mr.buf, 4096, requester.mr.lkey)])  # fmt: skip
    wr.set_wr_rdma(responder.mr.rkey, responder.mr.buf)
    requester.qps[0].post_send(wr)
    requester.device.step(0.0)
    due = 0.0671  # timeout 14: 4.096 us x 2^14
    now = due
    while requester.device.stats().get("local_ack_timeout_err", 0) == 0:
        assert now <= due + BACKLOG_GRACE_S + 0.002, "the timer waited past the grace"
        for _ in range(2 * RX_BATCH):
            flood.deliver(b"junk", "10.9.1.3")  # a datagram too short for a BTH: dropped
        requester.device.step(now)
        assert requester.device.engine.rx_full
        now += 0.001
    assert now > due + BACKLOG_GRACE_S - 0.002  # it did wait while the backlog lasted
