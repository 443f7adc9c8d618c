"""The requester: turns send WQEs into request packets (rxe_req.c's role).

It owns the send queue: every posted WQE stays in ``queue`` until the completer retires it.
``send_index``/``send_pkt`` point at the next packet to send and ``psn`` is its PSN;
``comp_psn`` (kept by the completer) is the oldest PSN not yet acknowledged. Retransmission
(go-back-N, IBA 9.7.5.1) is ``rewind(psn)``: the packets are regenerated from the WQE and
memory, resuming in the middle of a message with MIDDLE/LAST packets, or with a new READ
request for the rest of a read, as rxe does.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from pyroce.ib.enums import Access, QpState, WcFlag, WcOpcode, WcStatus
from pyroce.ib.reasons import Reason
from pyroce.transport.completion import new_completion
from pyroce.transport.memory import MemFault
from pyroce.transport.sgl import ScatterGather
from pyroce.transport.work import ATOMICS, READS_AND_ATOMICS, SendWork, WorkOp
from pyroce.wire.bth import BTH, new_bth
from pyroce.wire.headers import AtomicEth, Reth
from pyroce.wire.icrc import MEMORYVIEW
from pyroce.wire.opcodes import OPCODE_FLAGS, Flag, Opcode
from pyroce.wire.packet import BthTemplate, Packet, PacketRun, new_packet, new_run
from pyroce.wire.psn import psn_add, psn_diff, psn_in_window

if TYPE_CHECKING:
    from pyroce.transport.rc import RcQp

MAX_UNACKED_PSNS: Final = 128  # rxe RXE_MAX_UNACKED_PSNS: requests in flight before waiting for an ACK
MAX_PKTS_PER_ACK: Final = 64  # rxe RXE_MAX_PKT_PER_ACK: set AckReq at least this often
# After an ACK timeout the requester resends this many PSNs, then twice as many with each ACK
# that moves on, up to ``MAX_UNACKED_PSNS`` (TCP's slow start after a retransmission timeout):
# a peer too slow for a whole window (a guest whose receive ring overflowed) is not flooded
# with it again at every retry, and its late ACKs take back what it did receive.
TIMEOUT_WINDOW: Final = 1
INFINITE_RNR_RETRY: Final = 7  # IBA 9.7.5.2.8: rnr_retry 7 retries for ever

# (FIRST, MIDDLE, LAST, ONLY) per segmented operation on RC; UC's are in ``service.SERVICES``.
SEGMENT_OPCODES: Final = {
    WorkOp.SEND: (Opcode.RC_SEND_FIRST, Opcode.RC_SEND_MIDDLE, Opcode.RC_SEND_LAST, Opcode.RC_SEND_ONLY),
    WorkOp.SEND_WITH_IMM: (Opcode.RC_SEND_FIRST, Opcode.RC_SEND_MIDDLE, Opcode.RC_SEND_LAST_WITH_IMMEDIATE,
                           Opcode.RC_SEND_ONLY_WITH_IMMEDIATE),
    WorkOp.SEND_WITH_INV: (Opcode.RC_SEND_FIRST, Opcode.RC_SEND_MIDDLE, Opcode.RC_SEND_LAST_WITH_INVALIDATE,
                           Opcode.RC_SEND_ONLY_WITH_INVALIDATE),
    WorkOp.RDMA_WRITE: (Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_LAST,
                        Opcode.RC_RDMA_WRITE_ONLY),
    WorkOp.RDMA_WRITE_WITH_IMM: (Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE,
                                 Opcode.RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE),
}  # fmt: skip
_HEADERS_BESIDE_BTH: Final = Flag.RETH | Flag.IMMDT | Flag.IETH  # what a SEND's or WRITE's packet may carry
PLAIN_LASTS: Final = frozenset({Opcode.RC_SEND_LAST, Opcode.RC_RDMA_WRITE_LAST})  # a BTH alone
ATOMIC_OPCODES: Final = {WorkOp.ATOMIC_CMP_AND_SWP: Opcode.RC_COMPARE_SWAP, WorkOp.ATOMIC_FETCH_AND_ADD: Opcode.RC_FETCH_ADD}
WC_OPCODES: Final = {
    WorkOp.SEND: WcOpcode.SEND,
    WorkOp.SEND_WITH_IMM: WcOpcode.SEND,
    WorkOp.SEND_WITH_INV: WcOpcode.SEND,
    WorkOp.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WorkOp.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WorkOp.RDMA_READ: WcOpcode.RDMA_READ,
    WorkOp.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
    WorkOp.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
}
# What the local buffers of each operation need: reads and atomics write into them.
LOCAL_ACCESS: Final = {op: int(Access.LOCAL_WRITE if op in READS_AND_ATOMICS else Access.LOCAL_READ) for op in WorkOp}
# enum members read per packet, as constants (docs/architecture.md, "Compiled with mypyc")
_RTS: Final = QpState.RTS
_SUCCESS: Final = WcStatus.SUCCESS
_NO_WC_FLAGS: Final = WcFlag.NONE
_READ_REQUEST: Final = Opcode.RC_RDMA_READ_REQUEST


def segment_opcode(opcodes: tuple[int, int, int, int], index: int, count: int) -> int:
    """The opcode of packet ``index`` of a ``count``-packet message."""
    if count == 1:
        return opcodes[3]
    return opcodes[0] if index == 0 else opcodes[2] if index == count - 1 else opcodes[1]


class SendEntry:
    """A posted send WQE and its progress."""

    __slots__ = ("data", "first_psn", "last_psn", "length", "npsn", "placed", "rd_atomic", "run_end", "run_start",
                 "started", "work")  # fmt: skip

    def __init__(self, work: SendWork, pmtu: int) -> None:
        self.work = work
        self.length = work.length
        self.rd_atomic = work.op in READS_AND_ATOMICS
        # PSNs the message takes: one per packet, or per read response packet (IBA 9.7.1)
        self.npsn = npsn = 1 if work.op in ATOMICS else max(1, -(-self.length // pmtu))
        # The packets from ``run_start`` to before ``run_end`` go as ``PacketRun``s (a BTH and a
        # full PMTU each): all but a FIRST with a RETH and a LAST that is short or carries an
        # immediate or SE.
        self.run_start = self.run_end = 0
        if npsn > 1 and not self.rd_atomic:
            opcodes = SEGMENT_OPCODES[work.op]
            self.run_start = 1 if OPCODE_FLAGS[opcodes[0]] & Flag.RETH else 0
            plain_last = opcodes[2] in PLAIN_LASTS and not self.length % pmtu and not work.solicited
            self.run_end = npsn if plain_last else npsn - 1
        self.first_psn = self.last_psn = 0  # the PSNs of its first and last packets, once started
        self.started = False
        self.data: ScatterGather | None = None  # resolved local buffers
        self.placed = 0  # read response packets already placed


class Requester:
    def __init__(self, qp: RcQp) -> None:
        self.qp = qp
        self.reset()

    def reset(self) -> None:
        self.queue: deque[SendEntry] = deque()
        self.send_index = 0  # queue index of the next WQE to send from
        self.send_pkt = 0  # packet index inside it
        self.psn = 0
        self.comp_psn = 0  # oldest unacknowledged PSN
        self.high_psn = 0  # the first PSN never sent: anything before it that goes out is a resend
        self.rd_atomic_outstanding = 0
        self.noack_pkts = 0
        self.ack_deadline: float | None = None
        self.rnr_until: float | None = None
        self.retrying = False  # resent from comp_psn; responses past it are stale until progress
        self.window = MAX_UNACKED_PSNS  # PSNs in flight at most: smaller after an ACK timeout
        self.retry_left = self.qp.config.retry_cnt
        self.rnr_left = self.qp.config.rnr_retry
        # The packets of a BTH and payload alone (a SEND ONLY), for the current DestQP and P_Key
        self._bth_only: BthTemplate | None = None

    def start(self, psn: int) -> None:
        """Entering RTS: the first request goes out with ``sq_psn``."""
        self.psn = self.comp_psn = self.high_psn = psn
        self.retry_left = self.qp.config.retry_cnt
        self.rnr_left = self.qp.config.rnr_retry

    @property
    def has_output(self) -> bool:
        """Whether a packet could go now: the next WQE to send from may start (RTS), or has
        started (SQD lets those finish)."""
        index = self.send_index
        return index < len(self.queue) and (self.qp.state is _RTS or self.queue[index].started)

    @property
    def started(self) -> bool:
        """Whether some WQE has started and not completed (WQEs start and complete in order)."""
        return bool(self.queue) and self.queue[0].started

    @property
    def outstanding(self) -> bool:
        """Whether some request is sent and not yet acknowledged."""
        return self.comp_psn != self.psn

    # --- sending ------------------------------------------------------------------------

    def emit(self, out: list[Packet | PacketRun | bytes], budget: int, now: float, start: bool = True) -> int:
        """Append request packets to ``out`` until ``budget`` packets, the window or credits
        stop it; the middle of a message goes as ``PacketRun``s. A WQE not yet started starts
        only in RTS (in SQD the queue drains: rxe ``req_next_wqe``), and only if ``start``
        (the engine's window with the peer is open). Returns the packets added."""
        if self.rnr_until is not None:
            if now < self.rnr_until:
                return 0
            self.rnr_until = None
        config = self.qp.config
        added = 0
        while added < budget and self.send_index < len(self.queue):
            window = self.window - psn_diff(self.psn, self.comp_psn)
            if window <= 0:
                break
            entry = self.queue[self.send_index]
            if not entry.started and (not start or self.qp.state is not _RTS or not self._start(entry)):
                break
            runnable = entry.run_end - self.send_pkt if self.send_pkt >= entry.run_start else 0
            count = min(runnable, budget - added, window, MAX_PKTS_PER_ACK - self.noack_pkts) if runnable > 0 else 1
            # never negative: ``psn`` is at most ``high_psn``, and below it only after a rewind
            resent = psn_diff(self.high_psn, self.psn) if self.high_psn != self.psn else 0
            if resent > 0:
                self.qp.counters["retransmitted_pkts"] += min(resent, count)
            fills = count >= window  # the window closes: its last packet asks for the ACK that opens it
            out.append(
                self._run(entry, count, config.dqpn, fills)
                if runnable > 0
                else self._packet(entry, self.send_pkt, config.dqpn, fills)
            )
            added += count
            if count > resent:  # past ``high_psn``: these PSNs went out for the first time
                self.high_psn = self.psn
            if not self.qp.service.acked:
                self._retire_sent()
            elif self.ack_deadline is None and (timeout := self.qp.ack_timeout_s) is not None:
                self.ack_deadline = now + timeout
        return added

    def _retire_sent(self) -> None:
        """UC: nothing will be acknowledged, so every PSN sent is done with, and a WQE whose
        last packet is on the wire completes now (IBA 9.8: completion on transmission)."""
        self.comp_psn = self.psn
        while self.send_index:
            self.complete_head()

    def _run(self, entry: SendEntry, count: int, dqpn: int, ackreq: bool) -> PacketRun:
        """The next ``count`` packets of ``entry`` (below ``entry.run_end``), as one run; its
        last asks for an ACK if ``ackreq`` (else at the message's end or every ``MAX_PKTS_PER_ACK``)."""
        work = entry.work
        config = self.qp.config
        pmtu = config.pmtu
        index = self.send_pkt
        offset = index * pmtu
        if work.inline is not None:
            payload = MEMORYVIEW(work.inline)[offset : offset + count * pmtu]
        else:
            payload = MEMORYVIEW(entry.data.read(offset, count * pmtu))  # type: ignore[union-attr]
        last = index + count == entry.npsn  # the run ends the message: its LAST asks for the ACK
        ackreq = ackreq or last or self.noack_pkts + count >= MAX_PKTS_PER_ACK
        opcodes = self.qp.service.segments[work.op]
        run = new_run((opcodes[1], dqpn, self.psn, config.pkey, payload, pmtu, ackreq and self.qp.service.acked,
                       segment_opcode(opcodes, index, entry.npsn), segment_opcode(opcodes, index + count - 1, entry.npsn)))  # fmt: skip
        self.noack_pkts = 0 if ackreq else self.noack_pkts + count
        self.psn = psn_add(self.psn, count)
        if last:
            self.send_index += 1
            self.send_pkt = 0
        else:
            self.send_pkt += count
        return run

    def _start(self, entry: SendEntry) -> bool:
        """First transmission of a WQE: check fence and read credits, resolve its buffers.
        Returns False when the WQE must wait (or has just failed)."""
        work = entry.work
        if work.op not in self.qp.service.ops:
            self.fail_unsent(entry, WcStatus.LOC_QP_OP_ERR, Reason.OP_NOT_SUPPORTED,
                             f"{work.op.name} on a {self.qp.service.transport.name} QP")  # fmt: skip
            return False
        if work.fence and self.rd_atomic_outstanding:
            return False
        if entry.rd_atomic and self.rd_atomic_outstanding >= max(1, self.qp.config.max_rd_atomic):
            return False
        if work.inline is None:
            data = ScatterGather.resolve(self.qp.memory, work.sges, LOCAL_ACCESS[work.op], self.qp.config.pdn,
                                         entry.rd_atomic)  # a READ's or atomic's buffer: its response's destination
            if isinstance(data, MemFault):
                sges = ", ".join(f"lkey 0x{s.lkey:x} addr 0x{s.addr:x} len {s.length}" for s in work.sges)
                self.fail_unsent(entry, WcStatus.LOC_PROT_ERR, Reason.LOCAL_PROTECTION, f"{data.value}: {sges}")
                return False
            if work.op in ATOMICS and data.length < 8:
                self.fail_unsent(entry, WcStatus.LOC_LEN_ERR, Reason.LOCAL_LENGTH,
                                 f"an atomic needs an 8-byte local buffer, the SGEs give {data.length}")  # fmt: skip
                return False
            entry.data = data
        entry.first_psn = self.psn  # the message takes ``npsn`` PSNs from here (one, most often)
        entry.last_psn = psn_add(self.psn, entry.npsn - 1) if entry.npsn > 1 else self.psn
        entry.started = True
        if entry.rd_atomic:
            self.rd_atomic_outstanding += 1
        return True

    def _packet(self, entry: SendEntry, index: int, dqpn: int, ackreq: bool) -> Packet | bytes:
        """Build packet ``index`` of ``entry`` and advance the send pointer past it; it asks
        for an ACK if ``ackreq`` (as ``_run``'s last)."""
        work = entry.work
        pmtu = self.qp.config.pmtu
        psn = self.psn
        op = work.op
        if op is WorkOp.RDMA_READ:
            offset = index * pmtu
            bth = BTH(_READ_REQUEST, dqpn, psn, True, pkey=self.qp.config.pkey)
            pkt = Packet(bth, reth=Reth(work.raddr + offset, work.rkey, entry.length - offset))
            self._advance(entry.npsn - index, True)
            return pkt
        if op in ATOMICS:
            bth = BTH(ATOMIC_OPCODES[op], dqpn, psn, True, pkey=self.qp.config.pkey)
            pkt = Packet(bth, atomiceth=AtomicEth(work.raddr, work.rkey, work.swap_add, work.compare))
            self._advance(1, True)
            return pkt
        opcode = segment_opcode(self.qp.service.segments[op], index, entry.npsn)
        flags = OPCODE_FLAGS[opcode]
        offset = index * pmtu
        length = min(pmtu, entry.length - offset)
        if work.inline is not None:
            payload: bytes | memoryview = work.inline[offset : offset + length]
        else:
            payload = entry.data.read(offset, length)  # type: ignore[union-attr]
        end = bool(flags & Flag.END)
        self.noack_pkts += 1
        ackreq = ackreq or end or self.noack_pkts >= MAX_PKTS_PER_ACK
        config = self.qp.config
        wire_ackreq = ackreq and self.qp.service.acked
        self._advance(1, ackreq, entry.npsn - index == 1)
        beside = flags & _HEADERS_BESIDE_BTH
        if not beside or beside == Flag.RETH:  # a SEND or WRITE ONLY, say: bytes from the QP's template
            template = self._bth_only
            if template is None or template.dqpn != dqpn or template.pkey != config.pkey:
                template = self._bth_only = BthTemplate(dqpn, config.pkey)
            if beside:
                return template.write_packet(opcode, psn, wire_ackreq, end and work.solicited, work.raddr, work.rkey,
                                             entry.length, payload)  # fmt: skip
            return template.packet(opcode, psn, wire_ackreq, end and work.solicited, payload)
        # Built as plain tuples (the values NamedTuple.__new__ would make, without its Python
        # frame and keyword handling): this runs once per data packet.
        bth = new_bth((opcode, dqpn, psn, wire_ackreq, end and work.solicited, False, config.pkey, False, False))
        reth = Reth(work.raddr, work.rkey, entry.length) if flags & Flag.RETH else None
        imm = work.imm if flags & Flag.IMMDT else None
        ieth = work.imm if flags & Flag.IETH else None
        return new_packet((bth, payload, None, None, reth, None, None, None, imm, ieth, None))

    def _advance(self, psns: int, ackreq: bool, last: bool = True) -> None:
        self.psn = psn_add(self.psn, psns)
        if ackreq:
            self.noack_pkts = 0
        if last:
            self.send_index += 1
            self.send_pkt = 0
        else:
            self.send_pkt += 1

    # --- retransmission -----------------------------------------------------------------

    def rewind(self, psn: int) -> None:
        """Go back to ``psn`` (the oldest unacknowledged one) and send again from there."""
        for index, entry in enumerate(self.queue):
            if entry.started and psn_in_window(psn, entry.first_psn, entry.npsn):
                self.send_index = index
                self.send_pkt = psn_diff(psn, entry.first_psn)
                self.psn = psn
                self.retrying = True
                self.qp.counters["completer_retry_err"] += 1
                return

    def resume_at_comp_psn(self) -> None:
        """An ACK acknowledged PSNs past the resend pointer (it answers packets sent before a
        rewind): send on from the oldest unacknowledged PSN, not again what it acknowledged."""
        psn = self.comp_psn
        self.psn = psn
        for index, entry in enumerate(self.queue):
            if not entry.started or psn_in_window(psn, entry.first_psn, entry.npsn):
                self.send_index = index
                self.send_pkt = psn_diff(psn, entry.first_psn) if entry.started else 0
                return
        self.send_index, self.send_pkt = len(self.queue), 0

    def handle_timer(self, now: float) -> None:
        """Local ACK timeout (IBA 9.7.6.1.3): resend from the oldest unacknowledged PSN."""
        if self.ack_deadline is not None and now >= self.ack_deadline:
            self.ack_deadline = None
            if not self.outstanding:
                return
            self.qp.counters["local_ack_timeout_err"] += 1
            config = self.qp.config
            self.retry(self.comp_psn, Reason.ACK_TIMEOUT,
                       f"no ACK for PSN 0x{self.comp_psn:06x} after {config.retry_cnt} retries at timeout "
                       f"{config.timeout} ({(self.qp.ack_timeout_s or 0) * 1e3:.0f} ms each): "
                       "peer unreachable or not in RTR")  # fmt: skip

    # --- what the completer tells the requester ----------------------------------------------

    def retry(self, psn: int, reason: Reason, detail: str) -> None:
        """Something was lost from ``psn`` on (a timeout, a sequence NAK, an implied NAK): go
        back and resend while ``retry_cnt`` allows (IBA 9.7.5.1.4), else fail the oldest WQE
        with RETRY_EXC_ERR, ``reason`` and ``detail``."""
        if self.retry_left == 0:
            self.qp.counters["retry_exceeded_err"] += 1
            self.fail_head(WcStatus.RETRY_EXC_ERR, reason, detail)
            return
        self.retry_left -= 1
        if reason is Reason.ACK_TIMEOUT:
            self.window = TIMEOUT_WINDOW
        self.rewind(psn)

    def receiver_not_ready(self, psn: int, wait_s: float, now: float, detail: str) -> None:
        """An RNR NAK for ``psn``: resend it after ``wait_s`` while ``rnr_retry`` allows (7:
        forever), else fail the oldest WQE with RNR_RETRY_EXC_ERR and ``detail``."""
        if self.rnr_left == 0:
            self.qp.counters["retry_rnr_exceeded_err"] += 1
            self.fail_head(WcStatus.RNR_RETRY_EXC_ERR, Reason.RNR_EXHAUSTED, detail)
            return
        if self.qp.config.rnr_retry != 7:
            self.rnr_left -= 1
        self.rewind(psn)
        self.rnr_until = now + wait_s

    def progress(self, now: float) -> None:
        """The peer acknowledged something new: retry budgets refill, the timer restarts."""
        config = self.qp.config
        self.retry_left = config.retry_cnt
        self.rnr_left = config.rnr_retry
        self.retrying = False
        self.window = min(self.window * 2, MAX_UNACKED_PSNS)
        timeout = self.qp.ack_timeout_s
        self.ack_deadline = now + timeout if timeout is not None and self.comp_psn != self.psn else None  # outstanding

    # --- completion ---------------------------------------------------------------------

    def complete_head(self, status: WcStatus = WcStatus.SUCCESS, reason: Reason = Reason.NONE) -> None:
        entry = self.queue.popleft()
        if self.send_index:
            self.send_index -= 1
        if entry.rd_atomic and entry.started:
            self.rd_atomic_outstanding -= 1
        work = entry.work
        if work.signaled or status is not _SUCCESS:
            byte_len = entry.length if status is _SUCCESS and entry.rd_atomic else 0
            self.qp.completions.append(new_completion((False, work.wqe_counter, status, WC_OPCODES[work.op], byte_len,
                                                       0, _NO_WC_FLAGS, 0, reason, False, False)))  # fmt: skip

    def fail_head(self, status: WcStatus, reason: Reason, detail: str) -> None:
        """The oldest WQE failed: complete it with ``status`` and ``reason``, keep ``detail``
        for the one-line explanation; the QP goes to ERROR."""
        self.qp.error_detail = detail
        if self.queue:
            self.complete_head(status, reason)
        self.qp.enter_error()

    def fail_unsent(self, entry: SendEntry, status: WcStatus, reason: Reason, detail: str) -> None:
        """A WQE failed before its first packet left: the QP goes to ERROR now (IBA 10.3.1.2),
        so the WQEs before it, still waiting for their ACKs, are flushed ahead of it in order."""
        index = self.queue.index(entry)
        for _ in range(index):
            self.complete_head(WcStatus.WR_FLUSH_ERR, Reason.FLUSHED)
        self.fail_head(status, reason, detail)

    def flush(self) -> None:
        while self.queue:
            self.complete_head(WcStatus.WR_FLUSH_ERR, Reason.FLUSHED)
        self.send_index = self.send_pkt = 0
        self.ack_deadline = self.rnr_until = None
