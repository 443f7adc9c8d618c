"""The engine: one pass executes what the rings, the wire and the timers ask for.

An ``Engine`` is single-threaded and knows no threads or clocks: its host (``pyroce.host``'s
progress for a process's device, or a simulator stepping it in simulated time) serializes the
calls and passes ``now``, and gives it its link and its event queues. A pass fetches the WQEs of QPs whose doorbell rang (each field read from the
ring once, ``nic.wqe``) and sends what they start, reads up to ``RX_BATCH`` packets into the
transport (``transport.demux``), fires due transport timers (once the socket is read, or
``BACKLOG_GRACE_S`` after they fell due), then lets every active QP send
(as GSO batches, ``nic.tx``) and writes its completions into its CQs as mlx5 CQEs.

The work lists keep a pass proportional to what there is to do, not to the number of QPs:
``rung`` (doorbells), ``receives`` (receive queues with new WQEs), ``active`` (QPs with
something to send or report, left when a pass sends less than its budget) and the timers.

A window per peer address keeps many QPs from overrunning a receiver. RoCE counts on a lossless
fabric (PFC) or a congestion control (DCQCN) for that; over UDP, the receiving socket drops what
its buffer cannot hold (``net.core.rmem_max``: 208 KiB unless raised), and an RC QP that lost the
last packet of a message waits out its ACK timeout (67 ms at ``timeout`` 14). One QP's messages
are paced by its ACKs, but 256 QPs with a 64 KiB WRITE each are 16 MiB at once. So the engine
keeps the PSNs it has in flight with each peer (requests sent and not acknowledged, READ
responses asked for and not yet here) under ``peer_window``: half of what the link's socket
holds, at most 1 024 PSNs (``link.base.peer_window``). A QP begins a message only while its
peer's window is open, else it waits in ``window_waiting`` until an ACK opens the window again.
A message once begun goes on, so what is in flight always ends in a packet that asks for an ACK
(a READ's responses), whose arrival recounts its QP in ``_service``. A QP that timed out and
sends again from its oldest unacknowledged PSN keeps all it sent counted until the ACKs come: a
receiver that stalled past the timeout still holds the first copies, and a window that let
other QPs begin meanwhile would overflow its socket when it wakes, the resends lost with the
rest.

A direct QP (``direct``: its program posts WQEs by hand, through mlx5dv, and rings no doorbell
the NIC hears) has its doorbell records read at the start of every pass, and its host wakes the
engine on a short timer while one exists (``host.progress``). Its WQEs are read as the ordering
contract says (docs/architecture.md, "Direct verbs"): the record first, then only the WQEs
below it, and a WQE whose control segment does not hold its own index is not work yet (torn or
stale: ``torn_wqes`` counts it once); the engine stops there and reads it again on later passes.

A bug in the transport or the engine (an exception) is contained to its QP: the QP moves to
the error state with the reason in its error detail, an IBV_EVENT_QP_FATAL event and the
``engine_errors`` counter; the engine and the other QPs go on.
"""

from __future__ import annotations

import traceback
from collections import Counter, deque
from functools import partial
from typing import Final

from pyroce.cm.exchanges import NEVER, Exchanges
from pyroce.cm.ids import CmId
from pyroce.cm.manager import RdmaCm
from pyroce.ib.counters import Counters, folded
from pyroce.ib.enums import EventType
from pyroce.ib.reasons import Reason
from pyroce.link.base import Link, peer_window
from pyroce.link.faults import FaultInjector
from pyroce.nic.convert import work_from_wqe, write_completion
from pyroce.nic.events import AsyncEvent, EventQueue, EventQueues
from pyroce.nic.local_ops import execute_local
from pyroce.nic.memory import MrTable
from pyroce.nic.multicast import Multicast
from pyroce.nic.port import Clock, Port
from pyroce.nic.queues import HwCq, HwQp
from pyroce.nic.rings import DoorbellRecord
from pyroce.nic.timers import Timers
from pyroce.nic.tx import TxBatch
from pyroce.nic.wqe import LOCAL_OPCODES, FmCeSe, SendWqe, WqeError, WqeOpcode
from pyroce.transport.completion import Completion, WcOpcode, WcStatus
from pyroce.transport.demux import Demux
from pyroce.transport.rc import QpState
from pyroce.transport.responder import Responder
from pyroce.transport.ud import UdQp
from pyroce.transport.work import READS_AND_ATOMICS, Sge, new_recv_work
from pyroce.wire.bth import QP1
from pyroce.wire.psn import PSN_MASK

