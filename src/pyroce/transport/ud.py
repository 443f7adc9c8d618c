"""One unreliable datagram QP (IBA 9.8.x, 10.2.5), as a sans-IO protocol object.

UD has no connection: each send WR names its destination (``SendWork.ud``: GID, QPN, Q_Key,
from the WQE's datagram segment) and is one packet (BTH, DETH, maybe ImmDt, at most the port's
MTU of payload), sent once, never acknowledged; the WR completes once its packet is handed to
the wire; one to a multicast GID goes to destination QP 0xFFFFFF, which every QP attached to
the group takes (``transport.demux``). The receiver checks P_Key and Q_Key, takes a receive
WQE and writes the packet's network header into its first 40 bytes
(``wire.framing.network_header``), the payload after.

What goes wrong stays local to the WR or the packet, not the QP (Linux's CVE-2024-40992
class): a send longer than the MTU fails that WR with IBV_WC_LOC_LEN_ERR and the QP stays in
RTS (IBA C10-93.1.1, which rxe follows, would complete it as sent without sending: an error
that explains itself is kinder); a datagram longer than the receive buffer is dropped and
counted, its WQE left for the next one, nothing written past the buffer.

Interface: the one the engine uses for ``RcQp`` (``post_send``, ``post_recv``, ``modify``,
``completions``, ``enter_error``, ...), except that ``output`` pairs each packet with the
link's address for its destination GID and ``receive`` takes the network header the packet
came with.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import Final

from pyroce.ib.addressing import is_multicast_gid
from pyroce.ib.counters import Counters, folded
from pyroce.ib.enums import Access, EventType, QpState, WcFlag, WcOpcode, WcStatus
from pyroce.ib.reasons import Reason
from pyroce.transport.completion import Completion
from pyroce.transport.memory import MemFault, MemoryTable
from pyroce.transport.rc import RECEIVING_STATES, QpConfig
from pyroce.transport.responder import RecvSource, Refill, nothing_posted
from pyroce.transport.sgl import ScatterGather
from pyroce.transport.work import RecvWork, SendWork, WorkOp
from pyroce.wire.bth import BTH, MULTICAST_QPN
from pyroce.wire.framing import GRH_LEN, carries_ipv4
from pyroce.wire.headers import Deth
from pyroce.wire.opcodes import Opcode, Transport
from pyroce.wire.packet import Packet
from pyroce.wire.psn import psn_add

CONTROLLED_QKEY: Final = 0x80000000  # a WR's Q_Key with this bit set means "use the QP's own" (IBA 10.2.5)
_LOCAL_READ: Final = int(Access.LOCAL_READ)  # the memory table's access flags: plain ints (MemoryTable.lookup)
_LOCAL_WRITE: Final = int(Access.LOCAL_WRITE)
_RTS: Final = QpState.RTS  # enum members read per message, as constants (docs/architecture.md, "Compiled with mypyc")
_ERR: Final = QpState.ERR
UD_OPCODES: Final = {WorkOp.SEND: Opcode.UD_SEND_ONLY, WorkOp.SEND_WITH_IMM: Opcode.UD_SEND_ONLY_WITH_IMMEDIATE}

Route = Callable[[bytes], str | None]  # a destination GID to the link's address for it (None: unreachable)
Datagram = tuple[str, Packet]  # the link's address of the destination, the packet


class UdQp:
    """The protocol state of one UD QP. Not thread-safe: one caller at a time."""

    def __init__(self, config: QpConfig, memory: MemoryTable, srq: RecvSource | None = None) -> None:
        """``config.pmtu`` is the port's active MTU (UD has no path MTU); ``config.qkey`` the
        QP's Q_Key. ``srq``: a shared receive queue to take receive WQEs from."""
        self.config = config
        self.memory = memory
        self.state = QpState.RESET
        self.completions: list[Completion] = []
        self.counters: Counter[str] = Counters()  # its events by name; ``counts()`` reads them all
        self.sent_pkts = 0  # the per-packet counts, kept as ints (``pyroce.ib.counters``)
        self.rcvd_pkts = 0
        self.error_detail = ""
        self.events: list[tuple[EventType, str]] = []  # async events raised (SQ_DRAINED), one line each
        self.sq_draining = False  # a UD send is done once handed to the wire: SQD is drained at once
        self.psn = 0
        self.send_queue: deque[SendWork] = deque()
        self.own_queue: deque[RecvWork] = deque()
        self.recv_queue: deque[RecvWork] | RecvSource = self.own_queue if srq is None else srq
        self.refill: Refill = nothing_posted

    # --- inputs -------------------------------------------------------------------------

    def modify(self, state: QpState) -> None:
        previous, self.state = self.state, state
        if state is QpState.RESET:
            self.send_queue.clear()
            self.own_queue.clear()
            self.events.clear()
        elif state is QpState.RTS and previous is QpState.RTR:
            self.psn = self.config.sq_psn
        elif state is QpState.SQD and previous is QpState.RTS and self.config.sqd_notify:
            self.events.append((EventType.SQ_DRAINED, f"QP 0x{self.config.qpn:x}: send queue drained"))
        elif state is QpState.ERR:
            self.flush()

    def post_send(self, work: SendWork) -> None:
        if self.state is _ERR:
            self._fail(work, WcStatus.WR_FLUSH_ERR, Reason.FLUSHED)
            return
        self.send_queue.append(work)

    def post_recv(self, work: RecvWork) -> None:
        if self.state is _ERR:
            self.completions.append(Completion(True, work.wqe_counter, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                               vendor_err=Reason.FLUSHED))  # fmt: skip
            return
        self.own_queue.append(work)

    def receive(self, pkt: Packet, now: float, network: bytes | None = None) -> None:
        """One packet addressed to this QP (parsed, ICRC checked); ``network``: the 40 bytes
        of its network header for the receive buffer (None: not known, zeros and no GRH flag)."""
        if self.state not in RECEIVING_STATES:
            self.counters["drop_qp_state"] += 1
            return
        bth, deth = pkt.bth, pkt.deth
        if bth.opcode & 0xE0 != Transport.UD or deth is None:
            self.counters["drop_wrong_transport"] += 1
            return
        if bth.pkey != self.config.pkey:
            self.counters["drop_pkey"] += 1
            return
        if deth.qkey != self.config.qkey:
            self.counters["drop_qkey"] += 1  # a Q_Key violation (IBA 10.2.5): silently dropped
            return
        self.rcvd_pkts += 1
        if not self.recv_queue and not self.refill():
            self.counters["drop_no_recv_wqe"] += 1  # UD has no RNR: the datagram is lost
            return
        recv = self.recv_queue.popleft()
        data = ScatterGather.resolve(self.memory, recv.sges, _LOCAL_WRITE, self.config.pdn)
        if isinstance(data, MemFault):
            self.error_detail = f"receive WQE {recv.wqe_counter}: {data.value}"
            self.completions.append(Completion(True, recv.wqe_counter, WcStatus.LOC_PROT_ERR, WcOpcode.RECV,
                                               vendor_err=Reason.RECV_PROTECTION))  # fmt: skip
            self.enter_error()
            return
        payload = pkt.payload
        if GRH_LEN + len(payload) > data.length:
            self.recv_queue.appendleft(recv)
            self.counters["drop_ud_too_long"] += 1
            return
        data.write(0, network if network is not None else bytes(GRH_LEN))
        data.write(GRH_LEN, payload)
        flags = WcFlag.GRH if network is not None else WcFlag.NONE
        imm = 0
        if pkt.immdt is not None:
            flags, imm = flags | WcFlag.WITH_IMM, pkt.immdt
        self.completions.append(Completion(True, recv.wqe_counter, WcStatus.SUCCESS, WcOpcode.RECV,
                                           GRH_LEN + len(payload), imm, flags, deth.src_qp, solicited=bth.se,
                                           ipv4=network is not None and carries_ipv4(network)))  # fmt: skip

    def handle_timer(self, now: float) -> None:
        """UD has no timers (nothing is acknowledged)."""

    # --- outputs ------------------------------------------------------------------------

    def output(self, now: float, budget: int, route: Route) -> tuple[list[Datagram], int]:
        """Up to ``budget`` datagrams, in posting order, each with the address ``route`` gives
        its destination GID; a WR whose GID has none fails (IBV_WC_LOC_QP_OP_ERR, the QP
        stays in RTS)."""
        out: list[Datagram] = []
        queue = self.send_queue
        while queue and len(out) < budget and self.state is _RTS:
            datagram = self._datagram(queue.popleft(), route)
            if datagram is not None:
                out.append(datagram)
        self.sent_pkts += len(out)
        return out, len(out)

    def _datagram(self, work: SendWork, route: Route) -> Datagram | None:
        """The packet of ``work`` (its completion written as it goes), or None if it failed."""
        config = self.config
        opcode = UD_OPCODES.get(work.op)
        if opcode is None or work.ud is None:
            what = f"{work.op.name} on a UD QP" if opcode is None else "a UD send WQE without a datagram segment"
            self.error_detail = f"WQE {work.wqe_counter}: {what}"
            self._fail(work, WcStatus.LOC_QP_OP_ERR, Reason.OP_NOT_SUPPORTED)
            self.enter_error()
            return None
        peer = route(work.ud.dgid)
        if peer is None:
            self.counters["ud_no_route"] += 1
            self.error_detail = f"WQE {work.wqe_counter}: GID {work.ud.dgid.hex()} is not reachable on this link"
            self._fail(work, WcStatus.LOC_QP_OP_ERR, Reason.NO_ROUTE)
            return None
        if work.length > config.pmtu:
            self.counters["ud_too_long"] += 1
            self.error_detail = f"WQE {work.wqe_counter}: {work.length} bytes exceed the {config.pmtu}-byte MTU"
            self._fail(work, WcStatus.LOC_LEN_ERR, Reason.UD_TOO_LONG)
            return None
        if work.inline is not None:
            payload: bytes | memoryview = work.inline
        else:
            data = ScatterGather.resolve(self.memory, work.sges, _LOCAL_READ, config.pdn)
            if isinstance(data, MemFault):
                sges = ", ".join(f"lkey 0x{s.lkey:x} addr 0x{s.addr:x} len {s.length}" for s in work.sges)
                self.error_detail = f"WQE {work.wqe_counter}: {data.value}: {sges}"
                self._fail(work, WcStatus.LOC_PROT_ERR, Reason.LOCAL_PROTECTION)
                self.enter_error()
                return None
            payload = data.read(0, data.length)
        dest = work.ud
        qkey = config.qkey if dest.qkey & CONTROLLED_QKEY else dest.qkey
        dqpn = MULTICAST_QPN if is_multicast_gid(dest.dgid) else dest.dqpn  # a group's members, not one QP
        bth = BTH(opcode, dqpn, self.psn, se=work.solicited, pkey=config.pkey)
        immdt = work.imm if work.op is WorkOp.SEND_WITH_IMM else None
        self.psn = psn_add(self.psn, 1)
        if work.signaled:
            self.completions.append(Completion(False, work.wqe_counter, WcStatus.SUCCESS, WcOpcode.SEND))
        return peer, Packet(bth, payload, deth=Deth(qkey, config.qpn), immdt=immdt)

    def send_state(self) -> tuple[bool, float | None]:
        """Send WQEs taken but not yet completed (they wait for RTS), and no timer."""
        return bool(self.send_queue), None

    def counts(self) -> Counter[str]:
        """Every count of this QP, the per-packet ones folded in (``qp_stats``)."""
        return folded(self.counters, sent_pkts=self.sent_pkts, rcvd_pkts=self.rcvd_pkts)

    @property
    def has_output(self) -> bool:
        return bool(self.send_queue) and self.state is _RTS

    # --- errors -------------------------------------------------------------------------

    def _fail(self, work: SendWork, status: WcStatus, reason: Reason) -> None:
        self.completions.append(Completion(False, work.wqe_counter, status, WcOpcode.SEND, vendor_err=reason))

    def enter_error(self) -> None:
        if self.state is not QpState.ERR:
            self.state = QpState.ERR
            self.flush()

    def flush(self) -> None:
        """ERROR: every posted send and receive completes with WR_FLUSH_ERR (of a shared
        receive queue, none: its WQEs serve the other QPs)."""
        while self.send_queue:
            self._fail(self.send_queue.popleft(), WcStatus.WR_FLUSH_ERR, Reason.FLUSHED)
        while self.own_queue:
            recv = self.own_queue.popleft()
            self.completions.append(Completion(True, recv.wqe_counter, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                               vendor_err=Reason.FLUSHED))  # fmt: skip
