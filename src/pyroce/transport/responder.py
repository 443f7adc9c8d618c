"""The responder: executes incoming requests and answers them (rxe_resp.c's role).

Each request goes through the checks in the order IBA C9-... and rxe apply them, one method
per step returning the next ``RespState``: PSN (``CHK_PSN``), opcode sequence
(``CHK_OP_SEQ``), operation allowed on this QP (``CHK_OP_VALID``), a receive WQE
(``CHK_RESOURCE``), payload length (``CHK_LENGTH``), then the R_Key, PD, access and bounds
(``CHK_RKEY``). Only a request that passed all of them touches memory (``EXECUTE``). Every
failure is a state whose row in ``ERRORS`` gives the NAK and the receive completion status.

Duplicates (PSN before the expected one, IBA 9.7.5.1.1): SEND/WRITE are re-ACKed (C9-105),
a READ is executed again for the range it asks, an atomic is answered from its saved result
and never executed twice. One sequence-error NAK is sent for a gap, then out-of-order
packets are dropped silently until the expected PSN arrives.
"""

from __future__ import annotations

import enum
import struct
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from pyroce.ib.enums import Access, QpState, WcFlag, WcOpcode, WcStatus
from pyroce.ib.reasons import Reason
from pyroce.transport.completion import Completion, new_completion
from pyroce.transport.memory import MemFault
from pyroce.transport.sgl import ScatterGather
from pyroce.transport.work import RecvWork
from pyroce.wire.aeth import CREDITS_UNLIMITED, NakCode, ack_syndrome, nak_syndrome, rnr_nak_syndrome
from pyroce.wire.bth import BTH, run_length
from pyroce.wire.headers import Aeth, AtomicAckEth, Reth
from pyroce.wire.icrc import ICRC_LEN
from pyroce.wire.opcodes import BTH_LEN, OPCODE_FLAGS, OPCODE_PAYLOAD, Flag, Opcode
from pyroce.wire.packet import AckTemplate, BthTemplate, Packet, PacketRun, new_run, parse_packet
from pyroce.wire.psn import psn_add, psn_diff, psn_in_window

if TYPE_CHECKING:
    from pyroce.transport.rc import RcQp

ATOMIC_VALUE: Final = struct.Struct("=Q")  # atomics act on host-order 64-bit words
READ_RESPONSE: Final = (Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
                 Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY)  # fmt: skip
_ACK: Final = ack_syndrome(CREDITS_UNLIMITED)


class RespState(enum.Enum):
    EXECUTE = "execute"
    DUPLICATE = "duplicate"
    DROP = "drop"
    ERR_PSN_OUT_OF_SEQ = "psn out of sequence"
    ERR_OP_SEQ = "opcode out of sequence"
    ERR_UNSUPPORTED_OPCODE = "operation not enabled on this QP"
    ERR_RNR = "no receive WQE posted"
    ERR_LENGTH = "payload length invalid for the opcode or the message"
    ERR_RKEY_VIOLATION = "R_Key, PD, access or bounds violation"
    ERR_MISALIGNED_ATOMIC = "atomic address not 8-byte aligned"
    ERR_RECV_PROT = "receive WQE buffer not accessible"
    ERR_RECV_LENGTH = "message longer than the receive WQE"
    ERR_TOO_MANY_RD_ATOMIC = "more reads and atomics outstanding than max_dest_rd_atomic"
    ERR_INVALIDATE_RKEY = "the R_Key to invalidate names no memory window of this QP"


class ErrorAction(NamedTuple):
    """How the responder answers a failed check (rxe's ``ERR_*`` states, IBA 9.7.5.2): which
    NAK (an RNR NAK carries the QP's ``min_rnr_timer``), the receive WQE's completion status and
    reason (if it completes one), and whether the QP goes to ERROR. A NAK that is not fatal is
    sent once: until the expected PSN arrives again, later packets are dropped (``nak_sent``).
    ``counters`` are rxe's names for the event; otherwise ``resp_<state>``."""

    nak: NakCode | None
    recv_status: WcStatus | None
    fatal: bool
    reason: Reason = Reason.NONE
    rnr: bool = False
    counters: tuple[str, ...] = ()
    drop_message: bool = False  # UC: the message is dropped silently (``Responder._drop_message``)


