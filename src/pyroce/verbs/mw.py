"""Memory windows (pyverbs ``mr.pyx``): ``MW(pd, mw_type)``, ``MWBindInfo`` and ``MWBind``.

A window is a key of its own onto a range of an MR, granted to a peer and taken back without
deregistering the MR (IBA 10.6.7). The NIC's memory table holds it next to the MRs; ``rkey``
is read from there because a bind changes the key's low byte.
"""

from __future__ import annotations

import errno

from pyroce.ib.enums import Access
from pyroce.nic.memory import BindError, MemoryWindow
from pyroce.nic.wqe import MwBindSeg
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.enums import ibv_access_flags, ibv_mw_type, ibv_send_flags
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SendWR, inc_rkey

# what a bind may ask (rxe's RXE_ACCESS_SUPPORTED_MW, zero-based aside): remote access, and local
# write, which rxe takes and rdma-core's tests ask; the window grants only the remote part
MW_ACCESS = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
             | ibv_access_flags.IBV_ACCESS_REMOTE_READ | ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC)  # fmt: skip


def bind_segment(wr: SendWR) -> tuple[int, MwBindSeg]:
    """The window's new rkey and the bind segment of an IBV_WR_BIND_MW (``set_bind_wr``)."""
    if wr.bind_mw is None:
        raise PyverbsRDMAError("Failed to post send: IBV_WR_BIND_MW without set_bind_wr", errno.EINVAL)
    _, rkey, info = wr.bind_mw
    if info.mw_access_flags & ~MW_ACCESS:
        raise PyverbsRDMAError(f"Failed to post send: access 0x{info.mw_access_flags:x} cannot be granted "
                               "through a window", errno.EINVAL)  # fmt: skip
    mr_key = info.mr.lkey if info.length else 0
    return rkey, MwBindSeg(info.addr, info.length, mr_key, info.mw_access_flags)


class MW(PyverbsObject):
    CLOSE_ORDER = 0  # before the MRs it may be bound to

    def __init__(self, pd: PD, mw_type: int) -> None:
        super().__init__()
        pd._check_open()
        if mw_type not in (ibv_mw_type.IBV_MW_TYPE_1, ibv_mw_type.IBV_MW_TYPE_2):
            raise PyverbsRDMAError(f"Failed to allocate MW: type {mw_type} is not a window type", errno.EINVAL)
        self.pd = pd
        self.mw_type = mw_type
        self.window: MemoryWindow = pd.ctx.device.alloc_mw(pd.pdn, mw_type)
        pd.add_ref(self)

    @property
    def rkey(self) -> int:
        self._check_open()
        return self.window.key

    @property
    def handle(self) -> int:
        return self.window.key >> 8

    def bind_type1(self, pd: PD, qpn: int, mw_bind: MWBind) -> None:
        """``ibv_bind_mw`` on a QP of ``pd``: the window takes the next key (``ibv_inc_rkey``).
        pyroce binds it at once, so a refused bind raises EINVAL and nothing completes."""
        self._check_open()
        info = mw_bind.bind_info

        def refused(why: str) -> PyverbsRDMAError:
            return PyverbsRDMAError(f"Failed to Bind MW: {why}", errno.EINVAL)

        if self.mw_type != ibv_mw_type.IBV_MW_TYPE_1:
            raise refused("ibv_bind_mw binds type 1 windows; a type 2 window is bound by a BIND_MW work request")
        if pd is not self.pd:
            raise refused("the QP and the window belong to different protection domains")
        if info.mw_access_flags & ~MW_ACCESS:
            raise refused(f"access 0x{info.mw_access_flags:x} cannot be granted through a window")
        region = info.mr.region if info.length else None
        try:
            self.pd.ctx.device.bind_mw(self.window, region, info.addr, info.length, Access(info.mw_access_flags),
                                       inc_rkey(self.window.key), qpn)  # fmt: skip
        except BindError as exc:
            raise refused(str(exc)) from None

    def _release(self) -> None:
        self.pd.ctx.device.dereg_mr(self.window)


class MWBindInfo:
    """``MWBindInfo(mr, addr, length, mw_access_flags)``: the range of ``mr`` a bind grants."""

    def __init__(self, mr: MR, addr: int, length: int, mw_access_flags: int) -> None:
        self.mr = mr
        self.addr = addr
        self.length = length
        self.mw_access_flags = mw_access_flags


class MWBind:
    """``MWBind(bind_info, send_flags, wr_id=0)``: a type 1 bind, as ``QP.bind_mw`` takes it."""

    def __init__(self, bind_info: MWBindInfo, send_flags: int = ibv_send_flags.IBV_SEND_SIGNALED,
                 wr_id: int = 0) -> None:  # fmt: skip
        self.bind_info = bind_info
        self.send_flags = send_flags
        self.wr_id = wr_id
