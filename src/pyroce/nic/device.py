"""The NIC: a device's command interface and the engine that executes work from its rings.

The verbs layer reaches a ``NicDevice`` only by commands (``alloc_pd``, ``reg_mr``,
``create_cq``, ``create_qp``, ``modify_qp``, ``destroy_*``) and through memory: WQE rings and
doorbell records it writes, CQE rings it reads. ``ring_doorbell(qpn)`` is the doorbell
register: a hint that the QP's doorbell record moved.

Progress (docs/architecture.md, "Progress model"): one engine thread per device waits in
``select`` on the link's socket and a wake-up pipe, so it holds no GIL while idle; and a
thread that rings a doorbell or polls an empty CQ runs the engine itself when the engine lock
is free, so a busy application makes progress without waiting for another thread to be
scheduled. All engine state is guarded by that one lock.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import select
import threading
import time
import traceback
from collections import Counter, deque
from dataclasses import dataclass

from pyroce.ib.limits import MAX_MSG_SZ
from pyroce.link.faults import FaultConfig, FaultInjector
from pyroce.link.udp import UdpLink
from pyroce.nic.cqe import GENERAL_ERR_SYNDROME, SYNDROME_OF_STATUS, Cqe, CqeOpcode, new_cqe
from pyroce.nic.memory import MemoryRegion, MrTable
from pyroce.nic.rings import CqRing, DoorbellRecord, SendRing
from pyroce.nic.tx import TxBatch
from pyroce.nic.wqe import SendWqe, WqeError, WqeOpcode, decode_recv_wqe
from pyroce.transport.completion import Completion, WcFlag, WcOpcode, WcStatus
from pyroce.transport.memory import Access
from pyroce.transport.rc import QpConfig, QpState, RcQp
from pyroce.transport.reasons import Reason
from pyroce.transport.work import RecvWork, SendWork, WorkOp
from pyroce.wire.errors import MalformedPacket
from pyroce.wire.framing import RocePath
from pyroce.wire.opcodes import BTH_LEN
from pyroce.wire.packet import Packet, PacketRun, parse_packet

FIRST_QPN = 0x11  # rxe's first QP number; 0 and 1 are the special QPs
MAX_DATAGRAM = 65536
RX_BATCH = 64  # packets taken per engine pass before servicing QPs (and sending the ACKs they asked for)
TX_BUDGET = 64  # packets one QP may send per pass
IDLE_WAIT_S = 0.5  # longest engine sleep with no timer armed
INLINE_GRACE_S = 0.002  # the engine thread stands back while the application drove progress this recently
PUBLISH_EVERY_S = 1.0  # how often the engine thread writes its counters for ``pyroce stats``

WORK_OPS = {
    WqeOpcode.SEND: WorkOp.SEND,
    WqeOpcode.SEND_IMM: WorkOp.SEND_WITH_IMM,
    WqeOpcode.SEND_INVAL: WorkOp.SEND_WITH_INV,
    WqeOpcode.RDMA_WRITE: WorkOp.RDMA_WRITE,
    WqeOpcode.RDMA_WRITE_IMM: WorkOp.RDMA_WRITE_WITH_IMM,
    WqeOpcode.RDMA_READ: WorkOp.RDMA_READ,
    WqeOpcode.ATOMIC_CS: WorkOp.ATOMIC_CMP_AND_SWP,
    WqeOpcode.ATOMIC_FA: WorkOp.ATOMIC_FETCH_AND_ADD,
}
REQ_WQE_OPCODE = {
    WcOpcode.SEND: WqeOpcode.SEND,
    WcOpcode.RDMA_WRITE: WqeOpcode.RDMA_WRITE,
    WcOpcode.RDMA_READ: WqeOpcode.RDMA_READ,
    WcOpcode.COMP_SWAP: WqeOpcode.ATOMIC_CS,
    WcOpcode.FETCH_ADD: WqeOpcode.ATOMIC_FA,
}


def work_from_wqe(wqe: SendWqe) -> SendWork:
    """The transport's view of a decoded send WQE (``WqeError`` for opcodes not executed)."""
    op = WORK_OPS.get(wqe.opcode)
    if op is None:
        raise WqeError(f"{wqe.opcode.name} WQEs are not supported")
    flags = wqe.fm_ce_se
    return SendWork(wqe.wqe_index, op, wqe.sges, bool(flags & 0x08), bool(flags & 0x02), bool(flags & 0x80),
                    wqe.imm, wqe.raddr or 0, wqe.rkey or 0, wqe.swap_add or 0, wqe.compare or 0,
                    wqe.inline)  # fmt: skip


