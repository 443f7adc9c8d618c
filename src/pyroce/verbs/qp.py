"""Queue pairs (pyverbs ``qp.pyx``): ``QPCap``, ``QPInitAttr``, ``QPAttr`` and ``QP``.

The QP's send and receive queues are rings in memory shared with the NIC, in mlx5's layouts:
``post_send`` encodes each WR as a WQE at the send producer counter (in 64-byte basic
blocks), publishes the counter in the doorbell record and rings the doorbell; ``post_recv``
does the same on the receive ring. The NIC reports completions by ``wqe_counter``, which this
object turns back into ``wr_id`` (``send_queue.retire``; ``rq.retire``, of its own receive queue or
its SRQ's), as libmlx5 does.
State changes are checked against the kernel's transition table (``qp_transitions``) and the
device limits before the NIC sees them, with the errno libibverbs returns.
"""

from __future__ import annotations

import copy
import errno
from collections import deque
from typing import TYPE_CHECKING

from pyroce.ib.enums import Access, QpState
from pyroce.ib.limits import MAX_INLINE_DATA
from pyroce.ib.reasons import Reason
from pyroce.nic.rings import COUNTER_MASK, DoorbellRecord, RecvRing, SendRing
from pyroce.nic.wqe import (
    AV_SEGS,
    MAX_DS,
    SEG,
    WQEBB,
    AddressVector,
    SgeLike,
    WqeOpcode,
    inline_room,
)
from pyroce.verbs.addr import GID, AHAttr
from pyroce.verbs.ah import AH
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.completions import CompletingQp
from pyroce.verbs.cq import CQ
from pyroce.verbs.enums import ibv_mtu, ibv_qp_state, ibv_qp_type, ibv_wr_opcode
from pyroce.verbs.enums import ibv_qp_attr_mask as M
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.qp_transitions import TransitionError, check_transition, required_mask
from pyroce.verbs.recv_queue import RecvQueue, pow2_at_least
from pyroce.verbs.send_queue import SendQueue, refused
from pyroce.verbs.srq import SRQ
from pyroce.verbs.wr import RecvWR, SendWR
from pyroce.wire.mtu import mtu_to_bytes
from pyroce.wire.opcodes import Transport
from pyroce.wire.psn import PSN_MASK

if TYPE_CHECKING:
    from pyroce.verbs.mw import MW, MWBind

TRANSPORTS = {ibv_qp_type.IBV_QPT_RC: Transport.RC, ibv_qp_type.IBV_QPT_UC: Transport.UC,
              ibv_qp_type.IBV_QPT_UD: Transport.UD}  # fmt: skip
UD_WQE_OPCODES = {WqeOpcode.SEND, WqeOpcode.SEND_IMM}  # a UD message is a SEND (IBA 9.8.3)
_UD = int(ibv_qp_type.IBV_QPT_UD)
NO_RECV_RING = RecvRing(memoryview(bytearray(SEG)), 1, SEG)  # what an SRQ's QP gives the NIC as its own
# The most basic blocks a send queue may hold, as mlx5 refuses a queue past its max WQEBBs (EINVAL):
# the WQE counters are 16 bits, so 65536 posted would read as none to the NIC, and the QP would hang.
MAX_SQ_WQEBBS = COUNTER_MASK


class QPCap:
    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1, max_recv_sge: int = 1,
                 max_inline_data: int = 0) -> None:  # fmt: skip
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data


class QPInitAttr:
    def __init__(self, qp_type: int = ibv_qp_type.IBV_QPT_UD, qp_context: object = None, scq: CQ | None = None,
                 rcq: CQ | None = None, srq: object = None, cap: QPCap | None = None, sq_sig_all: int = 0) -> None:  # fmt: skip
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap if cap is not None else QPCap()
        self.sq_sig_all = sq_sig_all