ERRORS: Final = {
    RespState.ERR_PSN_OUT_OF_SEQ: ErrorAction(
        NakCode.PSN_SEQ_ERR, None, False, counters=("out_of_seq_request", "send_seq_nak")
    ),
    RespState.ERR_RNR: ErrorAction(None, None, False, rnr=True, counters=("send_rnr_err",)),
    RespState.ERR_OP_SEQ: ErrorAction(NakCode.INVALID_REQUEST, None, True),
    RespState.ERR_UNSUPPORTED_OPCODE: ErrorAction(NakCode.INVALID_REQUEST, None, True),
    RespState.ERR_LENGTH: ErrorAction(NakCode.INVALID_REQUEST, None, True),
    RespState.ERR_RKEY_VIOLATION: ErrorAction(NakCode.REMOTE_ACCESS_ERR, None, True),
    RespState.ERR_MISALIGNED_ATOMIC: ErrorAction(NakCode.INVALID_REQUEST, None, True),
    RespState.ERR_TOO_MANY_RD_ATOMIC: ErrorAction(NakCode.INVALID_REQUEST, None, True),
    # rxe's class J: the receive WQE completes in error and the QP fails
    RespState.ERR_INVALIDATE_RKEY: ErrorAction(NakCode.INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR, True),
    RespState.ERR_RECV_PROT: ErrorAction(NakCode.REMOTE_OP_ERR, WcStatus.LOC_PROT_ERR, True, Reason.RECV_PROTECTION),
    RespState.ERR_RECV_LENGTH: ErrorAction(NakCode.INVALID_REQUEST, WcStatus.LOC_LEN_ERR, True, Reason.RECV_TOO_SHORT),
}

# UC without an SRQ (rxe's UC cases, IBA classes D and E): a refused request is no one's error
# to report; its message is dropped silently. Only an unusable receive WQE (class A) fails the
# QP as on RC, with nothing sent back.
UC_ERRORS: Final = dict.fromkeys(ERRORS, ErrorAction(None, None, False, drop_message=True))
UC_ERRORS[RespState.ERR_RECV_PROT] = ERRORS[RespState.ERR_RECV_PROT]._replace(nak=None)

OP_ACCESS: Final = {Flag.WRITE: Access.REMOTE_WRITE, Flag.READ: Access.REMOTE_READ, Flag.ATOMIC: Access.REMOTE_ATOMIC}
NOT_EXECUTED: Final = Flag.FLUSH | Flag.ATOMIC_WRITE  # IBA 1.5 operations pyroce does not execute yet
# enum members read per packet, as constants (docs/architecture.md, "Compiled with mypyc")
_REMOTE_READ: Final = int(Access.REMOTE_READ)  # the memory table's access flags: plain ints (MemoryTable.lookup)
_REMOTE_WRITE: Final = int(Access.REMOTE_WRITE)
_REMOTE_ATOMIC: Final = int(Access.REMOTE_ATOMIC)
_LOCAL_WRITE: Final = int(Access.LOCAL_WRITE)
_SUCCESS: Final = WcStatus.SUCCESS
_NO_WC_FLAGS: Final = WcFlag.NONE
_WITH_IMM: Final = WcFlag.WITH_IMM  # members read per completion, as constants (an enum attribute
_WITH_INV: Final = WcFlag.WITH_INV  # read is a generic lookup, compiled)
_RECV: Final = WcOpcode.RECV
_RECV_RDMA_WITH_IMM: Final = WcOpcode.RECV_RDMA_WITH_IMM
_ACKNOWLEDGE: Final = Opcode.RC_ACKNOWLEDGE
_EXECUTE: Final = RespState.EXECUTE


class ReadJob:
    """Read response packets still to send for one READ request."""

    __slots__ = ("count", "index", "msn", "psn", "view")

    def __init__(self, view: memoryview, psn: int, count: int, msn: int) -> None:
        self.view, self.psn, self.count, self.index, self.msn = view, psn, count, 0, msn


class RecvSource(Protocol):
    """Where the responder takes receive WQEs, in order: the QP's own queue (a deque the engine
    fills), or a shared receive queue that several QPs draw from, read when a message needs a
    WQE (rxe ``get_srq_wqe``). True while a WQE waits."""

    def __bool__(self) -> bool: ...

    def popleft(self) -> RecvWork: ...

    def appendleft(self, work: RecvWork) -> None: ...


Refill = Callable[[], bool]
"""A QP's own receive queue found empty asks its NIC to read the receive ring once more
(``nic.engine.Engine.fetch_receives``): whether WQEs were found. The doorbell record is what
the driver posted; the wake-up that announced it may not have reached the NIC yet."""


def nothing_posted() -> bool:
    """The refill of a transport with no ring behind its queue (alone in a test, or on an SRQ)."""
    return False


