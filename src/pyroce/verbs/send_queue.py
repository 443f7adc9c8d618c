"""The driver's side of a QP's send ring, what ``QP.post_send`` hands its WRs to.

Each WR of a posted list is checked as rxe's ``validate_send_wr`` checks it and encoded as a
WQE at the producer counter (in 64-byte basic blocks); the counter is published in the
doorbell record and the doorbell rung once per list; each WQE's ``wr_id`` is kept by its WQE
counter until its completion is polled (``retire``), as libmlx5's ``wrid`` table does.

Every posted send passes here, so this module is compiled with the NIC's (mypyc), while the
verbs' classes, which programs subclass, stay interpreted: the QP keeps what only a rare WR asks
of it (a UD send's address vector, inline data read from its PD) and is called back for those.
"""

from __future__ import annotations

import errno
import struct
import sys
from collections import deque
from typing import Final, Protocol

from pyroce.ib.limits import MAX_MSG_SZ
from pyroce.nic.rings import DoorbellRecord, SendRing
from pyroce.nic.wqe import AddressVector, FmCeSe, SendWqe, SgeLike, WqeOpcode
from pyroce.verbs.enums import ibv_qp_state, ibv_qp_type, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.mw import bind_segment
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.wr import SendWR, overflow_in

WQE_OPCODES: Final = {
    int(ibv_wr_opcode.IBV_WR_SEND): WqeOpcode.SEND,
    int(ibv_wr_opcode.IBV_WR_SEND_WITH_IMM): WqeOpcode.SEND_IMM,
    int(ibv_wr_opcode.IBV_WR_SEND_WITH_INV): WqeOpcode.SEND_INVAL,
    int(ibv_wr_opcode.IBV_WR_RDMA_WRITE): WqeOpcode.RDMA_WRITE,
    int(ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM): WqeOpcode.RDMA_WRITE_IMM,
    int(ibv_wr_opcode.IBV_WR_RDMA_READ): WqeOpcode.RDMA_READ,
    int(ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP): WqeOpcode.ATOMIC_CS,
    int(ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD): WqeOpcode.ATOMIC_FA,
    int(ibv_wr_opcode.IBV_WR_BIND_MW): WqeOpcode.BIND_MW,
    int(ibv_wr_opcode.IBV_WR_LOCAL_INV): WqeOpcode.LOCAL_INVAL,
}
RDMA_OPS: Final = frozenset({WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_IMM, WqeOpcode.RDMA_READ})
ATOMIC_OPS: Final = frozenset({WqeOpcode.ATOMIC_CS, WqeOpcode.ATOMIC_FA})
NO_INLINE_OPS: Final = ATOMIC_OPS | {WqeOpcode.RDMA_READ}  # their data comes back: nothing to carry inline
IMM_OPS: Final = frozenset({WqeOpcode.SEND_IMM, WqeOpcode.RDMA_WRITE_IMM})
INV_OPS: Final = frozenset({WqeOpcode.SEND_INVAL, WqeOpcode.LOCAL_INVAL})  # imm_data is the key to invalidate
SENDING_STATES: Final = frozenset({int(ibv_qp_state.IBV_QPS_RTS), int(ibv_qp_state.IBV_QPS_SQD),
                                   int(ibv_qp_state.IBV_QPS_ERR)})  # fmt: skip
# What a UC QP may post (IBA 9.8: no READ, atomics or SEND with invalidate); another is EINVAL,
# as rxe's validate_send_wr answers "bad wr opcode for qp type"
UC_WQE_OPCODES: Final = frozenset({WqeOpcode.SEND, WqeOpcode.SEND_IMM, WqeOpcode.RDMA_WRITE,
                                   WqeOpcode.RDMA_WRITE_IMM, WqeOpcode.BIND_MW, WqeOpcode.LOCAL_INVAL})  # fmt: skip