class QPAttr:
    """``ibv_qp_attr``: defaults as pyverbs sets them (for RESET -> INIT)."""

    def __init__(self, qp_state: int = ibv_qp_state.IBV_QPS_INIT, cur_qp_state: int = ibv_qp_state.IBV_QPS_RESET,
                 port_num: int = 1, path_mtu: int = ibv_mtu.IBV_MTU_1024) -> None:  # fmt: skip
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.port_num = port_num
        self.path_mtu = path_mtu
        self.path_mig_state = 0
        self.qkey = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.dest_qp_num = 0
        self.qp_access_flags = 0
        self.pkey_index = 0
        self.alt_pkey_index = 0
        self.en_sqd_async_notify = 0
        self.sq_draining = 0
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.min_rnr_timer = 0
        self.timeout = 0
        self.retry_cnt = 0
        self.rnr_retry = 0
        self.alt_port_num = 0
        self.alt_timeout = 0
        self.rate_limit = 0
        self.ah_attr = AHAttr()
        self.alt_ah_attr = AHAttr()
        self.cap = QPCap()


# The QPAttr field each ibv_qp_attr_mask bit sets (what query() reports back).
ATTR_MASK_BITS = {
    "qp_access_flags": M.IBV_QP_ACCESS_FLAGS,
    "pkey_index": M.IBV_QP_PKEY_INDEX,
    "port_num": M.IBV_QP_PORT,
    "qkey": M.IBV_QP_QKEY,
    "ah_attr": M.IBV_QP_AV,
    "path_mtu": M.IBV_QP_PATH_MTU,
    "timeout": M.IBV_QP_TIMEOUT,
    "retry_cnt": M.IBV_QP_RETRY_CNT,
    "rnr_retry": M.IBV_QP_RNR_RETRY,
    "rq_psn": M.IBV_QP_RQ_PSN,
    "max_rd_atomic": M.IBV_QP_MAX_QP_RD_ATOMIC,
    "alt_ah_attr": M.IBV_QP_ALT_PATH,
    "min_rnr_timer": M.IBV_QP_MIN_RNR_TIMER,
    "sq_psn": M.IBV_QP_SQ_PSN,
    "max_dest_rd_atomic": M.IBV_QP_MAX_DEST_RD_ATOMIC,
    "path_mig_state": M.IBV_QP_PATH_MIG_STATE,
    "dest_qp_num": M.IBV_QP_DEST_QPN,
    "en_sqd_async_notify": M.IBV_QP_EN_SQD_ASYNC_NOTIFY,
    "rate_limit": M.IBV_QP_RATE_LIMIT,
}

# attribute -> (mask bit, largest value accepted or None, QpConfig field or None)
_LIMITS = {
    "timeout": (M.IBV_QP_TIMEOUT, 31, "timeout"),
    "retry_cnt": (M.IBV_QP_RETRY_CNT, 7, "retry_cnt"),
    "rnr_retry": (M.IBV_QP_RNR_RETRY, 7, "rnr_retry"),
    "min_rnr_timer": (M.IBV_QP_MIN_RNR_TIMER, 31, "min_rnr_timer"),
    "dest_qp_num": (M.IBV_QP_DEST_QPN, PSN_MASK, "dqpn"),
    "rq_psn": (M.IBV_QP_RQ_PSN, None, "rq_psn"),
    "sq_psn": (M.IBV_QP_SQ_PSN, None, "sq_psn"),
}


