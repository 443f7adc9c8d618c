"""The completer: turns responses into completions and retransmissions (rxe_comp.c's role).

Every response names a PSN. An ACK with PSN ``p`` acknowledges every request up to ``p``
(coalescing, IBA 9.7.5.1.1); a read response or atomic ACK also implicitly acknowledges the
sends and writes before it. A response that skips past an unanswered read or atomic means
responses were lost (an implied NAK, IBA 9.7.5.1.3): go back to the oldest unacknowledged
PSN. Responses for PSNs not outstanding (duplicates, "ghost" ACKs) change nothing. After a
rewind an ACK or NAK may name any PSN ever sent, not only one resent: the responder's answer
to the first duplicate acknowledges what it had before, and resending stops there (as rxe's
completer takes a late ACK once the WQE it names has gone out again).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from pyroce.ib.enums import WcStatus
from pyroce.ib.reasons import Reason
from pyroce.transport.work import ATOMICS, WorkOp
from pyroce.wire.aeth import AethKind, NakCode, rnr_timer_to_us, syndrome_kind, syndrome_value
from pyroce.wire.bth import run_length
from pyroce.wire.icrc import ICRC_LEN
from pyroce.wire.opcodes import BTH_LEN, OPCODE_FLAGS, Flag, Opcode
from pyroce.wire.packet import Buffer, Packet
from pyroce.wire.psn import psn_add, psn_diff, psn_in_range

if TYPE_CHECKING:
    from pyroce.transport.rc import RcQp
    from pyroce.transport.requester import SendEntry

NAK_STATUS: Final = {  # NAK code -> the requester's completion (rocev2.md's table)
    NakCode.INVALID_REQUEST: (WcStatus.REM_INV_REQ_ERR, Reason.REMOTE_INVALID_REQUEST),
    NakCode.REMOTE_ACCESS_ERR: (WcStatus.REM_ACCESS_ERR, Reason.REMOTE_ACCESS),
    NakCode.REMOTE_OP_ERR: (WcStatus.REM_OP_ERR, Reason.REMOTE_OPERATIONAL),
    NakCode.INVALID_RD_REQUEST: (WcStatus.REM_INV_RD_REQ_ERR, Reason.REMOTE_INVALID_REQUEST),
}
# Which work requests a response of each kind may answer (IBA 9.7.5.1; rxe check_ack). An ACK
# or NAK may name any request (it acknowledges everything through its PSN); a READ response or
# an ATOMIC ACKNOWLEDGE whose PSN lands on another kind of request is a bad response: dropped
# and counted, it completes nothing (the requester's timer resends, and the responder answers
# the duplicate with the right kind).
ANSWERS: Final = {
    Opcode.RC_RDMA_READ_RESPONSE_FIRST: frozenset({WorkOp.RDMA_READ}),
    Opcode.RC_RDMA_READ_RESPONSE_MIDDLE: frozenset({WorkOp.RDMA_READ}),
    Opcode.RC_RDMA_READ_RESPONSE_LAST: frozenset({WorkOp.RDMA_READ}),
    Opcode.RC_RDMA_READ_RESPONSE_ONLY: frozenset({WorkOp.RDMA_READ}),
    Opcode.RC_ATOMIC_ACKNOWLEDGE: ATOMICS,
}
ATOMIC_RESULT: Final = struct.Struct("=Q")  # the original value lands in host byte order, as a NIC writes it
# enum members read per packet, as constants (docs/architecture.md, "Compiled with mypyc")
_ACKNOWLEDGE: Final = Opcode.RC_ACKNOWLEDGE
_ATOMIC_ACKNOWLEDGE: Final = Opcode.RC_ATOMIC_ACKNOWLEDGE


class Completer:
    def __init__(self, qp: RcQp) -> None:
        self.qp = qp

    def receive(self, pkt: Packet, now: float) -> None:
        psn = pkt.bth.psn
        opcode = pkt.bth.opcode
        if self._ghost(psn, opcode == _ACKNOWLEDGE):
            self.qp.counters["ghost_responses"] += 1
            return
        if opcode == _ACKNOWLEDGE:
            self._acknowledge(pkt, psn, now)
        elif not self._answers(opcode, psn):
            self.qp.counters["bad_response"] += 1
        elif opcode == _ATOMIC_ACKNOWLEDGE:
            self._atomic_ack(pkt, psn, now)
        else:
            self._read_response(pkt, psn, now)

    def _answers(self, opcode: int, psn: int) -> bool:
        """Whether the request sent at ``psn`` is of a kind a response ``opcode`` answers
        (``ANSWERS``; any other opcode here is not a response at all)."""
        kinds = ANSWERS.get(opcode)
        if kinds is None:
            return False
        for entry in self.qp.requester.queue:
            if not entry.started:
                return False
            if psn_diff(psn, entry.first_psn) >= 0 and psn_diff(psn, entry.last_psn) <= 0:
                return entry.work.op in kinds
        return False

    def positive_ack(self, psn: int, now: float) -> bool:
        """An ACK (its AETH says ACK) at ``psn``: retire what it acknowledges (an implied NAK
        if it skips a read). The fast path's (``RcQp.receive_predicted``, without a ``Packet``)
        and ``receive``'s; False for a ghost, which the fast path leaves to ``receive``."""
        if self._ghost(psn, True):
            return False
        req = self.qp.requester
        before = req.comp_psn
        if not self._ack_through(psn):
            self._implied_nak()
        elif req.comp_psn != before:
            req.progress(now)
        return True

    def _ghost(self, psn: int, ack: bool) -> bool:
        """A response can only name a PSN that was sent and is not yet acknowledged; after a
        rewind, an ACK or NAK any PSN ever sent (``high_psn``), a READ response or atomic ACK
        only one sent again (its request must go out again first: it may be re-executed)."""
        req = self.qp.requester
        return not psn_in_range(psn, req.comp_psn, req.high_psn if ack else req.psn)

    def receive_read_predicted(self, psn: int, payload: memoryview | bytes, last: bool, now: float) -> bool:
        """Place a READ response packet if it is the next one the READ at the head of the queue
        expects, with the length expected there (``RcQp.receive_predicted``); the LAST (or
        ONLY) completes the READ. With the READ at the head, a response acknowledges nothing
        before it, so this is what ``receive`` would do. False leaves the packet to it."""
        req = self.qp.requester
        # At the oldest unacknowledged PSN, and sent: after a rewind, ``req.psn`` is back at
        # ``comp_psn`` until the resend, and a late response there is a ghost (``receive``).
        if req.comp_psn != psn or psn_diff(req.psn, psn) <= 0 or not req.queue:
            return False
        entry = req.queue[0]
        index = psn_diff(psn, entry.first_psn)
        if entry.work.op is not WorkOp.RDMA_READ or not entry.started or index != entry.placed:
            return False
        offset = index * self.qp.config.pmtu
        if last != (index == entry.npsn - 1) or len(payload) != min(self.qp.config.pmtu, entry.length - offset):
            return False
        self._place_read(entry, offset, payload, psn, last, now)
        return True

    def receive_read_middles(self, segments: memoryview, step: int, pkey: int, qpn: int, now: float) -> int:
        """Place the READ response MIDDLE packets that follow one just placed by
        ``receive_read_predicted`` in a GRO run of ``step``-byte segments (ICRCs checked):
        each needs only its BTH checked (``run_length``), up to the READ's last packet and the
        last PSN sent. Returns the bytes taken from ``segments``."""
        req = self.qp.requester
        entry = req.queue[0]  # the READ whose response was just placed, not yet complete
        pmtu = step - BTH_LEN - ICRC_LEN
        psn = req.comp_psn
        limit = min(psn_diff(req.psn, psn), entry.npsn - 1 - entry.placed)
        count, _ = run_length(segments, step, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, pkey, qpn, psn, limit)
        data = entry.data
        target = data.one_view()  # type: ignore[union-attr]
        offset = entry.placed * pmtu
        for at in range(BTH_LEN, count * step, step):
            if target is not None:
                target[offset : offset + pmtu] = segments[at : at + pmtu]
            else:
                data.write(offset, segments[at : at + pmtu])  # type: ignore[union-attr]
            offset += pmtu
        if count:
            entry.placed += count
            req.comp_psn = psn_add(psn, count)
            req.progress(now)
            self.qp.rcvd_pkts += count
        return count * step

    def _ack_through(self, psn: int) -> bool:
        """Retire the sends and writes acknowledged by a response at ``psn``. Returns False
        when an earlier read or atomic was skipped (implied NAK)."""
        req = self.qp.requester
        queue = req.queue
        in_order = True
        while queue and queue[0].started:
            entry = queue[0]
            past = psn_diff(psn, entry.last_psn) if psn != entry.last_psn else 0  # at its last, most often
            if past < 0 or entry.rd_atomic:
                if psn_diff(psn, entry.first_psn) < 0:
                    break
                # Partly acknowledged (a long message ACKed every 64 packets), or a read/atomic
                # whose own response must retire it.
                if not entry.rd_atomic:
                    req.comp_psn = psn_add(psn, 1)
                in_order = past <= 0
                break
            req.complete_head()  # all of it acknowledged (``psn`` at or past its last PSN)
            req.comp_psn = psn_add(entry.last_psn, 1)
        if req.psn != req.high_psn and psn_diff(req.comp_psn, req.psn) > 0:
            req.resume_at_comp_psn()  # a late ACK after a rewind: what it acknowledged is not sent again
        return in_order

    def _implied_nak(self) -> None:
        req = self.qp.requester
        if req.retrying:
            # Responses still in flight from before the resend skip ahead too: one retry per
            # gap, not one per stale packet (rxe's comp.started_retry).
            self.qp.counters["stale_responses"] += 1
            return
        self.qp.counters["implied_naks"] += 1
        req.retry(
            req.comp_psn,
            Reason.RESPONSES_LOST,
            f"responses from PSN 0x{req.comp_psn:06x} on went missing {self.qp.config.retry_cnt} times",
        )

    def _acknowledge(self, pkt: Packet, psn: int, now: float) -> None:
        req = self.qp.requester
        syndrome = pkt.aeth.syndrome  # type: ignore[union-attr]
        kind = syndrome_kind(syndrome)
        if kind is AethKind.ACK:
            self.positive_ack(psn, now)  # (not a ghost: ``receive`` looked)
            return
        before = req.comp_psn
        if not self._ack_through(psn_add(psn, -1)):  # a NAK acknowledges everything before it
            self._implied_nak()
            return
        if req.comp_psn != before:
            req.progress(now)  # forward progress refills the retry budgets (IBA 9.7.5.1.4)
        if kind is AethKind.RNR_NAK:
            self.qp.counters["rcvd_rnr_err"] += 1
            wait_us = rnr_timer_to_us(syndrome_value(syndrome))
            req.receiver_not_ready(psn, wait_us / 1e6, now,
                                   f"receiver not ready for PSN 0x{psn:06x} after {self.qp.config.rnr_retry} RNR "
                                   f"retries ({wait_us / 1e3:g} ms apart): the peer posts no receive before this "
                                   "SEND arrives")  # fmt: skip
            return
        if kind is not AethKind.NAK:
            self.qp.counters["bad_response"] += 1
            return
        code = syndrome_value(syndrome)
        if code == NakCode.PSN_SEQ_ERR:
            self.qp.counters["rcvd_seq_err"] += 1
            req.retry(
                psn,
                Reason.SEQUENCE_NAKS,
                f"the peer NAKed PSN 0x{psn:06x} as out of sequence {self.qp.config.retry_cnt + 1} times: "
                "packets are lost on the way",
            )
            return
        self.qp.counters["rcvd_nak_err"] += 1
        status, reason = NAK_STATUS.get(code, (WcStatus.REM_OP_ERR, Reason.REMOTE_OPERATIONAL))  # type: ignore[call-overload]
        req.fail_head(status, reason, self._nak_detail(reason, psn))

    def _nak_detail(self, reason: Reason, psn: int) -> str:
        """What the NAKed request asked for, in the words of the refusal."""
        queue = self.qp.requester.queue
        if not queue:
            return reason.text
        work = queue[0].work
        if reason is Reason.REMOTE_ACCESS:
            return (f"remote access error: rkey 0x{work.rkey:x} va 0x{work.raddr:x} len {queue[0].length} "
                    "outside the peer's MR, another PD's, or without the access it needs")  # fmt: skip
        return f"{work.op.name} at PSN 0x{psn:06x}: {reason.text}"

    def _atomic_ack(self, pkt: Packet, psn: int, now: float) -> None:
        req = self.qp.requester
        if not self._ack_through(psn) or not req.queue:
            self._implied_nak()
            return
        entry = req.queue[0]
        if entry.work.op not in ATOMICS or entry.first_psn != psn:
            self.qp.counters["bad_response"] += 1
            return
        result = ATOMIC_RESULT.pack(pkt.atomicacketh.orig)  # type: ignore[union-attr]
        entry.data.write(0, result)  # type: ignore[union-attr]
        if self.qp.memory.dirty and not entry.data.placed(self.qp.memory, len(result)):  # type: ignore[union-attr]
            self._unreachable(entry)  # mirrored memory: in place before the completion, or it fails
            return
        req.comp_psn = psn_add(psn, 1)
        req.complete_head()
        req.progress(now)

    def _read_response(self, pkt: Packet, psn: int, now: float) -> None:
        req = self.qp.requester
        if not self._ack_through(psn) or not req.queue:
            self._implied_nak()
            return
        entry = req.queue[0]
        if entry.work.op is not WorkOp.RDMA_READ:
            self.qp.counters["bad_response"] += 1
            return
        index = psn_diff(psn, entry.first_psn)
        if index != entry.placed:
            # Before: a duplicate. After: responses were lost; go back for them.
            if index > entry.placed:
                self._implied_nak()
            return
        pmtu = self.qp.config.pmtu
        offset = index * pmtu
        expected = min(pmtu, entry.length - offset)
        last = index == entry.npsn - 1
        if len(pkt.payload) != expected or bool(OPCODE_FLAGS[pkt.bth.opcode] & Flag.END) != last:
            self.qp.counters["bad_response"] += 1
            return
        self._place_read(entry, offset, pkt.payload, psn, last, now)

    def _place_read(self, entry: SendEntry, offset: int, payload: Buffer, psn: int, last: bool,
                    now: float) -> None:  # fmt: skip
        """A read response checked on either path: its bytes go to the READ's buffer, it
        acknowledges everything through its PSN, and the last one completes the READ."""
        req = self.qp.requester
        entry.data.write(offset, payload)  # type: ignore[union-attr]
        entry.placed += 1
        req.comp_psn = psn_add(psn, 1)
        if last:
            if self.qp.memory.dirty and not entry.data.placed(self.qp.memory, entry.length):  # type: ignore[union-attr]
                self._unreachable(entry)  # mirrored memory: in place before the completion, or it fails
                return
            req.complete_head()
        req.progress(now)

    def _unreachable(self, entry: SendEntry) -> None:
        """A READ's or atomic's local buffer could not be written back: its program unmapped
        it or is gone (``MemoryTable.placed``). LOC_PROT_ERR, as for a buffer that the lookup
        before its request refused."""
        detail = f"{entry.work.op.name}: its local buffer's memory is no longer mapped"
        self.qp.requester.fail_head(WcStatus.LOC_PROT_ERR, Reason.LOCAL_PROTECTION, detail)