# ibv_send_flags and the control segment bits they become, as plain ints (tested per post)
_SIGNALED: Final = int(ibv_send_flags.IBV_SEND_SIGNALED)
_SOLICITED: Final = int(ibv_send_flags.IBV_SEND_SOLICITED)
_FENCE: Final = int(ibv_send_flags.IBV_SEND_FENCE)
_INLINE: Final = int(ibv_send_flags.IBV_SEND_INLINE)
_CQ_UPDATE: Final = int(FmCeSe.CQ_UPDATE)
_SOLICITED_BIT: Final = int(FmCeSe.SOLICITED)
_FENCE_BIT: Final = int(FmCeSe.FENCE)
_UD: Final = int(ibv_qp_type.IBV_QPT_UD)
_UC: Final = int(ibv_qp_type.IBV_QPT_UC)
_BIND_MW: Final = WqeOpcode.BIND_MW
_ATOMIC_CS: Final = WqeOpcode.ATOMIC_CS
_SEND_WORD: Final = DoorbellRecord.SEND


class Doorbells(Protocol):
    """The NIC's side of a doorbell (``NicDevice``, or the shared NIC's client)."""

    def ring_doorbell(self, qpn: int) -> object: ...  # what it returns is not looked at


class PostingQp(Protocol):
    """What a WR asks of its QP beyond the send queue: the state, and the rarer segments."""

    @property
    def _qp_state(self) -> int: ...

    def _address_vector(self, wr: SendWR, opcode: WqeOpcode) -> AddressVector | None: ...

    def _read_local(self, sge: SgeLike) -> bytes: ...


def imm_to_wire(imm_data: int) -> int:
    """The big-endian u32 on the wire for ``imm_data`` as C code holds the ``__be32`` field."""
    return int.from_bytes(imm_data.to_bytes(4, sys.byteorder), "big")  # OverflowError past a u32


def refused(why: str, code: int = errno.EINVAL) -> PyverbsRDMAError:
    """A WR this QP cannot post: the error ``ibv_post_send`` returns, with why."""
    return PyverbsRDMAError(f"Failed to post send: {why}", code)