MAX_DATAGRAM: Final = 65536
RX_BATCH: Final = 64  # packets taken per engine pass before servicing QPs (and sending the ACKs they asked for)
TX_BUDGET: Final = 64  # packets one QP may send per pass
# While packets wait unread (a pass's RX_BATCH ran out first), due timers wait for them this long
# at most: after a stall of this process (a full collection, the host's scheduling) the ACKs a
# timer waits for are often among them, and firing first resends what they acknowledge
BACKLOG_GRACE_S: Final = 0.05
MAX_PASSES: Final = 64  # passes one ``run`` makes while work keeps coming (so a caller's poll returns)
MAX_EVENTS: Final = 1024  # async events each queue keeps for the driver to read (the host's queues hold this many)
# The doorbell register's records, as the drivers write them (``host.handoff`` carries them): the
# kind of doorbell in the top byte, the QPN below
SEND_DOORBELL: Final = 1 << 24  # the QP's send doorbell record moved
RECV_DOORBELL: Final = 2 << 24  # the QP's receive doorbell record moved
QPN_MASK: Final = 0xFFFFFF
# the events the NIC raises itself (a QP's transport raises COMM_EST and SQ_DRAINED: ``RcQp.events``)
CQ_ERR, QP_FATAL, DEVICE_FATAL = EventType.CQ_ERR, EventType.QP_FATAL, EventType.DEVICE_FATAL
PORT_ACTIVE, PORT_ERR, SRQ_LIMIT_REACHED = EventType.PORT_ACTIVE, EventType.PORT_ERR, EventType.SRQ_LIMIT_REACHED


