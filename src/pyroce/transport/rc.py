"""One connected queue pair, RC or UC, as a sans-IO protocol object: requester, completer and
responder together. What UC does differently is its row in ``service.SERVICES``.

Inputs: ``post_send``, ``post_recv``, ``receive(pkt, now)``, ``handle_timer(now)`` and
``modify``. Outputs, pulled: ``packets_to_send(now, budget)``, ``get_timer()`` (``send_state()``), and the
``completions`` and ``events`` lists, which the caller drains. The QP state decides what is
accepted: requests are answered from RTR on, work is sent in RTS, and in ERROR every WQE is
flushed (IBA 10.3.1). In SQD the send queue drains: the WQEs already started go on to
completion (RC: to their ACKs), none starts, and SQ_DRAINED is raised once they are done.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from pyroce.ib.counters import Counters, folded
from pyroce.ib.enums import Access, EventType, QpState, WcOpcode, WcStatus
from pyroce.ib.limits import MAX_MSG_SZ
from pyroce.ib.reasons import Reason
from pyroce.transport.completer import Completer
from pyroce.transport.completion import Completion
from pyroce.transport.memory import MemoryTable
from pyroce.transport.requester import WC_OPCODES, Requester, SendEntry
from pyroce.transport.responder import RecvSource, Responder
from pyroce.transport.service import SERVICES
from pyroce.transport.work import RecvWork, SendWork
from pyroce.wire.aeth import SYNDROME_KINDS, AethKind
from pyroce.wire.bth import BTH_STRUCT, DEFAULT_PKEY, PAD_MASK, SE_MASK, TVER_MASK
from pyroce.wire.headers import RETH_STRUCT
from pyroce.wire.icrc import ICRC_LEN
from pyroce.wire.opcodes import BTH_LEN, OPCODE_FLAGS, OPCODE_HDR_LEN, OPCODES, Flag, Opcode, Transport
from pyroce.wire.packet import Packet, PacketRun, parse_packet
from pyroce.wire.psn import PSN_MASK

ACK_TIMEOUT_UNIT_S: Final = 4.096e-6  # IBA 9.7.6.1.3: local ACK timeout = 4.096 us * 2**timeout

RECEIVING_STATES: Final = frozenset({QpState.RTR, QpState.RTS, QpState.SQD, QpState.SQE})
ACKED_STATES: Final = RECEIVING_STATES - {QpState.RTR}  # where responses reach the completer
SENDING_STATES: Final = frozenset({QpState.RTS, QpState.SQD})  # where requests go out (in SQD, only started WQEs')
ACK_LEN: Final = OPCODES[Opcode.RC_ACKNOWLEDGE].hdr_len + ICRC_LEN  # type: ignore[union-attr]  # BTH, AETH, ICRC
# enum members read per packet, as constants (docs/architecture.md, "Compiled with mypyc")
_RTR: Final = QpState.RTR
_ERR: Final = QpState.ERR
_ACKNOWLEDGE: Final = int(Opcode.RC_ACKNOWLEDGE)  # an int: compiled, compared as a machine int


@dataclass
class QpConfig:
    """The QP attributes the protocol uses (``ibv_qp_attr`` fields, set by ``modify``)."""

    qpn: int
    pdn: int = 0
    transport: Transport = Transport.RC  # the QP type, RC or UC: fixed at creation
    dqpn: int = 0
    pmtu: int = 1024  # path MTU in payload bytes
    sq_psn: int = 0
    rq_psn: int = 0
    access: Access = Access.LOCAL_READ  # qp_access_flags: which remote operations the responder allows
    max_rd_atomic: int = 1
    max_dest_rd_atomic: int = 1
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12
    pkey: int = DEFAULT_PKEY
    max_msg_sz: int = MAX_MSG_SZ  # the port's largest message; a longer RETH length is an invalid request
    qkey: int = 0  # UD: the Q_Key a datagram must carry to be received
    sqd_notify: bool = False  # en_sqd_async_notify of the last RTS -> SQD: raise SQ_DRAINED when drained


def ack_timeout_s(timeout: int) -> float | None:
    """Seconds before an unacknowledged request is resent at ``timeout``; ``None`` when it is 0."""
    return ACK_TIMEOUT_UNIT_S * (1 << timeout) if timeout else None


class RcQp:
    """The protocol state of one connected QP (RC, or UC by ``config.transport``). Not
    thread-safe: one caller at a time."""

    def __init__(self, config: QpConfig, memory: MemoryTable, srq: RecvSource | None = None) -> None:
        """``srq``: a shared receive queue the responder takes its receive WQEs from, instead of
        the QP's own (``post_recv``)."""
        self.config = config
        self.service = SERVICES[config.transport]
        self.memory = memory
        self.state = QpState.RESET
        self.completions: list[Completion] = []
        self.events: list[tuple[EventType, str]] = []  # async events raised (COMM_EST, SQ_DRAINED), one line each
        self.established = False  # a packet arrived while in RTR: COMM_EST was raised (once until a reset)
        self.sq_draining = False  # entered SQD from RTS and started WQEs are not all done (query's sq_draining)
        self.counters: Counter[str] = Counters()  # its events by name; ``counts()`` reads them all
        self.sent_pkts = 0  # the per-packet counts, kept as ints (``pyroce.ib.counters``)
        self.rcvd_pkts = 0
        self.error_detail = ""  # one line on why the QP's last failed work request failed
        # config.timeout in seconds, kept as a value (read per message and per ACK): set by ``modify``
        self.ack_timeout_s = ack_timeout_s(config.timeout)
        self.requester = Requester(self)
        self.completer = Completer(self)
        self.responder = Responder(self, srq)

    # --- inputs -------------------------------------------------------------------------

    def modify(self, state: QpState) -> None:
        """Move to ``state`` (the verbs layer has already checked the transition and copied
        the attributes into ``config``; ``ack_timeout_s`` follows). Entering RTR/RTS starts
        the PSNs from the config; entering SQD from RTS starts a drain (``output`` ends it)."""
        previous, self.state = self.state, state
        self.ack_timeout_s = ack_timeout_s(self.config.timeout)  # the attributes changed with the state
        self.sq_draining = state is QpState.SQD and (previous is QpState.RTS or self.sq_draining)
        if state is QpState.RESET:
            self.requester.reset()
            self.responder.reset()
            self.events.clear()
            self.established = False
        elif state is QpState.RTR and previous is not QpState.RTR:
            self.responder.start(self.config.rq_psn)
        elif state is QpState.RTS and previous is QpState.RTR:
            self.requester.start(self.config.sq_psn)
        elif state is QpState.ERR:
            self.flush()

    def post_send(self, work: SendWork) -> None:
        if self.state is _ERR:
            self.completions.append(Completion(False, work.wqe_counter, WcStatus.WR_FLUSH_ERR, WC_OPCODES[work.op],
                                               vendor_err=Reason.FLUSHED))  # fmt: skip
            return
        self.requester.queue.append(SendEntry(work, self.config.pmtu))

    def post_recv(self, work: RecvWork) -> None:
        if self.state is _ERR:
            self.completions.append(Completion(True, work.wqe_counter, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                               vendor_err=Reason.FLUSHED))  # fmt: skip
            return
        self.responder.own_queue.append(work)

    def receive(self, pkt: Packet, now: float, malformed: bool = False) -> None:
        """Handle one packet addressed to this QP (already parsed and ICRC-checked); ``malformed``:
        only its BTH, of a packet whose PadCnt does not pad its payload (``BadPadCount``)."""
        if self.state not in RECEIVING_STATES:
            self.counters["drop_qp_state"] += 1
            return
        if pkt.bth.pkey != self.config.pkey:
            self.counters["drop_pkey"] += 1
            return
        if pkt.bth.opcode & 0xE0 != self.service.transport:
            # another transport's opcodes (RC at a UC QP, UD, CNP): not for this QP (rxe check_type_state)
            self.counters["drop_wrong_transport"] += 1
            return
        self.rcvd_pkts += 1
        if self.state is _RTR and not self.established:
            # IBA 11.6.3: the first packet in RTR (header prediction takes none there: a message
            # it would continue began on this path)
            self.established = True
            self.events.append((EventType.COMM_EST, f"QP 0x{self.config.qpn:x}: first packet received in RTR"))
        if OPCODE_FLAGS[pkt.bth.opcode] & Flag.ACK:
            if malformed:
                self.counters["drop_malformed_response"] += 1
            elif self.state is not _RTR:
                self.completer.receive(pkt, now)
            else:
                self.counters["drop_qp_state"] += 1
        else:
            self.responder.receive(pkt, now, malformed)

    def receive_predicted(self, data: memoryview | bytes, now: float) -> bool:
        """Header prediction (Linux TCP's fast path, for RoCE) on a packet as it arrived (BTH
        through ICRC, ICRC checked): the next MIDDLE or LAST packet (no immediate) of the
        message in progress, a SEND ONLY (no immediate, no SE) with a receive WQE waiting
        that holds it, a WRITE's FIRST or ONLY (no immediate) whose RETH the MR takes (RC or
        UC: ``Service.predicted``), or the next response of the READ
        at the head of the send queue, at the expected PSN, is placed without building a
        ``Packet``, and an ACK retires what it acknowledges (RC).
        False when anything is not as predicted: the caller then parses the packet and calls
        ``receive``, so every rule and every error stays in the general path."""
        if len(data) < BTH_LEN:
            return False
        opcode: int  # the BTH's fields typed: compiled, they are tested as machine ints
        flags: int
        pkey: int
        psn: int
        opcode, flags, pkey, _, psn = BTH_STRUCT.unpack_from(data)
        return self.receive_predicted_bth(data, opcode, flags, pkey, psn, now)

    def receive_predicted_bth(self, data: memoryview | bytes, opcode: int, flags: int, pkey: int, psn: int,
                              now: float) -> bool:  # fmt: skip
        """``receive_predicted`` with the packet's BTH read already (``Demux`` reads it to find
        the QP): its opcode, flags byte, P_Key and AckReq|PSN word."""
        config = self.config
        size = len(data)
        if size == ACK_LEN and opcode == _ACKNOWLEDGE:
            # An ACK whose AETH says ACK, for a QP that sends requests: the completer retires
            # what it acknowledges (``Completer.positive_ack``).
            if (not self.service.acked or flags & (TVER_MASK | PAD_MASK) or pkey != config.pkey
                    or self.state not in ACKED_STATES or SYNDROME_KINDS[data[BTH_LEN]] is not AethKind.ACK):  # fmt: skip
                return False
            placed = self.completer.positive_ack(psn & PSN_MASK, now)
        else:
            if size <= BTH_LEN + ICRC_LEN or opcode not in self.service.predicted:
                return False
            if flags & TVER_MASK or pkey != config.pkey or self.state not in RECEIVING_STATES:
                return False
            if self.state is _RTR and not self.established:
                return False  # the first packet in RTR raises COMM_EST: the general path's
            pad = flags >> 4 & 3
            end = size - ICRC_LEN - pad
            op_flags = OPCODE_FLAGS[opcode]
            start = OPCODE_HDR_LEN[opcode]  # BTH, and a READ response's AETH
            if op_flags & Flag.END:  # LAST: 1..PMTU bytes, padded to 4; a solicited one goes the
                if flags & SE_MASK:  # general way, which reports the SE in its completion
                    return False
                if not 0 < end - start <= config.pmtu or pad != -(end - start) & 3:
                    return False
            elif pad or end - start != config.pmtu:  # MIDDLE: exactly PMTU
                return False
            if op_flags & Flag.ACK:  # a READ response: its AETH (LAST) must say ACK
                if self.state is _RTR or (start > BTH_LEN and SYNDROME_KINDS[data[BTH_LEN]] is not AethKind.ACK):
                    return False
                placed = self.completer.receive_read_predicted(
                    psn & PSN_MASK, data[start:end], bool(op_flags & Flag.END), now
                )
            elif op_flags & Flag.RETH:  # a WRITE's FIRST or ONLY: its RETH after the BTH
                va: int
                rkey: int
                dma_len: int
                va, rkey, dma_len = RETH_STRUCT.unpack_from(data, BTH_LEN)
                placed = self.responder.receive_write_predicted(op_flags, psn & PSN_MASK, psn > PSN_MASK, va, rkey,
                                                                dma_len, data, data[start:end])  # fmt: skip
            else:
                placed = self.responder.receive_predicted(op_flags, psn & PSN_MASK, psn > PSN_MASK, data[start:end])
        if placed:
            self.rcvd_pkts += 1
        return placed

    def receive_run(self, segments: memoryview, step: int, now: float) -> int:
        """Header prediction over the ``step``-byte segments of a GRO run (ICRCs checked):
        the first as ``receive_predicted`` takes it; when that was a MIDDLE (of a SEND, a
        WRITE or a READ response), the MIDDLE packets after it in one loop
        (``Responder.receive_middles``, ``Completer.receive_read_middles``).
        Returns the bytes placed from the start of ``segments``; 0 leaves the first segment
        to the general path."""
        first = segments[:step]
        if not self.receive_predicted(first, now):
            return 0
        opcode = segments[0]
        if opcode not in self.service.runs or len(segments) < 2 * step:
            return len(first)
        config = self.config
        if opcode == Opcode.RC_RDMA_READ_RESPONSE_MIDDLE:
            return step + self.completer.receive_read_middles(segments[step:], step, config.pkey, config.qpn, now)
        return step + self.responder.receive_middles(segments[step:], step, opcode, config.pkey, config.qpn)

    def handle_timer(self, now: float) -> None:
        if self.state in SENDING_STATES:
            self.requester.handle_timer(now)

    # --- outputs ------------------------------------------------------------------------

    def output(self, now: float, budget: int = 64, start: bool = True) -> tuple[list[Packet | PacketRun | bytes], int]:
        """Up to ``budget`` packets, the middles of messages as ``PacketRun``s and ACKs as
        bytes (``AckTemplate``): responses first (they free the peer), then requests, of which
        a message not begun begins only if ``start``. Returns them and how many packets they hold."""
        out: list[Packet | PacketRun | bytes] = []
        count = 0
        if self.responder.out and (self.state in RECEIVING_STATES or self.state is _ERR):
            count = self.responder.emit(out, budget)  # in ERROR: the NAK that reported the error still goes
        if self.requester.queue and self.state in SENDING_STATES:
            count += self.requester.emit(out, budget - count, now, start)
        self.sent_pkts += count
        if self.sq_draining and not self.requester.started:
            self._drained()
        return out, count

    def _drained(self) -> None:
        """The drain is over: every WQE started before SQD has completed (rxe
        ``req_check_sq_drain_done``); SQ_DRAINED if the RTS -> SQD asked for it."""
        self.sq_draining = False
        if self.config.sqd_notify:
            self.events.append((EventType.SQ_DRAINED, f"QP 0x{self.config.qpn:x}: send queue drained"))

    def packets_to_send(self, now: float, budget: int = 64) -> list[Packet]:
        """``output`` with every run and ACK spelled out as ``Packet`` values."""
        out: list[Packet] = []
        for item in self.output(now, budget)[0]:
            if isinstance(item, PacketRun):
                out += item.packets()
            elif isinstance(item, bytes):
                out.append(parse_packet(item + bytes(ICRC_LEN)))
            else:
                out.append(item)
        return out

    def get_timer(self) -> float | None:
        """The next deadline at which ``handle_timer`` has work, or ``None``."""
        return self.send_state()[1]

    def send_state(self) -> tuple[bool, float | None]:
        """Whether send WQEs are taken and not yet completed, and ``get_timer``'s deadline: what
        the engine asks after each service, in one call."""
        requester = self.requester
        if self.state not in SENDING_STATES:
            return bool(requester.queue), None
        # waiting out an RNR NAK, else the local ACK timer
        return bool(requester.queue), requester.rnr_until if requester.rnr_until is not None else requester.ack_deadline

    def counts(self) -> Counter[str]:
        """Every count of this QP, the per-packet ones folded in (``qp_stats``)."""
        return folded(self.counters, sent_pkts=self.sent_pkts, rcvd_pkts=self.rcvd_pkts)

    @property
    def has_output(self) -> bool:
        """Whether ``packets_to_send`` would return something now (ignoring timers)."""
        responses = self.responder.has_output and self.state is not QpState.RESET
        return responses or (self.state in SENDING_STATES and self.requester.has_output)

    # --- errors -------------------------------------------------------------------------

    def enter_error(self) -> None:
        """A fatal error (IBA 10.3.1.2): the QP goes to ERROR and all outstanding work flushes."""
        if self.state is not QpState.ERR:
            self.state = QpState.ERR
            self.flush()

    def flush(self) -> None:
        self.requester.flush()
        self.responder.flush()
