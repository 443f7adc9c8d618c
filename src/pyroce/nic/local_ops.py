"""Send-queue work the NIC does itself: BIND_MW and LOCAL_INV (rxe_do_local_ops).

Nothing goes on the wire. The engine runs one only once every WQE before it has completed, so
a window changes exactly where it was posted in the queue; a refused one fails the QP with
MW_BIND_ERR (a bind) or LOC_QP_OP_ERR (an invalidation), as rxe completes them.
"""

from __future__ import annotations

from pyroce.ib.enums import Access, WcStatus
from pyroce.nic.memory import BindError, MrTable
from pyroce.nic.wqe import SendWqe, WqeOpcode


def execute_local(mrs: MrTable, wqe: SendWqe, qpn: int, pdn: int) -> tuple[WcStatus, str]:
    """Run a BIND_MW or LOCAL_INV WQE of QP ``qpn`` (PD ``pdn``): the status and, on failure, why."""
    if wqe.opcode is WqeOpcode.LOCAL_INVAL:
        fault = mrs.invalidate(wqe.imm, qpn)
        if fault is None:
            return WcStatus.SUCCESS, ""
        return WcStatus.LOC_QP_OP_ERR, f"LOCAL_INV of key 0x{wqe.imm:x}: {fault.value}"
    bind = wqe.bind
    window = mrs.window(wqe.imm)
    try:
        if bind is None or window is None:
            raise BindError(f"no memory window has index 0x{wqe.imm >> 8:x}")
        if window.pdn != pdn:
            raise BindError("the window belongs to another protection domain than the QP")
        region = mrs.region(bind.mr_key) if bind.length else None
        mrs.bind(window, region, bind.addr, bind.length, Access(bind.access), wqe.imm, qpn)
    except BindError as exc:
        return WcStatus.MW_BIND_ERR, f"BIND_MW of key 0x{wqe.imm:x}: {exc}"
    return WcStatus.SUCCESS, ""