class Engine:
    """The NIC's execution state: memory table, queues, port, timers and work lists."""

    def __init__(self, link: Link, event_queues: EventQueues[AsyncEvent], *, verify_icrc: bool = True,
                 faults: FaultInjector | None = None, clock: Clock) -> None:  # fmt: skip
        self.counters: Counter[str] = Counters()  # the device's events by name; ``counts()`` reads them all
        self.mrs = MrTable(self.counters)
        # Dirty ranges of other processes' memory (nic.memory): pushed before any CQE and at
        # the end of a pass; an empty dict, one test, when no MR is another process's.
        self._dirty = self.mrs.dirty
        # RDMA WRITEs' destinations placed and not yet written back: after the packets a pass
        # takes, before its output (the ACKs) and its end; an empty list when none is.
        self._unpushed = self.mrs.unpushed
        self._fresh = self.mrs.fresh  # spans of it pulled for this pass's sends
        self.qps: dict[int, HwQp] = {}
        self.cqs: dict[int, HwCq] = {}
        self.verify_icrc = verify_icrc
        self.port = Port(link, faults, self.counters, clock)
        self.peer_window = peer_window(link.receive_buffer)  # PSNs in flight with one peer at most
        self.demux = Demux(self._fail_qpn, self.counters)
        self.multicast = Multicast(self.demux.groups, self.port, self.counters)
        self.timers: Timers[HwQp] = Timers()
        self.rung: set[HwQp] = set()
        self.receives: set[HwQp] = set()  # receive queues with WQEs not yet fetched
        self.active: set[HwQp] = set()
        self._spare_active: set[HwQp] = set()  # empty: a pass swaps it for ``active`` as it services those
        self.direct: set[HwQp] = set()  # QPs whose doorbell records every pass reads (mlx5dv posting)
        self.direct_found = 0  # passes that found a direct QP's record moved (its host then looks again soon)
        self.sending = 0  # QPs with send WQEs not yet completed (HwQp.sending)
        self.in_flight: dict[str, int] = {}  # PSNs in flight with each peer address (the module's window)
        self.window_waiting: dict[str, dict[HwQp, None]] = {}  # QPs waiting to begin a message, oldest first
        self.rx_full = False  # the last pass stopped receiving at RX_BATCH, not at an empty socket
        self.now = 0.0  # the time of the last pass: what a command runs at (``send_posted``)
        # One async event queue per open context (its async_fd), and the device's own: where the
        # events of objects created with no queue of their own go (a driver other than the verbs)
        self.event_queues = event_queues
        self.events: EventQueue[AsyncEvent] = event_queues.open()
        self.last_error = ""  # traceback of the last engine failure (engine_errors counts them)
        self._rx_buf = bytearray(MAX_DATAGRAM)
        self._rx_view = memoryview(self._rx_buf)
        self._tx_batch = TxBatch(memoryview(bytearray(MAX_DATAGRAM)), self.port, self.counters)
        self.cm: RdmaCm | None = None  # the connection manager on QP1 (``attach_cm``)
        # What a pass looks at of it, held here: each attribute of the (interpreted) CM read
        # through it costs a generic lookup, ~190 instructions compiled, every pass
        self._cm_outbox: deque[tuple[bytes, bytes]] = deque(maxlen=0)
        self._cm_exchanges: Exchanges[CmId] | None = None

    def attach_cm(self, cm: RdmaCm) -> None:
        """Give QP1's packets to ``cm`` and send its MADs in the passes."""
        self.cm = cm
        self._cm_outbox, self._cm_exchanges = cm.qp1.outbox, cm.exchanges
        self.demux.datagram_qps[QP1] = cm.qp1
        cm.attach(self.port.route)

    def counts(self) -> Counter[str]:
        """The device's counters, with those its receive demux and transmit batch count per
        packet folded in (QPs count their own: ``RcQp.counts``)."""
        demux = self.demux
        return folded(self.counters, rcvd_bytes=demux.rcvd_bytes, predicted_pkts=demux.predicted_pkts,
                      sent_bytes=self._tx_batch.sent_bytes)  # fmt: skip

    # --- queues ---------------------------------------------------------------------------

    def add_qp(self, qp: HwQp) -> None:
        self.qps[qp.qpn] = qp
        receiver: UdQp | Responder
        if isinstance(qp.rc, UdQp):
            self.demux.datagram_qps[qp.qpn] = qp.rc
            receiver = qp.rc
        else:
            self.demux.qps[qp.qpn] = qp.rc
            receiver = qp.rc.responder
        if qp.srq is None:  # an SRQ's ring is read when a message needs a WQE (nic.srq)
            receiver.refill = partial(self.fetch_receives, qp)

    def send_posted(self, qpn: int) -> None:
        """Fetch and send now what the QP's doorbell announced: a NIC fetches WQEs as the doorbell
        arrives, so a QP destroyed just after posting (a program's last datagrams, then its
        teardown) has sent them; here they would wait for the next pass, after the QP is gone."""
        qp = self.qps.get(qpn)
        if qp is None or qp not in self.rung:
            return
        self.rung.discard(qp)
        try:
            self.fetch(qp)
            self._service(qp, self.now)
        except Exception as exc:  # noqa: BLE001 - contained to the QP
            self._fail(qp, exc, "send queue")
        if self._tx_batch.segments:
            self._tx_batch.flush()

    def remove_qp(self, qpn: int) -> HwQp | None:
        qp = self.qps.pop(qpn, None)
        self.demux.qps.pop(qpn, None)
        self.demux.datagram_qps.pop(qpn, None)
        self.demux.peers.pop(qpn, None)
        self.multicast.detach_all(qpn)
        if qp is not None:
            self.sending -= qp.sending
            self.rung.discard(qp)
            self.receives.discard(qp)
            self.active.discard(qp)
            self.direct.discard(qp)
            self.timers.cancel(qp)
            self._recount(qp, None, 0)
        return qp

    def make_direct(self, qp: HwQp) -> None:
        """From now on the QP's doorbell records are read on every pass, rung or not."""
        qp.direct = True
        self.direct.add(qp)

    def doorbells(self, records: list[int]) -> None:
        """Doorbell records handed over by the drivers: QPs with new send WQEs, and with new
        receive WQEs (fetched before the next packet is read, as a NIC reads its receive queue).
        A QP rung twice is in each set once; a QPN no longer a QP's is ignored."""
        qps = self.qps
        for record in records:
            qp = qps.get(record & QPN_MASK)
            if qp is not None:
                if record & SEND_DOORBELL:
                    self.rung.add(qp)
                if record & RECV_DOORBELL:
                    self.receives.add(qp)

    @property
    def has_work(self) -> bool:
        """Whether a pass now would do something without anything new arriving."""
        return bool(self.rung or self.active or self.receives or self.port.has_loopback
                    or (self.cm is not None and self.cm.qp1.outbox))  # fmt: skip

    def next_deadline(self) -> float | None:
        """When a pass next has work with nothing new arriving (a timer, a held datagram, the
        CM's clocks)."""
        deadlines = [t for t in (self.timers.next_deadline(), self.port.next_due()) if t is not None]
        if self.cm is not None and self.cm.exchanges.deadline != NEVER:
            deadlines.append(self.cm.exchanges.deadline)
        return min(deadlines) if deadlines else None

    # --- passes ---------------------------------------------------------------------------

    def run(self, clock: Clock, receive: bool = True) -> None:
        """Passes while work is known to be waiting: the loopback, a rung doorbell, a QP with
        more to send, or a full receive batch (at most ``MAX_PASSES``, so a caller's poll
        returns). Packets sent to another host cannot be answered within this call, so a pass
        that only sent them is the last: another would be a receive that finds nothing."""
        for _ in range(MAX_PASSES):
            if not self.step(clock(), receive) or not (self.port.has_loopback or self.rung or self.active
                                                       or self.rx_full):  # fmt: skip
                return

    def step(self, now: float, receive: bool = True) -> bool:
        """One pass at time ``now``; ``receive=False`` leaves the link unread (a doorbell's
        pass: what it sends cannot be answered yet). Whether anything moved."""
        moved = False
        self.rx_full = False
        self.now = now
        if self.direct:
            self._notice_direct()
        while self.rung:
            qp = self.rung.pop()
            # New work goes out before the receive below: a request on its way while this
            # pass looks at the socket, not after (it is the latency of a lone post).
            try:
                self.fetch(qp)
                self._service(qp, now)
            except Exception as exc:  # noqa: BLE001 - contained to the QP
                self._fail(qp, exc, "send queue")
            moved = True
        # Each check below saves the pass a call when there is nothing of its kind to do.
        tx_batch, port = self._tx_batch, self.port
        if tx_batch.segments:
            tx_batch.flush()
        if port.delayed:
            moved = port.release_due(now) or moved
        if self.receives:
            for qp in self.receives:  # (nothing a fetch does adds to it, or takes from it)
                try:
                    self.fetch_receives(qp)
                except Exception as exc:  # noqa: BLE001 - contained to the QP
                    self._fail(qp, exc, "receive queue")
                self.active.add(qp)  # a WQE posted to a QP in error completes (flushed) at once
            self.receives.clear()
        moved = self._receive(now, receive) or moved
        if self._unpushed:
            self.mrs.push_placed()  # what the WRITEs placed, in as few pushes as it can, before their ACKs
        deadlines = self.timers.heap
        if deadlines and deadlines[0][0] <= now and (not self.rx_full or deadlines[0][0] <= now - BACKLOG_GRACE_S):
            self._fire_timers(now)
        active = self.active
        if active:
            # Swapped for the empty spare, not copied (a copy was ~600 instructions a pass):
            # ``_service`` puts back a QP with more to send, a QP it wakes waits for the next
            # pass, as one that fails stays out
            self.active, self._spare_active = self._spare_active, active
            for qp in active:
                try:
                    moved = self._service(qp, now) or moved
                except Exception as exc:  # noqa: BLE001 - contained to the QP
                    self._fail(qp, exc, "output")
            active.clear()
        cm, exchanges = self.cm, self._cm_exchanges
        if cm is not None and exchanges is not None and (self._cm_outbox or exchanges.deadline <= now):
            moved = self._service_cm(cm, now) or moved
        if tx_batch.segments:
            tx_batch.flush()  # one GSO send for what the QPs had for the same peer
        if self._dirty or self._unpushed:
            self.mrs.flush()  # what an RDMA WRITE placed reaches another process's memory
        if self._fresh:
            self._fresh.clear()  # what the next pass reads of another process's memory is pulled again
        return moved

    def _fire_timers(self, now: float) -> None:
        """The transport timers due at ``now``; their QPs become active (a retransmission)."""
        for qp in self.timers.due(now):
            try:
                qp.rc.handle_timer(now)
            except Exception as exc:  # noqa: BLE001 - contained to the QP
                self._fail(qp, exc, "timer")
                continue
            self.active.add(qp)

    def _receive(self, now: float, socket: bool) -> bool:
        """Up to ``RX_BATCH`` packets from the port into the transport."""
        demux, port, verify_icrc = self.demux, self.port, self.verify_icrc
        taken = 0
        while taken < RX_BATCH:
            got = port.receive(self._rx_buf, self._rx_view, socket)
            if got is None:
                break
            data, step, path, source, checked = got
            demux.receive(data, step, None if checked or not verify_icrc else path, now, source, path.ip)
            taken += -(-len(data) // step) if data else 1  # the packets of a GRO run
        else:
            self.rx_full = True  # the batch ran out before the socket did
        if demux.touched:
            qps, active = self.qps, self.active
            for qpn in demux.touched:
                qp = qps.get(qpn)
                if qp is not None:
                    active.add(qp)
            demux.touched.clear()
        return taken > 0

    def fetch(self, qp: HwQp) -> None:
        """Take new WQEs from the QP's rings (each field read once; see nic.wqe)."""
        rc = qp.rc
        qp.local_held = False
        recv_producer, producer = qp.doorbell.producers()
        # Send sources in another process's memory, pulled together (``MrTable.prefetch``)
        sources: list[Sge] | None = [] if self.mrs.mirrors else None
        while qp.sq_consumer & 0xFFFF != producer:
            counter = qp.sq_consumer & 0xFFFF
            try:
                if qp.direct and self._torn(qp, qp.sq.wqe_index(qp.sq_consumer)):
                    break  # the record moved before the WQE was written: not work yet
                wqe, after = qp.sq.fetch(qp.sq_consumer)
                if qp.direct and self._torn(qp, wqe.wqe_index):
                    break  # written while the engine copied it: read again on a later pass
                if wqe.opcode in LOCAL_OPCODES:
                    if rc.send_state()[0] or rc.state is QpState.SQD:
                        qp.local_held = True  # in order: it runs once the WQEs before it complete
                        break  # (_note_sending); not in SQD
                    qp.sq_consumer = after
                    self._local(qp, wqe)
                    continue
                qp.sq_consumer = after
                work = work_from_wqe(wqe)
                rc.post_send(work)
                if sources is not None and work.op not in READS_AND_ATOMICS:  # (their SGEs are destinations)
                    sources.extend(work.sges)
            except WqeError as exc:
                self.counters["bad_wqes"] += 1
                rc.error_detail = f"WQE {counter}: {exc}"
                rc.completions.append(Completion(False, counter, WcStatus.LOC_QP_OP_ERR, WcOpcode.SEND,
                                                 vendor_err=Reason.BAD_WQE))  # fmt: skip
                rc.enter_error()
                # What follows a WQE that cannot be decoded cannot be found either: the ring is
                # taken as read up to its producer, so the error is reported once.
                qp.sq_consumer += (producer - qp.sq_consumer) & 0xFFFF
                break
        if sources is not None and len(sources) > 1:
            self.mrs.prefetch(sources)
        if qp.rq_consumer & 0xFFFF != recv_producer:
            self.fetch_receives(qp, recv_producer)
        self.active.add(qp)

    def fetch_receives(self, qp: HwQp, producer: int = -1) -> bool:
        """Take the receive WQEs posted up to ``producer`` (-1: as far as the doorbell record
        says now); whether there were any. A message that finds the QP's receive queue empty
        asks here before it is refused (RNR NAK, or dropped): the record is what the driver
        posted, while the record in the doorbell pipe that announced it may not be taken yet
        (the pipe is read between passes, and a send doorbell read from its record, as a QP's
        move to RTS does, can run ahead of it)."""
        if producer < 0:
            producer = qp.doorbell.read(DoorbellRecord.RECV)
        rc, start = qp.rc, qp.rq_consumer
        while qp.rq_consumer & 0xFFFF != producer:
            rc.post_recv(new_recv_work((qp.rq_consumer & 0xFFFF, qp.rq.fetch(qp.rq_consumer))))
            qp.rq_consumer += 1
        return qp.rq_consumer != start

    def _notice_direct(self) -> None:
        """Direct QPs whose doorbell records moved past what the engine read: as if rung (a
        QP waiting at a torn WQE is looked at again, which costs one index compare, but is no news)."""
        moved = False  # news: a record moved, not a torn WQE looked at again
        for qp in self.direct:
            recv_producer, send_producer = qp.doorbell.producers()
            if send_producer != qp.sq_consumer & 0xFFFF:
                self.rung.add(qp)
                moved = moved or qp.stalled != qp.sq_consumer
            if recv_producer != qp.rq_consumer & 0xFFFF and qp.srq is None:
                self.receives.add(qp)
                moved = True
        self.direct_found += moved

    def _torn(self, qp: HwQp, index: int) -> bool:
        """Whether the direct QP's next WQE is not written yet (its control segment holds
        ``index``, not the counter's): counted once per slot, and the engine waits there."""
        if index == qp.sq_consumer & 0xFFFF:
            return False
        if qp.stalled != qp.sq_consumer:
            qp.stalled = qp.sq_consumer
            self.counters["torn_wqes"] += 1
        return True

    def _local(self, qp: HwQp, wqe: SendWqe) -> None:
        """Run a BIND_MW or LOCAL_INV WQE and complete it; a refused one fails the QP."""
        rc = qp.rc
        opcode = WcOpcode.BIND_MW if wqe.opcode is WqeOpcode.BIND_MW else WcOpcode.LOCAL_INV
        if rc.state is QpState.ERR:
            rc.completions.append(Completion(False, wqe.wqe_index, WcStatus.WR_FLUSH_ERR, opcode,
                                             vendor_err=Reason.FLUSHED))  # fmt: skip
            return
        status, detail = execute_local(self.mrs, wqe, qp.qpn, rc.config.pdn)
        if status is WcStatus.SUCCESS:
            if wqe.fm_ce_se & FmCeSe.CQ_UPDATE:
                rc.completions.append(Completion(False, wqe.wqe_index, status, opcode))
            return
        rc.error_detail = detail
        rc.completions.append(Completion(False, wqe.wqe_index, status, opcode, vendor_err=Reason.LOCAL_MEMORY_OP))
        rc.enter_error()

    def _service(self, qp: HwQp, now: float) -> bool:
        """Send what the QP has to send, write its completions, then raise its async events;
        False if it had nothing to send."""
        rc = qp.rc
        batch, port = self._tx_batch, self.port
        reopened: str | None = None  # the peer whose window this QP's own count opened
        if isinstance(rc, UdQp):
            datagrams, sent = rc.output(now, TX_BUDGET, port.route)
            for address, packet in datagrams:  # each to the address and QP its WR named
                batch.send(address, packet.bth.dqpn, port.link.tx_path(address), [packet])
        elif (peer := qp.peer) is not None:
            in_flight = self.in_flight
            window_open = in_flight.get(peer, 0) < self.peer_window
            items, sent = rc.output(now, TX_BUDGET, window_open)
            if items:  # (the QP counts them: sent_pkts)
                batch.send(peer, rc.config.dqpn, qp.tx_path, items)  # type: ignore[arg-type]
            # Its PSNs in flight, counted here without a call: all it ever sent that is not
            # acknowledged (``high_psn``), resends or not. After an ACK timeout it goes back
            # (``psn``), but what it sent first may still wait in the peer's socket.
            requester = rc.requester
            psns = (requester.high_psn - requester.comp_psn) & PSN_MASK if requester.queue else 0
            if psns != qp.in_flight or peer is not qp.window_peer:
                if peer is qp.window_peer:
                    in_flight[peer] += psns - qp.in_flight
                    qp.in_flight = psns
                else:
                    self._recount(qp, peer, psns)
            if not window_open:
                if requester.has_output:
                    self.window_waiting.setdefault(peer, {})[qp] = None
                    if in_flight.get(peer, 0) < self.peer_window:
                        reopened = peer  # its own ACKs opened it: no other QP may be left to wake it
            elif self.window_waiting.get(peer):
                self._wake(peer)
        else:
            sent = 0
        if rc.completions:
            self._complete(qp)
        if rc.events:  # after the CQEs: SQ_DRAINED's reader finds the drained WQEs' completions
            for event_type, reason in rc.events:
                qp.events.put(AsyncEvent(event_type, qp.qpn, reason))
            rc.events.clear()
        sending, deadline = rc.send_state()
        if sending is not qp.sending:
            self._note_sending(qp, sending)
        timers = self.timers
        armed = timers.deadlines.get(qp)
        if armed is not deadline and armed != deadline:  # no call when the timer stays as it is (none, often)
            timers.arm(qp, deadline)
        if sent < TX_BUDGET:
            # Nothing more can go now (done, or waiting for an ACK, credits or a timer): a
            # packet, a doorbell or a timer makes the QP active again.
            self.active.discard(qp)
        else:
            self.active.add(qp)  # more to send: a pass's set of them was swapped out (``step``)
        if reopened is not None:
            self._wake(reopened)  # after the above, which would take this QP out again
        return bool(sent)

    def _recount(self, qp: HwQp, peer: str | None, psns: int) -> None:
        """``qp`` has ``psns`` PSNs in flight with ``peer`` now (None: it is gone, and waits for
        no window): its count moves from the peer it was counted with."""
        counted_with = qp.window_peer
        if counted_with is not None:
            self.in_flight[counted_with] -= qp.in_flight
        qp.window_peer, qp.in_flight = peer, psns
        if peer is not None:
            self.in_flight[peer] = self.in_flight.get(peer, 0) + psns
            return
        for waiting in self.window_waiting.values():
            waiting.pop(qp, None)
        if counted_with is not None:
            self._wake(counted_with)  # what it held may have been all that kept the window shut

    def _wake(self, peer: str) -> None:
        """If the window with ``peer`` is open, the QP that has waited longest for it may begin
        its message (once serviced, it wakes the next while the window stays open)."""
        waiting = self.window_waiting.get(peer)
        if waiting and self.in_flight.get(peer, 0) < self.peer_window:
            woken = next(iter(waiting))
            del waiting[woken]
            self.active.add(woken)

    def _service_cm(self, cm: RdmaCm, now: float) -> bool:
        """The connection manager's timers and MADs; whether it sent any."""
        if cm.exchanges.deadline <= now:
            cm.handle_timer(now)
        if not cm.qp1.outbox:
            return False
        batch, port = self._tx_batch, self.port
        datagrams = cm.qp1.output(TX_BUDGET, port.route)
        for peer, packet in datagrams:
            batch.send(peer, packet.bth.dqpn, port.link.tx_path(peer), [packet])
        return bool(datagrams)

    def _note_sending(self, qp: HwQp, sending: bool) -> None:
        """Keep ``sending`` (QPs with send work not yet completed) true to the QP's queue, which
        has send work now if ``sending``."""
        if sending is not qp.sending:
            qp.sending = sending
            self.sending += 1 if sending else -1
            if not sending and qp.local_held:
                self.rung.add(qp)  # a BIND_MW or LOCAL_INV waited for the queue to drain

    def _complete(self, qp: HwQp) -> None:
        """Write the QP's completions into its CQs (a full CQ loses the CQE: counted), after the
        data of another process's memory is there (``MrTable.flush``)."""
        if self._dirty or self._unpushed:
            self.mrs.flush()
        for completion in qp.rc.completions:
            cq = qp.recv_cq if completion.is_recv else qp.send_cq
            if not write_completion(cq, qp.qpn, completion):
                self.counters["cq_overflow"] += 1
                cq.events.put(AsyncEvent(CQ_ERR, cq.cqn, f"CQ overrun: a completion of QP 0x{qp.qpn:x} was lost"))
        qp.rc.completions.clear()

    # --- failures -------------------------------------------------------------------------

    def _fail(self, qp: HwQp, exc: Exception, where: str) -> None:
        """An exception escaped the transport or the engine while handling ``qp``."""
        self.counters["engine_errors"] += 1
        self.last_error = "".join(traceback.format_exception(exc))
        self.fail_qp(qp, f"pyroce engine error ({where}): {type(exc).__name__}: {exc}", Reason.ENGINE_ERROR)

    def fail_qp(self, qp: HwQp, detail: str, reason: Reason) -> None:
        """Move the QP to ERROR (its oldest work request fails with GENERAL_ERR and ``reason``,
        the rest flush), say why, raise QP_FATAL, and leave it out of later passes."""
        rc = qp.rc
        rc.error_detail = detail
        try:
            rc.enter_error()
        except Exception:  # noqa: BLE001 - the state was broken: stop it without flushing
            rc.state = QpState.ERR
        if rc.completions:  # the oldest work request reports the failure; the rest are flushed
            rc.completions[0] = rc.completions[0]._replace(status=WcStatus.GENERAL_ERR, vendor_err=reason)
        qp.events.put(AsyncEvent(QP_FATAL, qp.qpn, detail))
        self.rung.discard(qp)
        self.active.discard(qp)
        self.timers.cancel(qp)
        self._note_sending(qp, rc.send_state()[0])
        try:
            self._complete(qp)
        except Exception:  # noqa: BLE001 - nothing more can be reported
            rc.completions.clear()

    def _fail_qpn(self, qpn: int, exc: Exception) -> None:
        qp = self.qps.get(qpn)
        if qp is not None:
            self._fail(qp, exc, "receive")
        else:  # QP1 (the connection manager): counted and kept, the packet dropped
            self.counters["engine_errors"] += 1
            self.last_error = "".join(traceback.format_exception(exc))

    def fail_device(self, exc: Exception) -> None:
        """An exception outside any one QP's work: counted, kept, and reported as
        IBV_EVENT_DEVICE_FATAL; the engine goes on with its next pass."""
        detail = f"pyroce engine error: {type(exc).__name__}: {exc}"
        self.counters["engine_errors"] += 1
        self.last_error = "".join(traceback.format_exception(exc))
        self.event_queues.broadcast(AsyncEvent(DEVICE_FATAL, 0, detail))