class Responder:
    def __init__(self, qp: RcQp, srq: RecvSource | None = None) -> None:
        self.qp = qp
        self.acked = qp.service.acked
        self.errors = qp.service.errors
        self._check_psn = self._check_psn_rc if self.acked else self._check_psn_uc
        self.own_queue: deque[RecvWork] = deque()
        # A shared queue's WQEs are not this QP's: a reset or a flush leaves them to the others.
        self.recv_queue: deque[RecvWork] | RecvSource = self.own_queue if srq is None else srq
        self.refill: Refill = nothing_posted
        self.forced_rnr = 0  # messages still to refuse with an RNR NAK (a test's fault plan)
        self._acks: AckTemplate | None = None  # this QP's ACKs, for its current destination QP
        self._responses: BthTemplate | None = None  # its READ responses' FIRST, LAST and ONLY, likewise
        self._refusal: Callable[[int], None] = self._refuse_later  # bound once: ``placed_later`` keeps one a WRITE
        self.reset()

    def reset(self) -> None:
        self.epsn = 0  # expected PSN
        self.msn = 0
        self.nak_sent = False  # a sequence/RNR NAK is out; drop until the expected PSN comes
        self.dropping = False  # UC: a message was dropped; discard until a FIRST or ONLY (rxe drop_msg)
        self.in_message = Flag.NONE  # SEND or WRITE while a multi-packet message is open
        self.recv: RecvWork | None = None  # receive WQE of the open SEND
        self.recv_data: ScatterGather | None = None
        self.offset = 0  # bytes placed in the open message
        self.write_view: memoryview | None = None  # target of the open RDMA WRITE
        self.checked: memoryview | None = None  # what CHK_RKEY granted to the packet in hand
        self._refused_for = -1  # the qp_access_flags _refused was computed for
        self._refused = 0
        self.write_length = 0
        self.atomic_results: OrderedDict[int, int] = OrderedDict()
        self.out: deque[Packet | bytes | ReadJob] = deque()  # bytes: an ACK (``AckTemplate``)
        self.answered_before_nak = 0  # of ``out``, what precedes the NAK of a fatal error (still sent)
        self.deferred = False  # an RDMA WRITE's bytes wait to go back to the memory (``_settle``)
        self.own_queue.clear()

    def start(self, psn: int) -> None:
        self.epsn = psn

    @property
    def has_output(self) -> bool:
        return bool(self.out)

    # --- input --------------------------------------------------------------------------

    def receive(self, pkt: Packet, now: float, malformed: bool = False) -> None:
        """``malformed``: a request whose PadCnt does not pad its payload to 4 bytes (only its
        BTH is here): at the expected PSN a length error, NAK invalid request, as rxe answers a
        WRITE whose pad disagrees with its length (UC drops its message); a duplicate is not
        answered again."""
        if self.deferred and not self._settle():
            return
        state = self._check_psn(pkt)
        if malformed and state in (RespState.EXECUTE, RespState.DUPLICATE):
            state = RespState.ERR_LENGTH if state is RespState.EXECUTE else RespState.DROP
        if state is RespState.EXECUTE:
            state = self._check_request(pkt)
        if state is RespState.EXECUTE:
            self._execute(pkt)
            self.checked = None  # the view is held only as long as its operation needs it
        elif state is RespState.DUPLICATE:
            self._duplicate(pkt)
        elif state is not RespState.DROP:
            self._error(pkt, state)

    def receive_predicted(self, flags: int, psn: int, ackreq: bool, payload: memoryview | bytes) -> bool:
        """Place a MIDDLE or LAST packet (no immediate) if it is exactly what the open message
        expects, or a SEND ONLY (no immediate) that a receive WQE waits for and holds
        (``RcQp.receive_predicted``); False leaves the packet to ``receive``."""
        if psn != self.epsn or self.nak_sent:
            return False
        if self.deferred and not flags & Flag.WRITE and not self._settle():
            return False
        if flags & Flag.START:  # a SEND ONLY: no message open, a WQE ready and no RNR forced
            if self.in_message or self.dropping or not self.recv_queue or self.forced_rnr:
                return False
        elif not flags & self.in_message:
            return False
        if flags & (self._refused if self._refused_for == self.qp.config.access else self._refused_ops()):
            return False
        offset = self.offset
        end = offset + len(payload)
        if flags & Flag.START:
            recv = self.recv_queue.popleft()
            resolved = self._resolve_recv(recv)
            if isinstance(resolved, MemFault) or len(payload) > resolved.length:
                self.recv_queue.appendleft(recv)  # the general path takes it again and answers the error
                return False
            self.recv, self.recv_data, self.offset = recv, resolved, 0
            resolved.write(0, payload)
        elif flags & Flag.WRITE:
            if end > self.write_length or (flags & Flag.END and end != self.write_length):
                return False
            self.write_view[offset:end] = payload  # type: ignore[index]
        else:
            data = self.recv_data
            if data is None or end > data.length:
                return False
            data.write(offset, payload)
        self._placed(flags, psn, len(payload), ackreq, None)
        return True

    def receive_write_predicted(self, flags: int, psn: int, ackreq: bool, va: int, rkey: int, dma_len: int,
                                packet: memoryview | bytes, payload: memoryview | bytes) -> bool:  # fmt: skip
        """Place a WRITE's FIRST or ONLY (no immediate) at the expected PSN with no message
        open, its RETH (``va``, ``rkey``, ``dma_len``) checked as the general path checks it (``_check_rkey``); False leaves
        the packet (``packet``, whole) to ``receive`` (``RcQp.receive_predicted``). A RETH the
        check refuses is answered here, as ``receive`` would answer it after the same checks
        (``_error``): the check pulls a mirrored region's bytes, and a failed pull counts once."""
        if psn != self.epsn or self.nak_sent or self.in_message or self.dropping:
            return False
        if flags & (self._refused if self._refused_for == self.qp.config.access else self._refused_ops()):
            return False
        state = self._check_rkey(va, rkey, dma_len, len(payload), flags)
        if state is not _EXECUTE:
            self._error(parse_packet(packet), state)
            return True
        view = self.write_view = self.checked
        self.checked = None
        view[: len(payload)] = payload  # type: ignore[index]
        self._placed(flags, psn, len(payload), ackreq, None)
        return True

    def receive_middles(self, segments: memoryview, step: int, opcode: int, pkey: int, qpn: int) -> int:
        """Place the MIDDLE packets of the open message that follow one just placed by
        ``receive_predicted`` in a GRO run of ``step``-byte segments (ICRCs checked): the
        message's state holds for the whole run, so each packet needs only its BTH checked
        (``run_length``) and its bounds. Stops before the first packet that is not the next
        MIDDLE (it goes the general way). Returns the bytes taken from ``segments``."""
        pmtu = step - BTH_LEN - ICRC_LEN
        offset = self.offset
        if OPCODE_FLAGS[opcode] & Flag.WRITE:
            target, limit = self.write_view, self.write_length
        else:  # a SEND: into its receive WQE's buffer, straight when that is one SGE
            recv_data = self.recv_data
            target, limit = recv_data.one_view(), recv_data.length  # type: ignore[union-attr]
        count, ackreq = run_length(segments, step, opcode, pkey, qpn, self.epsn, (limit - offset) // pmtu)
        for at in range(BTH_LEN, count * step, step):
            if target is not None:
                target[offset : offset + pmtu] = segments[at : at + pmtu]
            else:
                recv_data.write(offset, segments[at : at + pmtu])  # type: ignore[union-attr]
            offset += pmtu
        if count:
            self.offset = offset
            self.epsn = psn_add(self.epsn, count)
            self.qp.rcvd_pkts += count
            if ackreq:  # one ACK, for the last PSN placed, answers them all
                self._ack(psn_add(self.epsn, -1))
        return count * step

    def _check_psn_rc(self, pkt: Packet) -> RespState:
        diff = psn_diff(pkt.bth.psn, self.epsn)
        if diff > 0:
            if self.nak_sent:
                self.qp.counters["out_of_seq_request"] += 1
                return RespState.DROP
            return RespState.ERR_PSN_OUT_OF_SEQ
        if diff < 0:
            return RespState.DUPLICATE
        self.nak_sent = False
        return RespState.EXECUTE

    def _check_psn_uc(self, pkt: Packet) -> RespState:
        """UC has no duplicates and no NAKs (IBA 9.7.5.1, rxe ``check_psn``): a FIRST or ONLY
        begins a message at whatever PSN it carries, and drops one still open (its LAST was
        lost); any other packet must carry the expected PSN, else its message is dropped and
        the rest of it discarded until the next FIRST or ONLY."""
        psn = pkt.bth.psn
        if OPCODE_FLAGS[pkt.bth.opcode] & Flag.START:
            if self.in_message:
                self._drop_message(RespState.ERR_OP_SEQ if psn == self.epsn else RespState.ERR_PSN_OUT_OF_SEQ)
            self.dropping = False
            return RespState.EXECUTE
        if self.dropping:
            self.qp.counters["drop_uc_rest_of_message"] += 1
            return RespState.DROP
        if psn != self.epsn:
            self._drop_message(RespState.ERR_PSN_OUT_OF_SEQ)
            return RespState.DROP
        return RespState.EXECUTE

    def _drop_message(self, state: RespState) -> None:
        """UC: the message in progress, or the one the packet in hand begins, is lost (rxe
        ``drop_msg``); counted once, as ``uc_messages_dropped`` and ``drop_uc_<check>``. A
        receive WQE it had started goes back to the head of the queue as it was, for the
        next message (rxe ``do_class_d1e_error``)."""
        counters = self.qp.counters
        counters["uc_messages_dropped"] += 1
        counters[f"drop_uc_{state.name.lower().removeprefix('err_')}"] += 1
        if self.recv is not None:
            self.recv_queue.appendleft(self.recv)
        # A WRITE's target keeps what was placed, as a DMA's would; not ``_hand_back``: a SEND's
        # receive buffer goes back with its WQE, to be written from its start by the next message
        if self.write_view is not None and self.qp.memory.dirty:
            self.qp.memory.placed(self.write_view, self.offset)
        self.recv = self.recv_data = self.write_view = None
        self.in_message = Flag.NONE
        self.offset = 0
        self.dropping = True

    def _check_request(self, pkt: Packet) -> RespState:
        """CHK_OP_SEQ, CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY in order."""
        flags = OPCODE_FLAGS[pkt.bth.opcode]
        if self.in_message:
            if not flags & self.in_message or flags & Flag.START:
                return RespState.ERR_OP_SEQ
        elif not flags & Flag.START:
            return RespState.ERR_OP_SEQ
        if flags & self._refused_ops():
            return RespState.ERR_UNSUPPORTED_OPCODE
        if flags & (Flag.READ | Flag.ATOMIC) and self.read_jobs() >= max(1, self.qp.config.max_dest_rd_atomic):
            return RespState.ERR_TOO_MANY_RD_ATOMIC
        if flags & Flag.RWR and self.recv is None:
            if not self.recv_queue and not self.refill():
                return RespState.ERR_RNR
            if self.forced_rnr:
                self.forced_rnr -= 1
                return RespState.ERR_RNR
        if not OPCODE_PAYLOAD[pkt.bth.opcode].allows(len(pkt.payload), self.qp.config.pmtu):
            return RespState.ERR_LENGTH
        if flags & Flag.RETH:
            reth: Reth = pkt.reth  # type: ignore[assignment]
            return self._check_rkey(reth.va, reth.rkey, reth.dma_len, len(pkt.payload), flags)
        if flags & Flag.ATMETH:
            atomic = pkt.atomiceth  # the key and its 8 bytes first: a range leaving the MR is an R_Key
            view = self.qp.memory.lookup(atomic.rkey, atomic.va, 8, _REMOTE_ATOMIC, self.qp.config.pdn)  # type: ignore[union-attr]
            if isinstance(view, MemFault):  # violation even when misaligned too (rxe checks in this order)
                return RespState.ERR_RKEY_VIOLATION
            if atomic.va & 7:  # type: ignore[union-attr]
                return RespState.ERR_MISALIGNED_ATOMIC
            self.checked = view
        elif flags & Flag.WRITE and self.offset + len(pkt.payload) > self.write_length:
            return RespState.ERR_LENGTH
        if flags & Flag.WRITE and flags & Flag.END and self.offset + len(pkt.payload) != self.write_length:
            return RespState.ERR_LENGTH
        if pkt.ieth is not None and self.qp.memory.invalidate(pkt.ieth, self.qp.config.qpn) is not None:
            return RespState.ERR_INVALIDATE_RKEY
        return RespState.EXECUTE

    def _refused_ops(self) -> int:
        """The operation flags this QP refuses: not executed at all, or not enabled by its
        qp_access_flags (kept until the access flags change, as they rarely do)."""
        access = int(self.qp.config.access)
        if access != self._refused_for:
            self._refused_for = access
            self._refused = int(NOT_EXECUTED) | sum(int(kind) for kind, need in OP_ACCESS.items() if not access & need)
        return self._refused

    def read_jobs(self) -> int:
        """READ responses queued and not fully sent: the responder resources in use."""
        return sum(isinstance(item, ReadJob) for item in self.out)

    def _check_rkey(self, va: int, rkey: int, dma_len: int, length: int, flags: int) -> RespState:
        """CHK_RKEY of a READ or of a WRITE's first packet (``length`` bytes of payload): the
        RETH's range (``va``, ``rkey``, ``dma_len``) in an MR this QP may reach, and a WRITE's
        payload within it."""
        if dma_len > self.qp.config.max_msg_sz:
            return RespState.ERR_LENGTH
        access = _REMOTE_READ if flags & Flag.READ else _REMOTE_WRITE
        placing = not flags & Flag.READ  # a WRITE's target, handed back at its end (``placed``)
        view = self.qp.memory.lookup(rkey, va, dma_len, access, self.qp.config.pdn, placing)
        if isinstance(view, MemFault):
            return RespState.ERR_RKEY_VIOLATION
        if flags & Flag.WRITE:
            if length > dma_len or (flags & Flag.END and length != dma_len):
                return RespState.ERR_LENGTH
            self.write_length = dma_len
            self.offset = 0
        self.checked = view
        return _EXECUTE

    # --- execution ----------------------------------------------------------------------

    def _execute(self, pkt: Packet) -> None:
        flags = OPCODE_FLAGS[pkt.bth.opcode]
        bth = pkt.bth
        if flags & Flag.READ:
            self._read(self.checked, bth.psn)  # type: ignore[arg-type]
            return
        if flags & Flag.ATOMIC:
            self._atomic(pkt)
            return
        payload = pkt.payload
        if flags & Flag.SEND:
            if flags & Flag.START:
                self.recv = self.recv_queue.popleft()
                self.offset = 0
                resolved = self._resolve_recv(self.recv)
                if isinstance(resolved, MemFault):
                    self._error(pkt, RespState.ERR_RECV_PROT)
                    return
                self.recv_data = resolved
            data = self.recv_data
            if data is None or self.offset + len(payload) > data.length:
                self._error(pkt, RespState.ERR_RECV_LENGTH)
                return
            data.write(self.offset, payload)
        else:
            if flags & Flag.START:
                self.write_view = self.checked
            self.write_view[self.offset : self.offset + len(payload)] = payload  # type: ignore[index]
        self._placed(flags, bth.psn, len(payload), bth.ackreq, pkt)

    def _resolve_recv(self, recv: RecvWork) -> ScatterGather | MemFault:
        """The buffers of receive WQE ``recv``, which a SEND writes: local write access, this PD."""
        return ScatterGather.resolve(self.qp.memory, recv.sges, _LOCAL_WRITE, self.qp.config.pdn, True)

    def _placed(self, flags: int, psn: int, length: int, ackreq: bool, pkt: Packet | None) -> None:
        """A SEND or WRITE packet's payload is in place: move past it, end the message (and
        complete its receive WQE) on its last packet, ACK when asked."""
        self.offset += length
        if flags & Flag.END:
            if self.qp.memory.dirty and not self._hand_back(flags, psn):  # mirrored memory: in place before
                self._unreachable(flags, psn)  # the ACK or the completion, or the message fails
                return
            self.epsn = psn_add(psn, 1)
            self.in_message = Flag.NONE
            self.msn = (self.msn + 1) & 0xFFFFFF
            if flags & Flag.COMP:
                self._complete_recv(pkt, flags)
            self.write_view = None
        else:
            self.epsn = psn_add(psn, 1)
            self.in_message = flags & (Flag.SEND | Flag.WRITE)
        if ackreq:
            self._ack(psn)

    def _hand_back(self, flags: int, psn: int) -> bool:
        """The message ending at ``psn`` is placed as far as ``offset``: say so
        (``MemoryTable.placed``); False if it could not reach the memory. An RDMA WRITE with
        nothing to complete here may go back later, with the WRITEs after it
        (``placed_later``, ``_settle``)."""
        if self.write_view is not None:
            if self.acked and not flags & Flag.COMP:
                self.deferred = True
                return self.qp.memory.placed_later(self.write_view, self.offset, self._refusal, psn << 24 | self.msn)
            return self.qp.memory.placed(self.write_view, self.offset)
        if self.recv_data is not None:
            return self.recv_data.placed(self.qp.memory, self.offset)
        return True

    def _unreachable(self, flags: int, psn: int) -> None:
        """The message ending at ``psn`` could not be written back: its destination's program
        unmapped it or is gone (``MemoryTable.placed``). Refused as a destination ``lookup``
        refuses is at the first packet: an RDMA WRITE's as an R_Key violation, a SEND's as a
        receive buffer it cannot write (IBA 9.7.5.2.4 and .2.8), here at the last packet."""
        state = RespState.ERR_RECV_PROT if flags & Flag.SEND else RespState.ERR_RKEY_VIOLATION
        self.write_view = None
        self.in_message = Flag.NONE
        self._refuse(state, psn, f"refused the message ending at PSN 0x{psn:06x}: its memory went ({state.value})")

    def _settle(self) -> bool:
        """Write back what this responder's WRITEs left to go back later (``placed_later``)
        before it takes a request that is not a WRITE: one that completes here, or is answered
        with more than an ACK, must not come before a failure of an earlier message. False if
        one failed (the QP is in ERROR now)."""
        self.deferred = False
        self.qp.memory.push_placed()
        return self.qp.state is not QpState.ERR

    def _refuse_later(self, token: int) -> None:
        """The RDMA WRITE ending at PSN ``token >> 24`` (the MSN before it: the low 24 bits)
        could not be written back after the responder had gone on (``placed_later``). Since
        then it has taken only WRITEs, each answered by an ACK not yet sent (the write-back
        comes before the ACKs leave and before any other request, ``_settle``): those ACKs are
        withdrawn, the NAK acknowledging what came before the WRITE, and the message is refused
        as ``_unreachable`` refuses one at its end."""
        if self.qp.state is QpState.ERR:
            return  # an earlier message's failure is the one answered
        self.out = deque(item for item in self.out if type(item) is not bytes)
        self.msn = token & 0xFFFFFF
        self._unreachable(Flag.WRITE, token >> 24)

    def _complete_recv(self, pkt: Packet | None, flags: int) -> None:
        """The message's receive WQE completes (``pkt``: its last packet, for the immediate;
        None for a predicted packet, which carries none)."""
        if flags & Flag.WRITE:  # RDMA WRITE with immediate consumes a receive WQE here
            self.recv = self.recv_queue.popleft()
        recv: RecvWork = self.recv  # type: ignore[assignment]  # there is one (typed: its fields read natively)
        self.recv = self.recv_data = None
        wc_flags = _NO_WC_FLAGS
        imm = 0
        if pkt is not None and pkt.immdt is not None:
            wc_flags, imm = _WITH_IMM, pkt.immdt
        elif pkt is not None and pkt.ieth is not None:
            wc_flags, imm = _WITH_INV, pkt.ieth
        opcode = _RECV_RDMA_WITH_IMM if flags & Flag.WRITE else _RECV
        solicited = pkt is not None and pkt.bth.se
        self.qp.completions.append(new_completion((True, recv.wqe_counter, _SUCCESS, opcode, self.offset,
                                                   imm, wc_flags, 0, 0, solicited, False)))  # fmt: skip

    def _read(self, view: memoryview, psn: int) -> None:
        count = max(1, -(-len(view) // self.qp.config.pmtu))
        if psn == self.epsn:
            self.msn = (self.msn + 1) & 0xFFFFFF
            self.epsn = psn_add(psn, count)
        self.out.append(ReadJob(view, psn, count, self.msn))

    def _atomic(self, pkt: Packet) -> None:
        atomic = pkt.atomiceth
        view = self.checked
        (orig,) = ATOMIC_VALUE.unpack(view)  # type: ignore[arg-type]
        if pkt.bth.opcode == Opcode.RC_COMPARE_SWAP:
            new = atomic.swap_add if orig == atomic.compare else orig  # type: ignore[union-attr]
        else:
            new = (orig + atomic.swap_add) & 0xFFFFFFFFFFFFFFFF  # type: ignore[union-attr]
        ATOMIC_VALUE.pack_into(view, 0, new)  # type: ignore[arg-type]
        psn = pkt.bth.psn
        self.atomic_results[psn] = orig
        while len(self.atomic_results) > max(1, self.qp.config.max_dest_rd_atomic):
            self.atomic_results.popitem(last=False)
        self.msn = (self.msn + 1) & 0xFFFFFF
        self.epsn = psn_add(psn, 1)
        self._atomic_ack(psn, orig)

    def _duplicate(self, pkt: Packet) -> None:
        self.qp.counters["duplicate_request"] += 1
        flags = OPCODE_FLAGS[pkt.bth.opcode]
        if flags & (Flag.SEND | Flag.WRITE):
            self._ack(psn_add(self.epsn, -1))  # C9-105: ACK again, do nothing else
        elif flags & Flag.READ:
            reth = pkt.reth
            view = self.qp.memory.lookup(reth.rkey, reth.va, reth.dma_len, _REMOTE_READ, self.qp.config.pdn)  # type: ignore[union-attr]
            if not isinstance(view, MemFault) and reth.dma_len <= self.qp.config.max_msg_sz:  # type: ignore[union-attr]
                # The retried range replaces what is still queued of the first execution; a
                # duplicate that replaces nothing is answered only while resources are free.
                psn = pkt.bth.psn
                kept = deque(item for item in self.out
                             if not (isinstance(item, ReadJob) and psn_in_window(psn, item.psn, item.count)))  # fmt: skip
                if len(kept) < len(self.out) or self.read_jobs() < max(1, self.qp.config.max_dest_rd_atomic):
                    self.out = kept
                    self._read(view, psn)
                else:
                    self.qp.counters["drop_duplicate_read"] += 1
        elif flags & Flag.ATOMIC:
            orig = self.atomic_results.get(pkt.bth.psn)
            if orig is not None:
                self._atomic_ack(pkt.bth.psn, orig)

    def _error(self, pkt: Packet, state: RespState) -> None:
        """Answer a failed check of ``pkt`` (``_refuse``). Only a QP that goes to ERROR keeps a
        detail, so an RNR or sequence NAK (a storm, when receives run short) builds none."""
        detail = ""
        if self.errors[state].fatal:
            detail = f"refused {pkt.info.name} at PSN 0x{pkt.bth.psn:06x}: {state.value}"
            if state is RespState.ERR_RECV_LENGTH and self.recv is not None and self.recv_data is not None:
                detail = (f"incoming SEND of at least {self.offset + len(pkt.payload)} bytes is longer "
                          f"than the {self.recv_data.length}-byte receive buffer")  # fmt: skip
        self._refuse(state, pkt.bth.psn, detail)

    def _refuse(self, state: RespState, psn: int, detail: str) -> None:
        """Answer a failed check of the packet at ``psn`` as its row in ``ERRORS`` says. A NAK
        the requester recovers from carries the expected PSN (a sequence NAK names what is
        missing; an RNR NAK's packet is the expected one); a fatal one, ``psn``."""
        action = self.errors[state]
        if action.drop_message:
            self._drop_message(state)
            return
        counters = self.qp.counters
        for name in action.counters or (f"resp_{state.name.lower()}",):
            counters[name] += 1
        if not action.fatal:
            syndrome = rnr_nak_syndrome(self.qp.config.min_rnr_timer) if action.rnr else nak_syndrome(action.nak)  # type: ignore[arg-type]
            self._nak(self.epsn, syndrome)
            self.nak_sent = True
            return
        self.qp.error_detail = detail
        if action.recv_status is not None and self.recv is not None:
            recv, self.recv = self.recv, None
            completion = Completion(True, recv.wqe_counter, action.recv_status, WcOpcode.RECV, vendor_err=action.reason)
            self.qp.completions.append(completion)
        if action.nak is not None:
            self._nak(psn, nak_syndrome(action.nak))
            self.answered_before_nak = len(self.out)
        self.qp.enter_error()

    # --- output -------------------------------------------------------------------------

    def _ack(self, psn: int) -> None:
        if not self.acked:  # UC: nothing is acknowledged, whatever AckReq says
            return
        template = self._acks
        config = self.qp.config
        if template is None or template.dqpn != config.dqpn or template.pkey != config.pkey:
            template = self._acks = AckTemplate(config.dqpn, _ACK, config.pkey)
        ack = template.ack(psn, self.msn)
        out = self.out
        if out and type(out[-1]) is bytes:  # a queued ACK (NAKs are Packets): coalesce, the newer
            out[-1] = ack  # acknowledges everything the queued one did
        else:
            out.append(ack)

    def _nak(self, psn: int, syndrome: int) -> None:
        config = self.qp.config
        self.out.append(Packet(BTH(_ACKNOWLEDGE, config.dqpn, psn, pkey=config.pkey), aeth=Aeth(syndrome, self.msn)))

    def _atomic_ack(self, psn: int, orig: int) -> None:
        bth = BTH(Opcode.RC_ATOMIC_ACKNOWLEDGE, self.qp.config.dqpn, psn, pkey=self.qp.config.pkey)
        self.out.append(Packet(bth, aeth=Aeth(_ACK, self.msn), atomicacketh=AtomicAckEth(orig)))

    def emit(self, out: list[Packet | PacketRun | bytes], budget: int) -> int:
        """Append responses to ``out`` until ``budget`` packets (the middle of a READ response
        as ``PacketRun``s); returns the packets added."""
        pmtu = self.qp.config.pmtu
        config = self.qp.config
        queue = self.out
        added = 0
        while queue and added < budget:
            item = queue[0]
            if type(item) is not ReadJob:  # an ACK or NAK
                out.append(item)  # type: ignore[arg-type]
                queue.popleft()
                added += 1
                continue
            index, count = item.index, item.count
            offset = index * pmtu
            middles = min(count - 1 - index, budget - added) if index else 0
            if middles > 0:
                middle = READ_RESPONSE[1]
                out.append(new_run((middle, config.dqpn, psn_add(item.psn, index), config.pkey,
                                    item.view[offset : offset + middles * pmtu], pmtu, False, middle, middle)))  # fmt: skip
                item.index += middles
                added += middles
                continue
            opcode = READ_RESPONSE[3] if count == 1 else READ_RESPONSE[0 if index == 0 else 2]
            template = self._responses
            if template is None or template.dqpn != config.dqpn or template.pkey != config.pkey:
                template = self._responses = BthTemplate(config.dqpn, config.pkey)
            out.append(template.read_response(opcode, psn_add(item.psn, index), _ACK, item.msn,
                                              item.view[offset : offset + pmtu]))  # fmt: skip
            added += 1
            item.index += 1
            if item.index == count:
                queue.popleft()
        return added

    def flush(self) -> None:
        """ERROR state: every posted receive completes with WR_FLUSH_ERR (IBA 10.3.1.2; of a
        shared receive queue, only the WQE the QP had taken: the rest serve other QPs); read
        responses not yet sent are dropped, a queued NAK still goes out. The NAK of the error
        that brought the QP here goes out after the responses to the requests before it (in
        PSN order, as rxe sends a READ's responses before it takes the next request): without
        them, the requester would take the NAK for an implied NAK of its READs and retry them
        against a QP in ERROR until its retries ran out."""
        kept, self.answered_before_nak = self.answered_before_nak, 0
        self.out = deque(item for index, item in enumerate(self.out) if index < kept or not isinstance(item, ReadJob))
        pending = ([self.recv] if self.recv is not None else []) + list(self.own_queue)
        self.recv = None
        self.own_queue.clear()
        for recv in pending:
            self.qp.completions.append(Completion(True, recv.wqe_counter, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                                  vendor_err=Reason.FLUSHED))  # fmt: skip
