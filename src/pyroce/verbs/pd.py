"""Protection domains (pyverbs ``pd.pyx``)."""

from __future__ import annotations

import errno

from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsRDMAError


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