@dataclass(eq=False)
class HwCq:
    """A completion queue as the NIC sees it: the ring it writes and the consumer index
    record (be32) the verbs layer publishes."""

    cqn: int
    ring: CqRing
    consumer_record: memoryview
    producer: int = 0

    def push(self, cqe: Cqe) -> bool:
        """Write ``cqe``; False if the CQ is full (IBA 11.4.2.1: an overrun, the CQE is lost)."""
        consumer = int.from_bytes(self.consumer_record, "big")
        if (self.producer - consumer) & 0xFFFFFF >= self.ring.cqe_count:
            return False
        self.producer = self.ring.produce(self.producer, cqe)
        return True


@dataclass(eq=False)
class HwQp:
    qpn: int
    rc: RcQp
    sq: SendRing
    rq_buf: memoryview
    rq_count: int
    rq_stride: int
    doorbell: DoorbellRecord
    send_cq: HwCq
    recv_cq: HwCq
    peer: str | None = None
    sq_consumer: int = 0
    rq_consumer: int = 0
    timer_at: float | None = None  # the deadline this QP has in the engine's timer heap
    sending: bool = False  # has send WQEs not yet completed (counted in NicDevice._sending)


class NicDevice:
    """One pyroce device: memory table, queues, link and engine thread."""

    def __init__(self, name: str, address: str, *, verify_icrc: bool = True, inline_progress: bool = True,
                 faults: FaultConfig | None = None, stats_dir: str | None = None) -> None:  # fmt: skip
        self.name = name
        self.address = address
        self.verify_icrc = verify_icrc
        self.inline_progress = inline_progress  # False: only the engine thread runs the engine
        self.faults = FaultInjector(faults) if faults is not None and faults.active else None
        self.stats_file = os.path.join(stats_dir, f"{os.getpid()}-{name}.json") if stats_dir else None
        self.link = UdpLink(address)
        self.mrs = MrTable()
        self.counters: Counter[str] = Counter()
        self.qps: dict[int, HwQp] = {}
        self.cqs: dict[int, HwCq] = {}
        self._next_pdn = 1
        self._next_cqn = 1
        self._next_qpn = FIRST_QPN
        self._lock = threading.Lock()
        self._rung: set[HwQp] = set()
        self._pending_receives: set[HwQp] = set()  # receive queues with WQEs not yet fetched
        self._active: set[HwQp] = set()
        self._sending = 0  # QPs with send WQEs not yet completed (HwQp.sending)
        self._timers: list[tuple[float, int, HwQp]] = []  # (deadline, order, QP); stale entries skipped
        self._loopback: deque[bytes] = deque()
        self._delayed: list[tuple[float, int, str, bytes]] = []  # (due, order, peer, datagram) held by faults
        self._order = itertools.count()
        self._retired: Counter[str] = Counter()  # counters of destroyed QPs
        self._published = 0.0
        self._inline_at = 0.0  # when a caller last ran the engine (inline progress)
        self._rx_full = False  # the last pass stopped receiving at RX_BATCH, not at an empty socket
        self.last_error: str | None = None  # traceback of the last engine failure (engine_errors counts them)
        self._rx_buf = bytearray(MAX_DATAGRAM)
        self._rx_view = memoryview(self._rx_buf)
        self._tx_buf = bytearray(MAX_DATAGRAM)
        self._tx_view = memoryview(self._tx_buf)
        self._tx_batch = TxBatch(self._tx_view, self.link, self._transmit, self.counters)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = False
        self._wake_pending = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-engine", daemon=True)
        self._thread.start()

    # --- commands -----------------------------------------------------------------------

    def alloc_pd(self) -> int:
        with self._lock:
            pdn, self._next_pdn = self._next_pdn, self._next_pdn + 1
            return pdn

    def reg_mr(self, pdn: int, view: memoryview, addr: int, access: Access) -> MemoryRegion:
        with self._lock:
            return self.mrs.register(pdn, view, addr, access)

    def dereg_mr(self, region: MemoryRegion) -> None:
        with self._lock:
            self.mrs.deregister(region)

    def create_cq(self, buf: memoryview, cqe_count: int, consumer_record: memoryview) -> HwCq:
        with self._lock:
            cq = HwCq(self._next_cqn, CqRing(buf, cqe_count), consumer_record)
            self._next_cqn += 1
            self.cqs[cq.cqn] = cq
            return cq

    def resize_cq(self, cq: HwCq, buf: memoryview, cqe_count: int, consumer: int) -> None:
        """Move the CQ to a new ring; the CQEs not yet polled (from ``consumer`` on) move with
        it, in order, to the start of the new ring, and the consumer index restarts at 0."""
        with self._lock:
            pending = []
            for index in range(consumer, cq.producer):
                cqe = cq.ring.poll(index)
                if cqe is not None:
                    pending.append(cqe)
            if len(pending) > cqe_count:
                raise ValueError(f"{len(pending)} completions do not fit {cqe_count} entries")
            cq.ring = CqRing(buf, cqe_count)
            cq.producer = 0
            cq.consumer_record[:] = bytes(4)
            for cqe in pending:
                cq.producer = cq.ring.produce(cq.producer, cqe)

    def destroy_cq(self, cq: HwCq) -> None:
        with self._lock:
            self.cqs.pop(cq.cqn, None)

    def create_qp(self, pdn: int, send_cq: HwCq, recv_cq: HwCq, sq_buf: memoryview, sq_wqebbs: int,
                  rq_buf: memoryview, rq_count: int, rq_stride: int, doorbell: memoryview) -> int:  # fmt: skip
        with self._lock:
            qpn = self._next_qpn
            while qpn in self.qps or qpn < FIRST_QPN:
                qpn = (qpn + 1) & 0xFFFFFF
            self._next_qpn = (qpn + 1) & 0xFFFFFF
            rc = RcQp(QpConfig(qpn=qpn, pdn=pdn, max_msg_sz=MAX_MSG_SZ), self.mrs)
            self.qps[qpn] = HwQp(qpn, rc, SendRing(sq_buf, sq_wqebbs), rq_buf, rq_count, rq_stride,
                                 DoorbellRecord(doorbell), send_cq, recv_cq)  # fmt: skip
            return qpn

    def modify_qp(self, qpn: int, state: QpState, changes: dict[str, object], peer: str | None = None) -> None:
        """Apply attribute ``changes`` (``QpConfig`` fields) and move to ``state``."""
        with self._lock:
            qp = self.qps[qpn]
            for name, value in changes.items():
                setattr(qp.rc.config, name, value)
            if peer is not None:
                qp.peer = peer
            if state is QpState.RESET:
                # IBA 10.3.1: a reset QP starts with empty queues; what it had not reported is gone
                qp.rc.completions.clear()
                qp.sq_consumer = qp.rq_consumer = 0
                self._rung.discard(qp)
                self._pending_receives.discard(qp)
            elif qp in self._pending_receives:
                self._pending_receives.discard(qp)
                self._rung.add(qp)  # e.g. to ERROR: its posted receives must be there to be flushed
            qp.rc.modify(state)
            self._active.add(qp)
        self._wake()

    def destroy_qp(self, qpn: int) -> None:
        with self._lock:
            qp = self.qps.pop(qpn, None)
            if qp is not None:
                self._retired.update(qp.rc.counters)
                self._sending -= qp.sending
                self._rung.discard(qp)
                self._pending_receives.discard(qp)
                self._active.discard(qp)

    def ring_doorbell(self, qpn: int) -> None:
        """The doorbell register: the QP's doorbell record has new producer counters.

        A lone request (no send work in flight on this device) runs the engine at once: it
        goes out now. Otherwise, doorbell batching: while the application polls (it ran the
        engine in the last ``INLINE_GRACE_S``) to reap the completions of what is in flight,
        new WQEs wait for its next poll, which fetches and sends all that were posted by
        then, on every QP, in GSO batches; if it does not poll, the engine thread takes them."""
        qp = self.qps.get(qpn)
        if qp is not None:
            self._rung.add(qp)
            if self.inline_progress and not self._sending and not qp.rc.requester.queue:
                self.kick(receive=False)
            elif time.monotonic() - self._inline_at >= INLINE_GRACE_S:
                self._wake()  # nobody polls: the engine thread takes it

    def note_receives(self, qpn: int) -> None:
        """New receive WQEs: the engine reads them when a message needs one (as a NIC reads its
        receive queue on arrival), so posting receives costs no engine pass."""
        qp = self.qps.get(qpn)
        if qp is not None:
            self._pending_receives.add(qp)

    def kick(self, receive: bool = True) -> None:
        """Run the engine in the calling thread (inline progress). If the engine thread holds
        the lock, wait for it in ``acquire``, which releases the GIL: spinning instead would
        keep the GIL from the engine thread for a whole switch interval (performance.md).

        ``receive=False`` (a doorbell): new work goes out, the socket is not read. The answers
        to what this call sends cannot be there yet; the next poll, or the engine thread,
        reads them. Only a polling caller holds the engine thread back."""
        if self.inline_progress:
            with self._lock:
                self._progress(receive)
                if receive:
                    self._inline_at = time.monotonic()

    def polled(self) -> None:
        """An application found completions waiting without running the engine: it is still
        polling, so its next empty poll runs the engine, and the engine thread stays back (a
        doorbell in the meantime need not wake it; with many QPs, reaping one pass's
        completions and posting again takes longer than ``INLINE_GRACE_S``)."""
        self._inline_at = time.monotonic()

    def stats(self) -> dict[str, int]:
        """Device counters and the sum of every QP's (rxe hw_counters names where rxe has one)."""
        with self._lock:
            return self._stats()

    def _stats(self) -> dict[str, int]:
        total = Counter(self.counters)
        total.update(self._retired)
        for qp in self.qps.values():
            total.update(qp.rc.counters)
        if self.faults is not None:
            total.update({f"injected_{name}": n for name, n in self.faults.counters.items()})
        return dict(sorted(total.items()))

    def qp_error_detail(self, qpn: int) -> str:
        """One line on why the QP's last failed work request failed ("" if none has)."""
        with self._lock:
            qp = self.qps.get(qpn)
            return qp.rc.error_detail if qp is not None else ""

    def qp_stats(self, qpn: int) -> dict[str, int]:
        """One QP's counters (``KeyError`` if there is no such QP)."""
        with self._lock:
            return dict(sorted(self.qps[qpn].rc.counters.items()))

    def publish_stats(self) -> None:
        """Write the counters where ``pyroce stats`` reads them (like rxe's sysfs hw_counters)."""
        if self.stats_file is None:
            return
        with self._lock:
            document = {"device": self.name, "address": self.address, "pid": os.getpid(), "counters": self._stats(),
                        "qps": {f"0x{qpn:x}": dict(sorted(qp.rc.counters.items())) for qpn, qp in self.qps.items()}}  # fmt: skip
        partial = self.stats_file + ".tmp"
        try:
            with open(partial, "w") as handle:
                json.dump(document, handle)
            os.replace(partial, self.stats_file)
        except OSError:
            self.stats_file = None  # nowhere to write: stop trying

    def close(self) -> None:
        self._stopping = True
        self._wake()
        self._thread.join()
        if self.stats_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.stats_file)
        self.link.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # --- engine -------------------------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # a wake-up is already pending

    def _run(self) -> None:
        sources: list[int] = [self.link.fileno(), self._wake_r]
        while not self._stopping:
            quiet = time.monotonic() - self._inline_at
            if quiet < INLINE_GRACE_S:
                # The application is polling and runs the engine itself. Waking for its
                # packets or doorbells would only make this thread take the GIL from it (and
                # make it wait for the lock): sleep until the application may have gone quiet.
                time.sleep(INLINE_GRACE_S - quiet)
                continue
            select.select(sources, [], [], self._wait_time())
            self._drain_wakes()
            if time.monotonic() - self._inline_at < INLINE_GRACE_S:
                continue  # the application took over while this thread slept
            with self._lock:
                try:
                    self._progress()
                except Exception:  # noqa: BLE001 - the engine must outlive any bug; keep the evidence
                    self.counters["engine_errors"] += 1
                    self.last_error = traceback.format_exc()
            now = time.monotonic()
            if now - self._published >= PUBLISH_EVERY_S:
                self._published = now
                self.publish_stats()

    def _drain_wakes(self) -> None:
        self._wake_pending = False
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass

    def _wait_time(self) -> float:
        if self._rung or self._active or self._loopback:
            return 0.0
        deadlines = [self._timers[0][0]] if self._timers else []
        if self._delayed:
            deadlines.append(self._delayed[0][0])
        if self.stats_file is not None:
            deadlines.append(self._published + PUBLISH_EVERY_S)
        if not deadlines:
            return IDLE_WAIT_S
        return max(0.0, min(deadlines) - time.monotonic())

    def _progress(self, receive: bool = True) -> None:
        """Engine passes while work is known to be waiting: the internal loopback, a rung
        doorbell, a QP with more to send, or a full receive batch (bounded, so a caller's poll
        returns). Packets sent to another host cannot be answered within this call, so a pass
        that only sent them is the last: another would be a receive that finds nothing."""
        for _ in range(64):
            if not self._pass(receive) or not (self._loopback or self._rung or self._active or self._rx_full):
                return

    def _pass(self, receive: bool = True) -> bool:
        now = time.monotonic()
        moved = False
        self._rx_full = False
        while self._rung:
            qp = self._rung.pop()
            self._fetch(qp)
            # New work goes out before the receive below: a request on its way while this
            # pass looks at the socket, not after (it is the latency of a lone post).
            self._service(qp, now)
            moved = True
        self._tx_batch.flush()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, peer, data = heapq.heappop(self._delayed)
            self._put(peer, data)
            moved = True
        taken = 0
        while taken < RX_BATCH:
            if self._loopback:
                data = self._loopback.popleft()
                self._deliver_all(memoryview(data), len(data), self.link.rx_path(self.address, self.link.port), now)
                taken += 1
            else:
                got = self.link.recv_into(self._rx_buf) if receive else None
                if got is None:
                    break
                size, (peer, sport), step = got
                self._deliver_all(self._rx_view[:size], step or 1, self.link.rx_path(peer, sport), now)
                taken += -(-size // step) if step else 1  # the packets of a GRO run
            moved = True
        else:
            self._rx_full = True  # the batch ran out before the socket did
        timers = self._timers
        while timers and timers[0][0] <= now:
            deadline, _, qp = heapq.heappop(timers)
            if qp.timer_at != deadline or qp.qpn not in self.qps:
                continue  # the QP's deadline moved since (a later entry stands for it) or it is gone
            qp.timer_at = None
            qp.rc.handle_timer(now)
            self._active.add(qp)
        for qp in list(self._active):
            if self._service(qp, now):
                moved = True
        self._tx_batch.flush()  # one GSO send for what the QPs had for the same peer
        return moved

    def _fetch(self, qp: HwQp) -> None:
        """Take new WQEs from the QP's rings (private copies; see nic.wqe)."""
        rc = qp.rc
        producer = qp.doorbell.read(DoorbellRecord.SEND)
        while qp.sq_consumer & 0xFFFF != producer:
            counter = qp.sq_consumer & 0xFFFF
            try:
                wqe, qp.sq_consumer = qp.sq.fetch(qp.sq_consumer)
                rc.post_send(work_from_wqe(wqe))
            except WqeError as exc:
                self.counters["bad_wqes"] += 1
                rc.error_detail = f"WQE {counter}: {exc}"
                rc.completions.append(Completion(False, counter, WcStatus.LOC_QP_OP_ERR, WcOpcode.SEND,
                                                 vendor_err=Reason.BAD_WQE))  # fmt: skip
                rc.enter_error()
                break
        producer = qp.doorbell.read(DoorbellRecord.RECV)
        while qp.rq_consumer & 0xFFFF != producer:
            slot = (qp.rq_consumer % qp.rq_count) * qp.rq_stride
            sges = decode_recv_wqe(bytes(qp.rq_buf[slot : slot + qp.rq_stride]))
            rc.post_recv(RecvWork(qp.rq_consumer & 0xFFFF, sges))
            qp.rq_consumer += 1
        self._active.add(qp)

    def _deliver_all(self, datagrams: memoryview, step: int, path: RocePath, now: float) -> None:
        """Datagrams from one sender, ``step`` bytes each but the last (GRO hands a run over as
        one; a lone datagram is a run of one): ICRCs first, then header prediction (which
        takes the MIDDLE packets of a message in one loop), then the general path for each
        packet prediction leaves."""
        verify = path.verify if self.verify_icrc else None
        qps, active = self.qps, self._active
        predicted = predicted_bytes = 0
        end = len(datagrams) or 1  # an empty datagram is looked at (and counted)
        start = checked = 0  # the segments before ``checked`` passed their ICRC check
        while start < end:
            if verify is None:
                checked = end
            elif start >= checked:
                checked = start
                while checked < end and verify(datagrams[checked : checked + step]):
                    checked += step
                if checked == start:
                    self.counters["icrc_errors"] += 1
                    start += step
                    continue
            good = datagrams[start:checked]
            if len(good) >= BTH_LEN:
                qp = qps.get(int.from_bytes(good[5:8], "big"))  # BTH DestQP, for header prediction
                taken = qp.rc.receive_run(good, step, now) if qp is not None else 0
                if taken:
                    predicted += -(-taken // step)
                    predicted_bytes += taken
                    active.add(qp)  # type: ignore[arg-type]
                    start += taken
                    continue
            self._deliver(good[:step], now)
            start += step
        if predicted:
            counters = self.counters
            counters["rcvd_pkts"] += predicted
            counters["rcvd_bytes"] += predicted_bytes

    def _deliver(self, data: memoryview, now: float) -> None:
        """One packet, ICRC checked, through the general path: parse, then the QP's transport."""
        try:
            pkt = parse_packet(data)
        except MalformedPacket as exc:
            self.counters[f"malformed_{type(exc).__name__}"] += 1
            return
        qp = self.qps.get(pkt.bth.dqpn)
        if qp is None:
            self.counters["drop_unknown_qpn"] += 1
            return
        self.counters["rcvd_pkts"] += 1
        self.counters["rcvd_bytes"] += len(data)
        if qp in self._pending_receives:
            self._pending_receives.discard(qp)
            self._fetch(qp)
        qp.rc.receive(pkt, now)
        self._active.add(qp)

    def _transmit(self, peer: str, data: memoryview | bytes) -> None:
        """One datagram to ``peer``: through the fault injector if one is set, else straight out."""
        faults = self.faults
        if faults is not None:
            for delay, copy in faults.apply(bytes(data)):
                if delay:
                    heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._order), peer, copy))
                else:
                    self._put(peer, copy)
            return
        self._put(peer, data)

    def _put(self, peer: str, data: memoryview | bytes) -> None:
        if peer == self.address:
            self._loopback.append(bytes(data))  # internal loopback: the same bytes, no socket
        elif not self.link.send(data, peer):
            self.counters["drop_tx_full"] += 1

    def _send_output(self, peer: str, items: list[Packet | PacketRun]) -> None:
        """Send ``items`` to ``peer``, as GSO batches where the link can (``nic.tx``)."""
        batch = self._tx_batch
        batch.start(peer, gso=self.faults is None and peer != self.address)
        batch.send(self.link.tx_path(peer), items)

    def _service(self, qp: HwQp, now: float) -> bool:
        """Send what the QP has to send and write its completions; False if it had nothing."""
        rc = qp.rc
        items, sent = rc.output(now, TX_BUDGET) if qp.peer is not None else ([], 0)
        if items:
            self.counters["sent_pkts"] += sent
            self._send_output(qp.peer, items)  # type: ignore[arg-type]
        completions = rc.completions
        if completions:
            for completion in completions:
                cq = qp.recv_cq if completion.is_recv else qp.send_cq
                if not cq.push(cqe_from_completion(qp.qpn, completion)):
                    self.counters["cq_overflow"] += 1
            completions.clear()
        sending = bool(rc.requester.queue)
        if sending is not qp.sending:
            qp.sending = sending
            self._sending += 1 if sending else -1
        deadline = rc.get_timer()
        if deadline != qp.timer_at:
            qp.timer_at = deadline
            if deadline is not None:
                heapq.heappush(self._timers, (deadline, next(self._order), qp))
        if sent < TX_BUDGET:
            # Nothing more can go now (done, or waiting for an ACK, credits or a timer): a
            # packet, a doorbell or a timer makes the QP active again.
            self._active.discard(qp)
        return bool(sent)


