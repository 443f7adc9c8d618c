"""Protection domains (pyverbs ``pd.pyx``)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.device import Context
from pyroce.verbs.enums import (
    IBV_ADVISE_MR_ADVICE_PREFETCH,
    IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
    IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
    IBV_ADVISE_MR_FLAG_FLUSH,
    ibv_access_flags,
)
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE

if TYPE_CHECKING:
    from pyroce.verbs.mr import MR

ADVICES = (IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
# libibverbs refuses (EINVAL) an ioctl attribute, here the struct ibv_sge array, over 16 bits of length
MAX_ADVISE_SGES = 0xFFFF // 16


class PD(PyverbsObject):
    """``PD(ctx)``: MRs and QPs of one PD can reach each other's memory, no others."""

    CLOSE_ORDER = 2

    def __init__(self, creator: Context, **kwargs: object) -> None:
        super().__init__()
        creator._check_open()
        self.ctx = creator
        self.pdn = creator.device.alloc_pd()
        creator.add_ref(self)

    def read_registered(self, addr: int, length: int, action: str) -> bytes:
        """``length`` bytes at ``addr`` in an MR of this PD (inline data, a received GRH): the
        verbs read only memory the application registered, never an arbitrary address."""
        for child in list(self._children or ()):
            region = getattr(child, "region", None)
            if region is not None and region.addr <= addr and addr + length <= region.addr + region.length:
                try:
                    return region.read(addr - region.addr, length)  # another process's memory: read there
                except OSError as exc:
                    raise PyverbsRDMAError(f"Failed to {action}: {length} bytes at 0x{addr:x}: {exc.strerror or exc}",
                                           exc.errno or errno.EFAULT) from None  # fmt: skip
        raise PyverbsRDMAError(f"Failed to {action}: {length} bytes at 0x{addr:x} are not in a registered MR",
                               errno.EINVAL)  # fmt: skip

    def advise_mr(self, advise: int, flags: int, sg_list: Sequence[SGE]) -> int:
        """``ibv_advise_mr`` (pyverbs' ``PD.advise_mr``): 0, or ``PyverbsRDMAError`` with the
        errno the kernel gives (ib_uverbs, then rxe's ``rxe_ib_advise_mr``). The checks are all
        it does: every MR already pages on demand (the NIC reads and writes registered memory
        through its view when a packet needs it; nothing is pinned, there is no device page
        table to fill), so a prefetch has nothing to fault in ahead and ``PREFETCH_NO_FAULT``
        nothing to map. As in rxe and mlx5, only a synchronous prefetch (``FLUSH``) faults the
        range in, so only it finds a range outside its MR (EFAULT); an asynchronous one is
        best effort and checks the keys alone."""
        self._check_open()
        if len(sg_list) > MAX_ADVISE_SGES:
            raise PyverbsRDMAError(f"Failed to advise MR: {len(sg_list)} SGEs, at most {MAX_ADVISE_SGES}",
                                   errno.EINVAL)  # fmt: skip
        if flags & ~IBV_ADVISE_MR_FLAG_FLUSH:
            raise PyverbsRDMAError(f"Failed to advise MR: flags 0x{flags:x} are not IBV_ADVISE_MR_FLAG_FLUSH",
                                   errno.EINVAL)  # fmt: skip
        if not sg_list:
            raise PyverbsRDMAError("Failed to advise MR: no SGE", errno.EINVAL)
        if advise not in ADVICES:
            raise PyverbsRDMAError(f"Failed to advise MR: advice {advise} is not a prefetch", errno.EOPNOTSUPP)
        for sge in sg_list:
            mr = self._mr_of(sge.lkey)
            writable = mr.access & ibv_access_flags.IBV_ACCESS_LOCAL_WRITE
            if advise == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE and not writable:
                raise PyverbsRDMAError(f"Failed to advise MR: a write prefetch of MR 0x{sge.lkey:x} without local "
                                       "write access", errno.EPERM)  # fmt: skip
            inside = mr.buf <= sge.addr <= sge.addr + sge.length <= mr.buf + mr.length
            if flags & IBV_ADVISE_MR_FLAG_FLUSH and not inside:
                raise PyverbsRDMAError(f"Failed to advise MR: {sge.length} bytes at 0x{sge.addr:x} are not in MR "
                                       f"0x{sge.lkey:x}", errno.EFAULT)  # fmt: skip
        return 0

    def _mr_of(self, lkey: int) -> MR:
        """The open MR of this PD whose lkey is ``lkey``; EINVAL for none (rxe's ``lookup_mr``)."""
        for child in list(self._children or ()):
            if getattr(child, "region", None) is not None and not child.closed and child.lkey == lkey:
                return child  # type: ignore[return-value]
        raise PyverbsRDMAError(f"Failed to advise MR: lkey 0x{lkey:x} is no MR of this PD", errno.EINVAL)
