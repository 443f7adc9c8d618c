"""Shared receive queues (pyverbs ``srq.pyx``): ``SrqAttr``, ``SrqInitAttr``, ``SRQ``.

An SRQ is a receive ring and a doorbell record in this process's memory, like a QP's receive
queue (the same ``RecvQueue``); the NIC reads it when a message for one of its QPs needs a WQE
(``nic.srq``). Limits and errnos are rxe's (``rxe_srq.c``): EINVAL for a size past
``max_srq_wr``/``max_srq_sge``; ``modify`` resizes (IBV_SRQ_MAX_WR) and arms the limit event
(IBV_SRQ_LIMIT; ``srq_limit`` at creation is ignored, as ``ibv_create_srq`` documents).

Lifetime: a QP created on an SRQ holds it; destroying an SRQ that a QP still uses is EBUSY
(``ibv_destroy_srq``), where pyverbs would close those QPs first: closing the PD or the Context
closes its QPs before its SRQs, so only a QP of another PD keeps an SRQ busy.
"""

from __future__ import annotations

import errno

from pyroce.nic.rings import DoorbellRecord
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.enums import ibv_srq_attr_mask
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.recv_queue import RecvQueue
from pyroce.verbs.wr import RecvWR


class SrqAttr:
    """``ibv_srq_attr``."""

    def __init__(self, max_wr: int = 100, max_sge: int = 1, srq_limit: int = 0) -> None:
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.srq_limit = srq_limit


class SrqInitAttr:
    """``ibv_srq_init_attr``: the sizes in ``attr``."""

    def __init__(self, attr: SrqAttr | None = None, srq_context: object = None) -> None:
        self.attr = attr if attr is not None else SrqAttr()
        self.srq_context = srq_context

    @property
    def max_wr(self) -> int:
        return self.attr.max_wr

    @property
    def max_sge(self) -> int:
        return self.attr.max_sge

    @property
    def srq_limit(self) -> int:
        return self.attr.srq_limit


class SRQ(PyverbsObject):
    """``SRQ(pd, SrqInitAttr)``: a basic SRQ (no XRC or tag matching)."""

    CLOSE_ORDER = 1  # after the QPs of its PD

    def __init__(self, creator: PD, attr: SrqInitAttr) -> None:
        super().__init__()
        if not isinstance(creator, PD) or not isinstance(attr, SrqInitAttr):
            raise PyverbsUserError("SRQ(pd, SrqInitAttr) is the form pyroce supports")
        creator._check_open()
        device = creator.ctx.device
        check_injected(device, "create_srq", "create SRQ")
        limits = creator.ctx.query_device()
        if not 0 < attr.max_wr <= limits.max_srq_wr:
            raise PyverbsRDMAError(f"Failed to create SRQ: max_wr {attr.max_wr} is outside 1..{limits.max_srq_wr}",
                                   errno.EINVAL)  # fmt: skip
        if attr.max_sge > limits.max_srq_sge:
            raise PyverbsRDMAError(f"Failed to create SRQ: max_sge {attr.max_sge} exceeds {limits.max_srq_sge}",
                                   errno.EINVAL)  # fmt: skip
        self.pd = creator
        self.device = device
        self.srq_context = attr.srq_context
        self._doorbell_buf = creator.ctx.driver_memory.alloc(DoorbellRecord.SIZE)
        self.rq = RecvQueue(attr.max_wr, max(1, attr.max_sge), DoorbellRecord(memoryview(self._doorbell_buf)),
                            creator.ctx.driver_memory.alloc)  # fmt: skip
        ring = self.rq.ring
        self.hw = device.create_srq(ring.buf, ring.count, ring.stride, memoryview(self._doorbell_buf),
                                    creator.ctx.async_queue)  # fmt: skip
        creator.add_ref(self)

    @property
    def doorbell_record(self) -> memoryview:
        """The doorbell record another driver of this SRQ (the C library) writes."""
        return memoryview(self._doorbell_buf)

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        """``ibv_post_srq_recv``: ENOMEM when ``max_wr`` WQEs are outstanding, EINVAL for more
        than ``max_sge`` SGEs; the WRs before the failing one are posted."""
        self._check_open()
        check_injected(self.device, "post_srq_recv", "post receive")
        self.rq.post(wr)  # the NIC reads the doorbell record when a message needs a WQE

    def modify(self, attr: SrqAttr, attr_mask: int) -> None:
        """``ibv_modify_srq``: IBV_SRQ_MAX_WR resizes (the WQEs posted are kept), IBV_SRQ_LIMIT
        arms the limit event (0 disarms); EINVAL as ``rxe_srq_chk_attr``."""
        self._check_open()
        max_srq_wr = self.pd.ctx.query_device().max_srq_wr
        max_wr = attr.max_wr if attr_mask & ibv_srq_attr_mask.IBV_SRQ_MAX_WR else self.rq.max_wr
        if not 0 < max_wr <= max_srq_wr:
            raise PyverbsRDMAError(f"Failed to modify SRQ: max_wr {max_wr} is outside 1..{max_srq_wr}", errno.EINVAL)
        limit = attr.srq_limit if attr_mask & ibv_srq_attr_mask.IBV_SRQ_LIMIT else self.device.srq_limit(self.hw)
        if not 0 <= limit <= max_wr:
            raise PyverbsRDMAError(f"Failed to modify SRQ: srq_limit {limit} is outside 0..{max_wr}", errno.EINVAL)
        if attr_mask & ibv_srq_attr_mask.IBV_SRQ_MAX_WR:
            self.device.resize_srq(self.hw, self.rq.resize(max_wr))
        if attr_mask & ibv_srq_attr_mask.IBV_SRQ_LIMIT:
            self.device.arm_srq(self.hw, limit)

    def query(self) -> SrqAttr:
        """``ibv_query_srq``: the sizes, and the limit while it is armed (0 once it fired)."""
        self._check_open()
        return SrqAttr(self.rq.max_wr, self.rq.max_sge, self.device.srq_limit(self.hw))

    def _release(self) -> None:
        try:
            self.device.destroy_srq(self.hw)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to destroy SRQ: {exc}", errno.EBUSY) from None
