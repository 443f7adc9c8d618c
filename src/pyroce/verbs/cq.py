"""Completion queues (pyverbs ``cq.pyx``): ``CQ(ctx, cqe)`` and ``WC``.

The CQ's ring is memory the NIC writes in mlx5's CQE layout; ``poll`` reads CQEs from it (owner
bit valid), turns each into a ``WC`` and publishes the consumer index, as libmlx5 does. The
``wr_id`` of each completion comes from the QP's table, indexed by the CQE's ``wqe_counter``.
"""

from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING

from pyroce.ib.enums import WcFlag, WcOpcode, WcStatus
from pyroce.nic.cqe import CQE_SIZE, ERROR_OPCODES, RECV_OPCODES, STATUS_OF_SYNDROME, Cqe, CqeOpcode
from pyroce.nic.rings import CqRing
from pyroce.nic.wqe import WqeOpcode
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

if TYPE_CHECKING:
    from pyroce.verbs.qp import QP

WC_OPCODE_OF_WQE = {
    WqeOpcode.SEND: WcOpcode.SEND,
    WqeOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WqeOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    WqeOpcode.ATOMIC_CS: WcOpcode.COMP_SWAP,
    WqeOpcode.ATOMIC_FA: WcOpcode.FETCH_ADD,
}


def imm_from_wire(value: int) -> int:
    """``imm_data`` as C code sees the ``__be32`` field on this host (pyverbs' WC.imm_data)."""
    return int.from_bytes(value.to_bytes(4, "big"), sys.byteorder)


class WC:
    """A work completion, with ``ibv_wc``'s fields."""

    def __init__(self, wr_id: int = 0, status: int = 0, opcode: int = 0, vendor_err: int = 0, byte_len: int = 0,
                 qp_num: int = 0, src_qp: int = 0, imm_data: int = 0, wc_flags: int = 0, pkey_index: int = 0,
                 slid: int = 0, sl: int = 0, dlid_path_bits: int = 0) -> None:  # fmt: skip
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits
        self.reason = ""  # pyroce: one line on why a failed WR failed (the QP, its peer, the cause)

    def __repr__(self) -> str:
        status = WcStatus(self.status).name if self.status in WcStatus._value2member_map_ else self.status
        opcode = WcOpcode(self.opcode).name if self.opcode in WcOpcode._value2member_map_ else self.opcode
        return (f"WC(wr_id={self.wr_id}, status={status}, opcode={opcode}, byte_len={self.byte_len}, "
                f"qp_num=0x{self.qp_num:x}, imm_data=0x{self.imm_data:x}, wc_flags={self.wc_flags}, "
                f"vendor_err={self.vendor_err}{', reason=' + repr(self.reason) if self.reason else ''})")  # fmt: skip


