"""Protection domains (pyverbs ``pd.pyx``)."""

from __future__ import annotations

from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.device import Context


class PD(PyverbsObject):
    """``PD(ctx)``: MRs and QPs of one PD can reach each other's memory, no others."""

    CLOSE_ORDER = 2

    def __init__(self, creator: Context, **kwargs: object) -> None:
        super().__init__()
        creator._check_open()
        self.ctx = creator
        self.pdn = creator.device.alloc_pd()
        creator.add_ref(self)