class QP(PyverbsObject):
    """``QP(pd, init_attr, qp_attr=None)``: an RC, UC or UD queue pair."""

    CLOSE_ORDER = 0

    def __init__(self, creator: PD, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        super().__init__()
        creator._check_open()
        ctx = creator.ctx
        check_injected(ctx.device, "create_qp", "create QP")
        if init_attr.qp_type not in TRANSPORTS:
            raise PyverbsRDMAError(f"Failed to create QP: QP type {init_attr.qp_type} is not supported yet",
                                   errno.EOPNOTSUPP)  # fmt: skip
        srq = init_attr.srq
        if srq is not None:
            if not isinstance(srq, SRQ):
                raise PyverbsUserError(f"srq must be an SRQ, not {type(srq).__name__}")
            srq._check_open()
        scq, rcq = init_attr.send_cq, init_attr.recv_cq
        if not isinstance(scq, CQ) or not isinstance(rcq, CQ):
            raise PyverbsUserError("a connected QP needs a send CQ (scq) and a receive CQ (rcq)")
        # The kernel finds a QP's CQs and SRQ by handle in the PD's context only (EINVAL); a C
        # poller looks the QP up in its CQ's context, and would find none (every wr_id lost).
        owners = (("send CQ", scq.ctx), ("receive CQ", rcq.ctx), ("SRQ", ctx if srq is None else srq.pd.ctx))
        for what, owner in owners:
            if owner is not ctx:
                raise PyverbsRDMAError(f"Failed to create QP: the {what} is of another context than the PD",
                                       errno.EINVAL)  # fmt: skip
        cap = init_attr.cap
        attr = ctx.query_device()
        for name, value, limit in (("max_send_wr", cap.max_send_wr, attr.max_qp_wr),
                                   ("max_recv_wr", cap.max_recv_wr, attr.max_qp_wr),
                                   ("max_send_sge", cap.max_send_sge, attr.max_sge),
                                   ("max_recv_sge", cap.max_recv_sge, attr.max_sge),
                                   ("max_inline_data", cap.max_inline_data, MAX_INLINE_DATA)):  # fmt: skip
            if value < 0 or value > limit:
                raise PyverbsRDMAError(f"Failed to create QP: {name} {value} exceeds the device limit {limit}",
                                       errno.EINVAL)  # fmt: skip
        self.pd = creator
        self.ctx = ctx
        self.qp_type = init_attr.qp_type
        self.init_attr = copy.copy(init_attr)
        self.cap = copy.copy(cap)
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        self.scq, self.rcq = scq, rcq
        inline_segs = -(-(4 + cap.max_inline_data) // SEG) if cap.max_inline_data else 0
        # ctrl, then raddr and atomic, or a UD QP's datagram segment; then data or inline
        fixed = 1 + (AV_SEGS if init_attr.qp_type == ibv_qp_type.IBV_QPT_UD else 2)
        ds = fixed + max(cap.max_send_sge, inline_segs, 1)
        if ds > MAX_DS:
            raise PyverbsRDMAError(f"Failed to create QP: a WQE of {ds} segments is too large", errno.EINVAL)
        self.cap.max_inline_data = min(MAX_INLINE_DATA, inline_room(fixed, ds))  # what the WQE holds, as mlx5
        wqebbs = max(1, cap.max_send_wr) * -(-ds * SEG // WQEBB)
        if wqebbs > MAX_SQ_WQEBBS:
            raise PyverbsRDMAError(f"Failed to create QP: {cap.max_send_wr} WQEs of {ds} segments take {wqebbs} basic "
                                   f"blocks, more than the send queue's {MAX_SQ_WQEBBS}", errno.EINVAL)  # fmt: skip
        self.sq_wqebbs = pow2_at_least(wqebbs)
        self._sq_buf = ctx.driver_memory.alloc(self.sq_wqebbs * WQEBB)
        self._doorbell_buf = ctx.driver_memory.alloc(DoorbellRecord.SIZE)
        self.sq = SendRing(memoryview(self._sq_buf), self.sq_wqebbs)
        self.doorbell = DoorbellRecord(memoryview(self._doorbell_buf))
        self.srq = srq
        # with an SRQ the QP has no receive queue of its own: its receive WQEs (and their
        # wr_ids) are the SRQ's, and the NIC is given an empty ring it never reads
        self.rq = srq.rq if srq is not None else RecvQueue(cap.max_recv_wr, cap.max_recv_sge, self.doorbell,
                                                                      ctx.driver_memory.alloc)  # fmt: skip
        rq_ring = NO_RECV_RING if srq is not None else self.rq.ring
        self.peer_address = ""  # IPv4 address of the connected peer, once the AV is set
        device = ctx.device
        self.device = device
        self.qp_num = device.create_qp(creator.pdn, scq.hw, rcq.hw, memoryview(self._sq_buf), self.sq_wqebbs,
                                       rq_ring.buf, rq_ring.count, rq_ring.stride, memoryview(self._doorbell_buf),
                                       TRANSPORTS[self.qp_type], srq.hw if srq is not None else None,
                                       ctx.async_queue)  # fmt: skip
        self.send_queue = SendQueue(self.sq, self.doorbell, self.qp_num, self.qp_type, cap.max_send_wr, cap.max_send_sge,
                                    self.cap.max_inline_data, self.sq_sig_all, device)  # fmt: skip
        self._qp_state = ibv_qp_state.IBV_QPS_RESET
        self.attr = QPAttr(qp_state=ibv_qp_state.IBV_QPS_RESET)
        # what its CQs' readers ask of it per CQE (its reset_at: CQ number -> CQEs before this
        # index belong to before a reset)
        self.completing = CompletingQp(self.rq, self.send_queue, self.explain)
        scq.qps[self.qp_num] = self.completing
        rcq.qps[self.qp_num] = self.completing
        for parent in (creator, scq, rcq):  # not the SRQ: it is busy while the QP lives (EBUSY)
            parent.add_ref(self)
        if qp_attr is not None:  # as pyverbs: a connected QP to INIT, a UD QP (needing no peer) to RTS
            (self.to_rts if self.qp_type == ibv_qp_type.IBV_QPT_UD else self.to_init)(qp_attr)

    # --- state machine ------------------------------------------------------------------

    @property
    def qp_state(self) -> ibv_qp_state:
        """The state as the NIC has it: it moves a QP to ERROR by itself (retries exhausted, a
        remote access error), as a device does, and ``query`` and ``modify`` start from there."""
        state = self._qp_state
        if (state not in (ibv_qp_state.IBV_QPS_RESET, ibv_qp_state.IBV_QPS_ERR) and not self.closed
                and self.device.qp_state(self.qp_num) is QpState.ERR):  # fmt: skip
            state = self._qp_state = ibv_qp_state.IBV_QPS_ERR
        return state

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: EINVAL for a transition or attribute the kernel would refuse, and,
        as rxe, for leaving SQD (but to ERR) while the send queue is still draining."""
        self._check_open()
        check_injected(self.ctx.device, "modify_qp", "modify QP")
        cur = qp_attr.cur_qp_state if attr_mask & M.IBV_QP_CUR_STATE else self.qp_state
        target = qp_attr.qp_state if attr_mask & M.IBV_QP_STATE else cur
        try:
            name = ibv_qp_state(target).name
        except ValueError:
            raise PyverbsRDMAError(f"Failed to modify QP state to {target}: no such state", errno.EINVAL) from None
        try:
            check_transition(self.qp_type, cur, target, attr_mask)
        except TransitionError as exc:
            raise PyverbsRDMAError(f"Failed to modify QP state to {name}: {exc.reason}", errno.EINVAL) from None
        if (attr_mask & M.IBV_QP_STATE and cur == ibv_qp_state.IBV_QPS_SQD and target != ibv_qp_state.IBV_QPS_ERR
                and self.device.qp_sq_draining(self.qp_num)):  # fmt: skip
            raise PyverbsRDMAError(f"Failed to modify QP state to {name}: the send queue is still draining",
                                   errno.EINVAL)  # fmt: skip
        changes, peer = self._changes(qp_attr, attr_mask, name)
        if self.qp_state == ibv_qp_state.IBV_QPS_RTS and target == ibv_qp_state.IBV_QPS_SQD:
            # SQ_DRAINED is raised for this drain if this transition asks for it (the attribute
            # belongs to RTS -> SQD alone; mlx4 reads it so; rxe raises the event regardless)
            changes["sqd_notify"] = bool(attr_mask & M.IBV_QP_EN_SQD_ASYNC_NOTIFY and qp_attr.en_sqd_async_notify)
        self.device.modify_qp(self.qp_num, QpState(target), changes, peer)
        self._qp_state = ibv_qp_state(target)
        if peer is not None:
            self.peer_address = peer
        if target == ibv_qp_state.IBV_QPS_RESET:
            self._empty_queues()
        for field, bit in ATTR_MASK_BITS.items():
            if attr_mask & bit:
                setattr(self.attr, field, copy.copy(getattr(qp_attr, field)))
        self.attr.qp_state = self.qp_state

    def _empty_queues(self) -> None:
        """After a reset the queues start empty, and CQEs already written for this QP are
        skipped by the CQs (they report work of the QP's previous life)."""
        self.send_queue.reset()
        self._doorbell_buf[:] = bytes(DoorbellRecord.SIZE)
        if self.srq is None:
            self.rq.reset()
        for cq in (self.scq, self.rcq):
            self.completing.reset_at[cq.hw.cqn] = cq.hw.producer

    def _changes(self, attr: QPAttr, mask: int, state_name: str) -> tuple[dict[str, object], str | None]:
        """The transport settings an attribute mask asks for, after the limits rxe checks."""

        def invalid(why: str) -> PyverbsRDMAError:
            return PyverbsRDMAError(f"Failed to modify QP state to {state_name}: {why}", errno.EINVAL)

        device_attr = self.ctx.query_device()
        changes: dict[str, object] = {}
        peer = None
        if mask & M.IBV_QP_PORT and attr.port_num != 1:
            raise invalid(f"port {attr.port_num} does not exist")
        if mask & M.IBV_QP_PKEY_INDEX and attr.pkey_index != 0:
            raise invalid(f"P_Key index {attr.pkey_index} is outside the 1-entry table")
        if mask & M.IBV_QP_ACCESS_FLAGS:
            changes["access"] = Access(attr.qp_access_flags & 0xE)
        if mask & M.IBV_QP_QKEY:
            if not 0 <= attr.qkey <= 0xFFFFFFFF:
                raise invalid(f"qkey {attr.qkey} is not a 32-bit value")
            changes["qkey"] = attr.qkey
        if self.qp_type == ibv_qp_type.IBV_QPT_UD:
            changes["pmtu"] = mtu_to_bytes(self.ctx.active_mtu)  # a UD message is one packet of up to the port's MTU
        if mask & M.IBV_QP_PATH_MTU:
            if attr.path_mtu not in ibv_mtu._value2member_map_:
                raise invalid(f"path_mtu {attr.path_mtu} is not an ibv_mtu value")
            changes["pmtu"] = mtu_to_bytes(attr.path_mtu)
        for name, (bit, limit, field) in _LIMITS.items():
            if mask & bit:
                value = getattr(attr, name)
                if value < 0 or (limit is not None and value > limit):
                    raise invalid(f"{name} {value} is outside 0..{limit}")
                changes[field] = value & PSN_MASK
        if mask & M.IBV_QP_MAX_QP_RD_ATOMIC:
            if not 0 <= attr.max_rd_atomic <= device_attr.max_qp_init_rd_atom:
                raise invalid(f"max_rd_atomic {attr.max_rd_atomic} exceeds {device_attr.max_qp_init_rd_atom}")
            changes["max_rd_atomic"] = attr.max_rd_atomic
        if mask & M.IBV_QP_MAX_DEST_RD_ATOMIC:
            if not 0 <= attr.max_dest_rd_atomic <= device_attr.max_qp_rd_atom:
                raise invalid(f"max_dest_rd_atomic {attr.max_dest_rd_atomic} exceeds {device_attr.max_qp_rd_atom}")
            changes["max_dest_rd_atomic"] = attr.max_dest_rd_atomic
        if mask & M.IBV_QP_AV:
            if attr.ah_attr.port_num not in (0, 1):
                raise invalid(f"ah_attr port {attr.ah_attr.port_num} does not exist")
            if not self.ctx.gids.valid(attr.ah_attr.gr.sgid_index):
                raise invalid(f"sgid_index {attr.ah_attr.gr.sgid_index} names no GID (indices 0.."
                              f"{len(self.ctx.gids.entries) - 1} hold one)")  # fmt: skip
            peer = attr.ah_attr.peer_address(self.device.route)
        return changes, peer

    def _to(self, qp_attr: QPAttr, state: int) -> None:
        qp_attr.qp_state = state
        self.modify(qp_attr, required_mask(self.qp_type, self.qp_state, state) | M.IBV_QP_STATE)

    def to_init(self, qp_attr: QPAttr) -> None:
        """RESET -> INIT with the attributes the transition requires."""
        self._to(qp_attr, ibv_qp_state.IBV_QPS_INIT)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        """To RTR; a QP still in RESET goes to INIT first."""
        if self.qp_state == ibv_qp_state.IBV_QPS_RESET:
            self.to_init(qp_attr)
        self._to(qp_attr, ibv_qp_state.IBV_QPS_RTR)

    def to_rts(self, qp_attr: QPAttr) -> None:
        """To RTS; a QP in RESET or INIT passes through INIT and RTR first."""
        if self.qp_state in (ibv_qp_state.IBV_QPS_RESET, ibv_qp_state.IBV_QPS_INIT):
            self.to_rtr(qp_attr)
        self._to(qp_attr, ibv_qp_state.IBV_QPS_RTS)

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        self._check_open()
        attr = copy.copy(self.attr)
        attr.qp_state = attr.cur_qp_state = self.qp_state
        attr.sq_draining = int(self.device.qp_sq_draining(self.qp_num))
        attr.cap = copy.copy(self.cap)
        return attr, copy.copy(self.init_attr)

    # --- data path ----------------------------------------------------------------------

    def post_send(self, send_wr: SendWR, bad_wr: object = None) -> None:
        """Write one WQE per WR of the chain, then ring the doorbell once. WRs before a bad one
        are posted, as in libibverbs; the bad one raises."""
        if self.closed:
            raise self._closed_error()
        if self.ctx.device.verb_faults is not None:  # a fault plan's: no call per post without one
            check_injected(self.ctx.device, "post_send", "post send")
        wrs = []
        wr: SendWR | None = send_wr
        while wr is not None:
            wrs.append(wr)
            wr = wr.next_wr
        self.send_queue.post(wrs, False, self)

    @property
    def sq_producer(self) -> int:
        """Basic blocks posted (a self-posting driver, the GPU's, starts from here)."""
        return self.send_queue.producer

    @property
    def sq_outstanding(self) -> deque[tuple[int, int, int]]:
        """(first basic block, basic blocks, ``wr_id``) of each WQE whose completion is not polled."""
        return self.send_queue.outstanding

    def _address_vector(self, wr: SendWR, opcode: WqeOpcode) -> AddressVector | None:
        """A UD send's destination (its WQE's datagram segment); a connected QP's WR has none."""
        ah = wr.ah
        if self.qp_type != _UD:
            if ah is not None:
                raise refused(f"an address handle is for UD QPs, not {ibv_qp_type(self.qp_type).name}")
            return None
        if opcode not in UD_WQE_OPCODES:
            raise refused(f"opcode {ibv_wr_opcode(wr.opcode).name} is not valid on a UD QP")
        if not isinstance(ah, AH):
            raise refused("a UD send needs an address handle (SendWR.set_wr_ud)")
        ah._check_open()
        if not 0 <= wr.remote_qpn <= PSN_MASK or not 0 <= wr.remote_qkey <= 0xFFFFFFFF:
            raise refused(f"remote QPN 0x{wr.remote_qpn:x} or Q_Key 0x{wr.remote_qkey:x} out of range")
        gr = ah.attr.gr
        return AddressVector(wr.remote_qkey, wr.remote_qpn, gr.dgid.raw, gr.sgid_index, gr.flow_label,
                             gr.traffic_class, gr.hop_limit, ah.attr.sl)  # fmt: skip

    def _read_local(self, sge: SgeLike) -> bytes:
        """Inline data is copied at post time from memory this process registered."""
        return self.pd.read_registered(sge.addr, sge.length, "post send")

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        if self.closed:
            raise self._closed_error()
        if self.ctx.device.verb_faults is not None:  # a fault plan's: no call per post without one
            check_injected(self.ctx.device, "post_recv", "post receive")
        if self.srq is not None:  # rxe: the QP has no receive queue (ibv_post_srq_recv is the way)
            raise PyverbsRDMAError("Failed to post receive: the QP takes its receives from an SRQ", errno.EINVAL)
        if self._qp_state == ibv_qp_state.IBV_QPS_RESET:
            raise PyverbsRDMAError("Failed to post receive: the QP is in RESET", errno.EINVAL)
        producer = self.rq.producer
        try:
            self.rq.post(wr)
        finally:
            if self.rq.producer != producer:
                self.device.note_receives(self.qp_num)

    def explain(self, vendor_err: int) -> str:
        """One line on a failed completion: this QP, its peer and the cause, e.g.
        ``qp 0x11 -> 10.0.0.2 qp 0x12: no ACK for PSN 0x001234 after 7 retries ...``."""
        reason = Reason(vendor_err) if vendor_err in Reason._value2member_map_ else Reason.NONE
        detail = reason.text if reason in (Reason.FLUSHED, Reason.NONE) else self.device.qp_error_detail(self.qp_num)
        peer = f"{self.peer_address or '?'} qp 0x{self.attr.dest_qp_num:x}"
        return f"qp 0x{self.qp_num:x} -> {peer}: {detail or reason.text}"

    def attach_mcast(self, gid: GID, lid: int = 0) -> None:
        """``ibv_attach_mcast``: this UD QP receives the datagrams sent to multicast group
        ``gid`` (a copy to each QP attached); attaching again is nothing. EINVAL for another
        QP type, a GID that is not multicast, or a device limit reached (``nic.multicast``, as
        rxe). RoCE ignores ``lid`` (IBA A17.5.6)."""
        self._mcast("attach", gid, lid)

    def detach_mcast(self, gid: GID, lid: int = 0) -> None:
        """``ibv_detach_mcast``: EINVAL if the QP is not attached to ``gid``. Destroying the QP
        detaches it from every group."""
        self._mcast("detach", gid, lid)

    def _mcast(self, verb: str, gid: GID, lid: int) -> None:
        self._check_open()
        if not isinstance(gid, GID):
            raise PyverbsUserError(f"gid must be a GID, not {type(gid).__name__}")
        if not 0 <= lid <= 0xFFFF:
            raise PyverbsRDMAError(f"Failed to {verb} QP to multicast group: LID {lid} is not 16 bits", errno.EINVAL)
        command = self.device.attach_mcast if verb == "attach" else self.device.detach_mcast
        try:
            command(self.qp_num, gid.raw)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to {verb} QP to multicast group: {exc}", errno.EINVAL) from None

    def bind_mw(self, mw: MW, mw_bind: MWBind) -> None:
        """Bind a type 1 memory window to a range of an MR (``ibv_bind_mw``)."""
        self._check_open()
        mw.bind_type1(self.pd, self.qp_num, mw_bind)

    @property
    def driver_rings(self) -> tuple[memoryview, memoryview]:
        """What another driver of this QP (the C library) writes: the send ring and the doorbell
        record (the receive ring is ``rq.ring``)."""
        return memoryview(self._sq_buf), memoryview(self._doorbell_buf)

    def _release(self) -> None:
        self.device.destroy_qp(self.qp_num)
        self.scq.qps.pop(self.qp_num, None)
        self.rcq.qps.pop(self.qp_num, None)