class SendQueue:
    """A QP's send ring as its driver keeps it: what is posted, what is outstanding."""

    def __init__(self, ring: SendRing, doorbell: DoorbellRecord, qp_num: int, qp_type: int, max_wr: int,
                 max_sge: int, max_inline: int, sig_all: bool, device: Doorbells) -> None:  # fmt: skip
        """``device``: the NIC whose doorbell is rung once per posted list."""
        self.ring = ring
        self.doorbell = doorbell
        self.qp_num = qp_num
        self.qp_type = qp_type
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.max_inline = max_inline
        self.sig_all = sig_all
        self.device = device
        self.wqebbs = ring.wqebb_count
        self.producer = 0  # basic blocks posted
        self.outstanding: deque[tuple[int, int, int]] = deque()  # (first basic block, basic blocks, wr_id)
        self.retired = 0  # basic blocks the NIC has completed

    def post(self, wrs: list[SendWR], all_or_none: bool, qp: PostingQp) -> None:
        """Encode ``wrs`` into the ring and ring the doorbell once for what was posted.
        ``all_or_none`` (``ibv_wr_complete``): a bad WR takes back those before it."""
        first_producer, first_outstanding = self.producer, len(self.outstanding)
        error: Exception | None = None
        state = qp._qp_state
        for wr in wrs:
            try:
                wqe = self.wqe(wr, state, qp)
                after = -1
                if len(self.outstanding) < self.max_wr:
                    # past the published counter: the NIC reads it once the doorbell record moves
                    after = self.ring.post(self.producer, wqe, self.wqebbs - (self.producer - self.retired))
            except PyverbsRDMAError as refusal:
                error = refusal
                break
            except (struct.error, OverflowError) as too_wide:  # a value wider than its WQE field
                error = overflow_in(wr) or too_wide
                break
            if after < 0:
                error = PyverbsRDMAError("Failed to post send: the send queue is full", errno.ENOMEM)
                break
            self.outstanding.append((self.producer, after - self.producer, wr.wr_id))
            self.producer = after
        if error is not None and all_or_none:  # written past the published counter: the NIC never reads it
            self.producer = first_producer
            while len(self.outstanding) > first_outstanding:
                self.outstanding.pop()
        if self.producer != first_producer:
            self.doorbell.publish(_SEND_WORD, self.producer)
            self.device.ring_doorbell(self.qp_num)
        if error is not None:
            raise error

    def wqe(self, wr: SendWR, state: int, qp: PostingQp) -> SendWqe:
        """The WQE of ``wr``, or the error posting it returns."""
        if state not in SENDING_STATES:  # ERROR, where the NIC may have moved it, is one
            raise refused(f"the QP is in {ibv_qp_state(state).name}, not RTS")
        opcode = WQE_OPCODES.get(wr.opcode)
        if opcode is None:
            raise refused(f"opcode {wr.opcode} is not supported on RC", errno.EOPNOTSUPP if wr.opcode in
                          ibv_wr_opcode._value2member_map_ else errno.EINVAL)  # fmt: skip
        if self.qp_type == _UC and opcode not in UC_WQE_OPCODES:
            raise refused(f"opcode {ibv_wr_opcode(wr.opcode).name} is not valid on a UC QP")
        av = qp._address_vector(wr, opcode) if wr.ah is not None or self.qp_type == _UD else None
        num_sge = wr.num_sge
        if num_sge > len(wr.sg):
            raise PyverbsUserError(f"num_sge is {num_sge} but the WR has {len(wr.sg)} SGEs")
        if num_sge > self.max_sge:
            raise refused(f"{num_sge} SGEs exceed max_send_sge {self.max_sge}")
        # The WR's own SGEs go into the WQE's data segments (their values, read once, now)
        sges: tuple[SgeLike, ...] = tuple(wr.sg[:num_sge])
        length = 0
        for sge in sges:
            length += sge.length
        if length > MAX_MSG_SZ:
            raise refused(f"message of {length} bytes exceeds max_msg_sz {MAX_MSG_SZ}")
        send_flags = int(wr.send_flags)  # plain ints: IntFlag operators build an enum member each
        flags = _CQ_UPDATE if send_flags & _SIGNALED or self.sig_all else 0
        if send_flags & _SOLICITED:
            flags |= _SOLICITED_BIT
        if send_flags & _FENCE:
            flags |= _FENCE_BIT
        inline = None
        if send_flags & _INLINE and opcode not in NO_INLINE_OPS:
            if length > self.max_inline:
                raise refused(f"{length} inline bytes exceed max_inline_data {self.max_inline}")
            inline = b"".join([qp._read_local(s) for s in sges])
            sges = ()
        imm = imm_to_wire(wr.imm_data) if opcode in IMM_OPS else wr.imm_data if opcode in INV_OPS else 0
        bind = None
        if opcode is _BIND_MW:
            imm, bind = bind_segment(wr)
            sges = ()
        raddr = rkey = swap_add = compare = None
        if opcode in RDMA_OPS:
            raddr, rkey = wr.remote_addr, wr.rkey
        elif opcode in ATOMIC_OPS:
            raddr, rkey = wr.remote_addr, wr.rkey
            swap_add, compare = (wr.swap, wr.compare_add) if opcode is _ATOMIC_CS else (wr.compare_add, 0)
        return SendWqe(opcode, self.producer & 0xFFFF, self.qp_num, flags, imm, raddr, rkey, swap_add, compare, sges,
                       inline, 0, bind, av)  # fmt: skip

    def retire(self, wqe_counter: int) -> int:
        """The WQEs up to the one at ``wqe_counter`` are done; returns that one's ``wr_id``."""
        wr_id = 0
        while self.outstanding:
            start, wqebbs, wr_id = self.outstanding.popleft()
            self.retired = start + wqebbs
            if start & 0xFFFF == wqe_counter:
                break
        return wr_id

    def reset(self) -> None:
        """Empty (after a reset: its WQEs are gone, IBA 10.3.1)."""
        self.producer = self.retired = 0
        self.outstanding.clear()