class CQ(PyverbsObject):
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    CLOSE_ORDER = 1

    def __init__(self, creator: Context, cqe: int, cq_context: object = None, channel: object = None,
                 comp_vector: int = 0) -> None:  # fmt: skip
        super().__init__()
        creator._check_open()
        check_injected(creator.device, "create_cq", "create CQ")
        _check_cqe(creator, cqe, "create")
        if channel is not None:
            raise PyverbsRDMAError("Failed to create CQ: completion channels are not supported yet", errno.EOPNOTSUPP)
        if comp_vector >= creator.num_comp_vectors:
            raise PyverbsRDMAError(f"Failed to create CQ: no completion vector {comp_vector}", errno.EINVAL)
        count = _ring_size(cqe)
        self.ctx = creator
        self.cq_context = cq_context
        self._buf = bytearray(count * CQE_SIZE)
        self._consumer_record = bytearray(4)
        self.ring = CqRing(memoryview(self._buf), count)
        self.hw = creator.device.create_cq(memoryview(self._buf), count, memoryview(self._consumer_record))
        self.cqe = count - 1
        self.consumer = 0
        self.qps: dict[int, QP] = {}
        creator.add_ref(self)

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions, oldest first: ``(count, [WC, ...])``."""
        self._check_open()
        wcs: list[WC] = []
        if num_entries <= 0:
            return 0, wcs
        cqe = self.ring.poll(self.consumer)
        if cqe is None:
            self.ctx.device.poll_empty()
            cqe = self.ring.poll(self.consumer)
        else:
            self.ctx.device.poll_found()  # completions were waiting: the engine is not needed for them
        while cqe is not None:
            wc = self._wc(cqe)
            self.consumer += 1
            if wc is not None:
                wcs.append(wc)
                if len(wcs) == num_entries:
                    break
            cqe = self.ring.poll(self.consumer)
        if wcs:
            self._consumer_record[:] = (self.consumer & 0xFFFFFF).to_bytes(4, "big")
        return len(wcs), wcs

    def _wc(self, cqe: Cqe) -> WC | None:
        """The WC of ``cqe``; None for a CQE of a QP reset since it was written (libmlx5 cleans
        those out of the CQ on reset, ``mlx5_cq_clean``)."""
        qp = self.qps.get(cqe.qpn)
        if qp is not None and self.consumer < qp.reset_at.get(self.hw.cqn, 0):
            return None
        is_recv = cqe.opcode in RECV_OPCODES
        wr_id = (qp.retire_recv(cqe.wqe_counter) if is_recv else qp.retire_send(cqe.wqe_counter)) if qp else 0
        wc = WC(wr_id=wr_id, qp_num=cqe.qpn)
        if cqe.opcode in ERROR_OPCODES:
            wc.status = STATUS_OF_SYNDROME.get(cqe.syndrome, WcStatus.GENERAL_ERR)  # type: ignore[call-overload]
            wc.vendor_err = cqe.vendor_err
            wc.reason = qp.explain(cqe.vendor_err) if qp is not None else ""
            wc.opcode = WcOpcode.RECV if is_recv else WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, WcOpcode.SEND)  # type: ignore[call-overload]
            return wc
        wc.byte_len = cqe.byte_cnt
        if is_recv:
            wc.opcode = WcOpcode.RECV_RDMA_WITH_IMM if cqe.opcode is CqeOpcode.RESP_WR_IMM else WcOpcode.RECV
            if cqe.opcode in (CqeOpcode.RESP_WR_IMM, CqeOpcode.RESP_SEND_IMM):
                wc.wc_flags = WcFlag.WITH_IMM
                wc.imm_data = imm_from_wire(cqe.imm_inval)
            elif cqe.opcode is CqeOpcode.RESP_SEND_INV:
                wc.wc_flags = WcFlag.WITH_INV
                wc.imm_data = cqe.imm_inval
            wc.src_qp = cqe.flags_rqpn & 0xFFFFFF
            if cqe.flags_rqpn >> 28 & 3:
                wc.wc_flags |= WcFlag.GRH
        else:
            wc.opcode = WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, WcOpcode.SEND)  # type: ignore[call-overload]
        wc.wc_flags = int(wc.wc_flags)
        return wc

    def resize(self, cqe: int) -> None:
        """``ibv_resize_cq``: at least ``cqe`` entries; completions not yet polled are kept.
        EINVAL if ``cqe`` is out of range or smaller than what is waiting to be polled."""
        self._check_open()
        _check_cqe(self.ctx, cqe, "resize")
        count = _ring_size(cqe)
        buf = bytearray(count * CQE_SIZE)
        try:
            self.ctx.device.resize_cq(self.hw, memoryview(buf), count, self.consumer)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to resize CQ: {exc}", errno.EINVAL) from None
        for qp in self.qps.values():  # CQE indexes restart at 0 in the new ring
            if self.hw.cqn in qp.reset_at:
                qp.reset_at[self.hw.cqn] = max(0, qp.reset_at[self.hw.cqn] - self.consumer)
        self._buf = buf
        self.ring = self.hw.ring
        self.consumer = 0
        self.cqe = count - 1

    def _release(self) -> None:
        self.ctx.device.destroy_cq(self.hw)


def _ring_size(cqe: int) -> int:
    """Room for ``cqe`` + 1 entries, a power of two (libmlx5)."""
    return 1 << cqe.bit_length()


def _check_cqe(ctx: Context, cqe: int, verb: str) -> None:
    max_cqe = ctx.query_device().max_cqe
    if cqe < 1 or cqe > max_cqe:
        raise PyverbsRDMAError(f"Failed to {verb} CQ: cqe {cqe} is outside 1..{max_cqe}", errno.EINVAL)
