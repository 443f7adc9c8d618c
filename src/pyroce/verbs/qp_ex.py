"""Extended QPs (pyverbs ``qp.pyx``): ``QPInitAttrEx``, ``DataBuffer`` and ``QPEx``.

The ``wr_*`` builders collect work requests between ``wr_start`` and ``wr_complete``; the
latter posts them through ``QP.post_send``'s own encoder (the same mlx5 WQEs) with one
doorbell, all or none: a bad WR raises and nothing of the batch is posted, as
``ibv_wr_complete`` returns the error it latched. ``wr_abort`` drops the batch; the ring is only
written at ``wr_complete``. What the QP type cannot send (rxe's ``check_qp_init_attr``) or
pyroce does not do (TSO, atomic write, flush, XRC) is EOPNOTSUPP.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from pyroce.verbs.ah import AH
from pyroce.verbs.completions import imm_from_wire
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_qp_create_send_ops_flags as Ops
from pyroce.verbs.enums import ibv_qp_init_attr_mask, ibv_qp_type, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, SendWR

if TYPE_CHECKING:
    from pyroce.verbs.mw import MW, MWBindInfo

RC_SEND_OPS = (Ops.IBV_QP_EX_WITH_SEND | Ops.IBV_QP_EX_WITH_SEND_WITH_IMM | Ops.IBV_QP_EX_WITH_RDMA_WRITE
               | Ops.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | Ops.IBV_QP_EX_WITH_RDMA_READ
               | Ops.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | Ops.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
               | Ops.IBV_QP_EX_WITH_SEND_WITH_INV | Ops.IBV_QP_EX_WITH_BIND_MW | Ops.IBV_QP_EX_WITH_LOCAL_INV)  # fmt: skip
UC_SEND_OPS = (Ops.IBV_QP_EX_WITH_SEND | Ops.IBV_QP_EX_WITH_SEND_WITH_IMM | Ops.IBV_QP_EX_WITH_RDMA_WRITE
               | Ops.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | Ops.IBV_QP_EX_WITH_BIND_MW
               | Ops.IBV_QP_EX_WITH_LOCAL_INV)  # fmt: skip
UD_SEND_OPS = Ops.IBV_QP_EX_WITH_SEND | Ops.IBV_QP_EX_WITH_SEND_WITH_IMM
SEND_OPS = {ibv_qp_type.IBV_QPT_RC: int(RC_SEND_OPS), ibv_qp_type.IBV_QPT_UC: int(UC_SEND_OPS),
            ibv_qp_type.IBV_QPT_UD: int(UD_SEND_OPS)}  # fmt: skip
# the send_ops_flags bit that enables each WR opcode's builder
OP_FLAG = {
    ibv_wr_opcode.IBV_WR_SEND: Ops.IBV_QP_EX_WITH_SEND,
    ibv_wr_opcode.IBV_WR_SEND_WITH_IMM: Ops.IBV_QP_EX_WITH_SEND_WITH_IMM,
    ibv_wr_opcode.IBV_WR_SEND_WITH_INV: Ops.IBV_QP_EX_WITH_SEND_WITH_INV,
    ibv_wr_opcode.IBV_WR_RDMA_WRITE: Ops.IBV_QP_EX_WITH_RDMA_WRITE,
    ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM: Ops.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
    ibv_wr_opcode.IBV_WR_RDMA_READ: Ops.IBV_QP_EX_WITH_RDMA_READ,
    ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP: Ops.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
    ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD: Ops.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
    ibv_wr_opcode.IBV_WR_BIND_MW: Ops.IBV_QP_EX_WITH_BIND_MW,
    ibv_wr_opcode.IBV_WR_LOCAL_INV: Ops.IBV_QP_EX_WITH_LOCAL_INV,
}
_INLINE = int(ibv_send_flags.IBV_SEND_INLINE)


# what rxe takes in comp_mask (RXE_QP_COMP_MASK_SUP, XRC aside); its create flags are none
_COMP_MASK = (ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_CREATE_FLAGS
              | ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)  # fmt: skip


def send_ops(qp_type: int, comp_mask: int, send_ops_flags: int, create_flags: int) -> int:
    """The operations an extended QP is created for, or EOPNOTSUPP for what rxe does not do
    (``comp_mask`` beyond the PD, create flags and send ops; any create flag) or the QP type
    cannot send."""
    if comp_mask & ~_COMP_MASK:
        raise PyverbsRDMAError("Failed to create QP: comp_mask asks for what rxe does not do", errno.EOPNOTSUPP)
    if comp_mask & ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_CREATE_FLAGS and create_flags:
        raise PyverbsRDMAError(f"Failed to create QP: create_flags 0x{create_flags:x} are not supported",
                               errno.EOPNOTSUPP)  # fmt: skip
    ops = send_ops_flags if comp_mask & ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS else 0
    if ops & ~SEND_OPS.get(qp_type, 0):
        raise PyverbsRDMAError(f"Failed to create QP: send_ops_flags 0x{ops:x} include operations this "
                               "QP type cannot send here", errno.EOPNOTSUPP)  # fmt: skip
    return ops


class QPInitAttrEx(QPInitAttr):
    """``ibv_qp_init_attr_ex``: ``comp_mask`` says which of ``pd`` and ``send_ops_flags`` count."""

    def __init__(self, qp_type: int = ibv_qp_type.IBV_QPT_UD, qp_context: object = None, scq: CQ | None = None,
                 rcq: CQ | None = None, srq: object = None, cap: QPCap | None = None, sq_sig_all: int = 0,
                 comp_mask: int = 0, pd: PD | None = None, xrcd: object = None, create_flags: int = 0,
                 max_tso_header: int = 0, source_qpn: int = 0, hash_conf: object = None, ind_table: object = None,
                 send_ops_flags: int = 0) -> None:  # fmt: skip
        super().__init__(qp_type, qp_context, scq, rcq, srq, cap, sq_sig_all)
        self.comp_mask = comp_mask
        self.pd = pd
        self.xrcd = xrcd
        self.create_flags = create_flags
        self.max_tso_header = max_tso_header
        self.source_qpn = source_qpn
        self.hash_conf = hash_conf
        self.ind_table = ind_table
        self.send_ops_flags = send_ops_flags


class DataBuffer:
    """``ibv_data_buf``: ``length`` bytes at ``addr`` for ``wr_set_inline_data_list``."""

    def __init__(self, addr: int, length: int) -> None:
        self.addr = addr
        self.length = length


class QPEx(QP):
    """``QPEx(pd_or_ctx, QPInitAttrEx, qp_attr=None)``: a QP with the ``wr_*`` builders. Given a
    Context, the PD is ``init_attr.pd`` (with IBV_QP_INIT_ATTR_PD, as ``ibv_create_qp_ex``)."""

    def __init__(self, creator: PD | Context, init_attr: QPInitAttrEx, qp_attr: QPAttr | None = None) -> None:
        mask = init_attr.comp_mask
        ops = send_ops(init_attr.qp_type, mask, init_attr.send_ops_flags, init_attr.create_flags)
        if isinstance(creator, Context):
            if not mask & ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_PD or init_attr.pd is None:
                raise PyverbsRDMAError("Failed to create QP: no PD (IBV_QP_INIT_ATTR_PD)", errno.EINVAL)
            creator = init_attr.pd
        super().__init__(creator, init_attr, qp_attr)
        self.send_ops_flags = ops
        self.comp_mask = 0  # ibv_qp_ex's own comp_mask
        self.wr_id = 0
        self.wr_flags = 0
        self._batch: list[SendWR] | None = None  # None outside wr_start ... wr_complete

    def wr_start(self) -> None:
        self._check_open()
        self._batch = []

    def wr_complete(self) -> None:
        """Post the batch, one doorbell; raise (``ibv_wr_complete``'s errno) and post none of it
        if any WR is bad."""
        self._check_open()
        batch = self._take_batch()
        try:
            self.send_queue.post(batch, True, self)
        except PyverbsRDMAError as exc:
            raise PyverbsRDMAError(f"ibv_wr_complete failed: {exc}", exc.error_code) from None

    def wr_abort(self) -> None:
        self._take_batch()

    def _take_batch(self) -> list[SendWR]:
        if self._batch is None:
            raise PyverbsRDMAError("No work requests are being built: wr_start first", errno.EINVAL)
        batch, self._batch = self._batch, None
        return batch

    # --- builders: each starts one WR ---------------------------------------------------

    def wr_send(self) -> None:
        self._build(ibv_wr_opcode.IBV_WR_SEND)

    def wr_send_imm(self, data: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_SEND_WITH_IMM).imm_data = _htobe32(data)

    def wr_send_inv(self, invalidate_rkey: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_SEND_WITH_INV).invalidate_rkey = invalidate_rkey

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_RDMA_WRITE).set_wr_rdma(rkey, remote_addr)

    def wr_rdma_write_imm(self, rkey: int, remote_addr: int, data: int) -> None:
        wr = self._build(ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM)
        wr.set_wr_rdma(rkey, remote_addr)
        wr.imm_data = _htobe32(data)

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_RDMA_READ).set_wr_rdma(rkey, remote_addr)

    def wr_atomic_cmp_swp(self, rkey: int, remote_addr: int, compare: int, swap: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP).set_wr_atomic(rkey, remote_addr, compare, swap)

    def wr_atomic_fetch_add(self, rkey: int, remote_addr: int, add: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD).set_wr_atomic(rkey, remote_addr, add)

    def wr_bind_mw(self, mw: MW, rkey: int, bind_info: MWBindInfo) -> None:
        """Bind the type 2 window ``mw`` to ``bind_info``'s range with the new key ``rkey``."""
        self._build(ibv_wr_opcode.IBV_WR_BIND_MW).bind_mw = (mw, rkey, bind_info)

    def wr_local_inv(self, invalidate_rkey: int) -> None:
        self._build(ibv_wr_opcode.IBV_WR_LOCAL_INV).invalidate_rkey = invalidate_rkey

    def wr_send_tso(self, hdr: int, hdr_sz: int, mss: int) -> None:
        raise _not_here("TSO (a UD and raw-packet operation)")

    def wr_atomic_write(self, rkey: int, remote_addr: int, atomic_wr: bytes) -> None:
        raise _not_here("atomic write")

    def wr_flush(self, rkey: int, remote_addr: int, length: int, ptype: int, level: int) -> None:
        raise _not_here("flush")

    def _build(self, opcode: ibv_wr_opcode) -> SendWR:
        self._check_open()
        if self._batch is None:
            raise PyverbsRDMAError("No work requests are being built: wr_start first", errno.EINVAL)
        if not self.send_ops_flags & OP_FLAG[opcode]:
            raise PyverbsRDMAError(f"{opcode.name} is not in the QP's send_ops_flags", errno.EOPNOTSUPP)
        wr = SendWR(wr_id=self.wr_id, opcode=opcode, send_flags=self.wr_flags & ~_INLINE)
        self._batch.append(wr)
        return wr

    # --- setters: the data of the WR just built ------------------------------------------

    def wr_set_sge(self, sge: SGE) -> None:
        self.wr_set_sge_list(1, [sge])

    def wr_set_sge_list(self, num_sge: int, sg_list: list[SGE]) -> None:
        wr = self._last()
        wr.sg, wr.num_sge = [SGE(s.addr, s.length, s.lkey) for s in sg_list[:num_sge]], num_sge
        wr.send_flags &= ~_INLINE

    def wr_set_inline_data(self, addr: int, length: int) -> None:
        self.wr_set_inline_data_list(1, [DataBuffer(addr, length)])

    def wr_set_inline_data_list(self, num_buf: int, buf_list: list[DataBuffer]) -> None:
        """The bytes are copied at ``wr_complete`` (post time), from memory this PD registered."""
        wr = self._last()
        wr.sg, wr.num_sge = [SGE(b.addr, b.length, 0) for b in buf_list[:num_buf]], num_buf
        wr.send_flags |= _INLINE

    def wr_set_ud_addr(self, ah: AH, remote_qpn: int, remote_qkey: int) -> None:
        self._last().set_wr_ud(ah, remote_qpn, remote_qkey)

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        raise _not_here("XRC")

    def _last(self) -> SendWR:
        self._check_open()
        if not self._batch:
            raise PyverbsRDMAError("No work request to set: call a wr_* builder first", errno.EINVAL)
        return self._batch[-1]


def _htobe32(data: int) -> int:
    """What pyverbs stores in the ``__be32`` field for ``data`` (``htobe32``), so ``data`` itself
    goes on the wire: the inverse of what ``post_send`` does with ``SendWR.imm_data``."""
    return imm_from_wire(data & 0xFFFFFFFF)


def _not_here(what: str) -> PyverbsRDMAError:
    return PyverbsRDMAError(f"pyroce does not do {what} yet", errno.EOPNOTSUPP)
