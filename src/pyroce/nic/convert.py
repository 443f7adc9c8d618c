"""Between ring entries and transport values: a send WQE to the transport's ``SendWork``, a
transport ``Completion`` to the mlx5 CQE that reports it (written into its CQ's ring)."""

from __future__ import annotations

from typing import Final

from pyroce.nic.cqe import (
    GENERAL_ERR_SYNDROME,
    GRH_FLAG,
    ROCE_PKT_IPV4,
    ROCE_PKT_IPV6,
    ROCE_PKT_SHIFT,
    ROCE_PKT_UDP,
    SYNDROME_OF_STATUS,  # fmt: skip
    CqeOpcode,
)
from pyroce.nic.queues import HwCq
from pyroce.nic.wqe import SendWqe, WqeError, WqeOpcode
from pyroce.transport.completion import Completion, WcFlag, WcOpcode, WcStatus
from pyroce.transport.work import SendWork, Sge, UdDest, WorkOp

WORK_OPS: Final = {
    WqeOpcode.SEND: WorkOp.SEND,
    WqeOpcode.SEND_IMM: WorkOp.SEND_WITH_IMM,
    WqeOpcode.SEND_INVAL: WorkOp.SEND_WITH_INV,
    WqeOpcode.RDMA_WRITE: WorkOp.RDMA_WRITE,
    WqeOpcode.RDMA_WRITE_IMM: WorkOp.RDMA_WRITE_WITH_IMM,
    WqeOpcode.RDMA_READ: WorkOp.RDMA_READ,
    WqeOpcode.ATOMIC_CS: WorkOp.ATOMIC_CMP_AND_SWP,
    WqeOpcode.ATOMIC_FA: WorkOp.ATOMIC_FETCH_AND_ADD,
}
REQ_WQE_OPCODE: Final = {
    WcOpcode.SEND: WqeOpcode.SEND,
    WcOpcode.RDMA_WRITE: WqeOpcode.RDMA_WRITE,
    WcOpcode.RDMA_READ: WqeOpcode.RDMA_READ,
    WcOpcode.COMP_SWAP: WqeOpcode.ATOMIC_CS,
    WcOpcode.FETCH_ADD: WqeOpcode.ATOMIC_FA,
    WcOpcode.BIND_MW: WqeOpcode.BIND_MW,
    WcOpcode.LOCAL_INV: WqeOpcode.LOCAL_INVAL,
}


def work_from_wqe(wqe: SendWqe) -> SendWork:
    """The transport's view of a decoded send WQE (``WqeError`` for opcodes not executed)."""
    op = WORK_OPS.get(wqe.opcode)
    if op is None:
        raise WqeError(f"{wqe.opcode.name} WQEs are not supported")
    flags = wqe.fm_ce_se
    av = wqe.av
    sges: tuple[Sge, ...] = wqe.sges  # type: ignore[assignment]  # a decoded WQE's are Sges (no cast(): a call)
    return SendWork(wqe.wqe_index, op, sges, bool(flags & 0x08), bool(flags & 0x02), bool(flags & 0x80), wqe.imm,
                    wqe.raddr or 0, wqe.rkey or 0, wqe.swap_add or 0, wqe.compare or 0, wqe.inline,
                    None if av is None else UdDest(av.rgid, av.dqpn, av.qkey))  # fmt: skip


# enum members read per completion, as constants (docs/architecture.md, "Compiled with mypyc")
_WITH_IMM: Final = int(WcFlag.WITH_IMM)
_WITH_INV: Final = int(WcFlag.WITH_INV)
_GRH: Final = int(WcFlag.GRH)
_SUCCESS: Final = WcStatus.SUCCESS
_RECV_RDMA_WITH_IMM: Final = WcOpcode.RECV_RDMA_WITH_IMM
_REQ: Final = int(CqeOpcode.REQ)
_REQ_ERR: Final = int(CqeOpcode.REQ_ERR)
_RESP_ERR: Final = int(CqeOpcode.RESP_ERR)
_RESP_SEND: Final = int(CqeOpcode.RESP_SEND)
_RESP_SEND_IMM: Final = int(CqeOpcode.RESP_SEND_IMM)
_RESP_SEND_INV: Final = int(CqeOpcode.RESP_SEND_INV)
_RESP_WR_IMM: Final = int(CqeOpcode.RESP_WR_IMM)


def write_completion(cq: HwCq, qpn: int, completion: Completion) -> bool:
    """Write the mlx5 CQE that reports ``completion`` into ``cq`` (``HwCq.push``: False if
    the CQ is full)."""
    status = completion.status
    if status is not _SUCCESS:
        syndrome = SYNDROME_OF_STATUS.get(status, GENERAL_ERR_SYNDROME)
        if completion.is_recv:
            return cq.push(_RESP_ERR, qpn, completion.wqe_counter, 0, 0, 0, 0, syndrome, completion.vendor_err, False)
        wqe_opcode = REQ_WQE_OPCODE.get(completion.opcode, 0)  # a failed WRITE says WRITE
        return cq.push(
            _REQ_ERR, qpn, completion.wqe_counter, 0, 0, 0, wqe_opcode, syndrome, completion.vendor_err, False
        )
    if completion.is_recv:
        flags = int(completion.flags)  # plain ints: IntFlag operators build enum members
        if completion.opcode is _RECV_RDMA_WITH_IMM:
            opcode = _RESP_WR_IMM
        elif flags & _WITH_IMM:
            opcode = _RESP_SEND_IMM
        elif flags & _WITH_INV:
            opcode = _RESP_SEND_INV
        else:
            opcode = _RESP_SEND
        grh = 0
        if flags & _GRH:  # RoCEv2's packet type beside the flag, as a ConnectX reports it
            grh = GRH_FLAG | (ROCE_PKT_UDP | (ROCE_PKT_IPV4 if completion.ipv4 else ROCE_PKT_IPV6)) << ROCE_PKT_SHIFT
        return cq.push(opcode, qpn, completion.wqe_counter, completion.byte_len, completion.imm,
                       grh | completion.src_qp, 0, 0, 0, completion.solicited)  # fmt: skip
    return cq.push(_REQ, qpn, completion.wqe_counter, completion.byte_len, 0, 0, REQ_WQE_OPCODE[completion.opcode], 0,
                   0, False)  # fmt: skip