_WITH_IMM, _WITH_INV, _GRH = int(WcFlag.WITH_IMM), int(WcFlag.WITH_INV), int(WcFlag.GRH)


def cqe_from_completion(qpn: int, completion: Completion) -> Cqe:
    """The mlx5 CQE that reports ``completion``."""
    status = completion.status
    if status is not WcStatus.SUCCESS:
        opcode = CqeOpcode.RESP_ERR if completion.is_recv else CqeOpcode.REQ_ERR
        syndrome = SYNDROME_OF_STATUS.get(status, GENERAL_ERR_SYNDROME)
        return Cqe(opcode, qpn, completion.wqe_counter, syndrome=syndrome, vendor_err=completion.vendor_err)
    if completion.is_recv:
        flags = int(completion.flags)  # plain ints: IntFlag operators build enum members
        if completion.opcode is WcOpcode.RECV_RDMA_WITH_IMM:
            opcode = CqeOpcode.RESP_WR_IMM
        elif flags & _WITH_IMM:
            opcode = CqeOpcode.RESP_SEND_IMM
        elif flags & _WITH_INV:
            opcode = CqeOpcode.RESP_SEND_INV
        else:
            opcode = CqeOpcode.RESP_SEND
        grh = 1 << 28 if flags & _GRH else 0
        return new_cqe((opcode, qpn, completion.wqe_counter, completion.byte_len, completion.imm, 0,
                        grh | completion.src_qp, 0, 0, 0, 0))  # fmt: skip
    return new_cqe((CqeOpcode.REQ, qpn, completion.wqe_counter, completion.byte_len, 0, 0, 0, 0,
                    REQ_WQE_OPCODE[completion.opcode], 0, 0))  # fmt: skip
