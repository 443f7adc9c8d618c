"""The driver's side of a receive ring, shared by a QP's receive queue and an SRQ.

WQEs are written at the producer counter and the counter published in the doorbell record's
receive word (``nic.rings``); the ``wr_id`` of each WQE is kept by its 16-bit WQE counter
until its completion is polled, because the CQE reports that counter (libmlx5's
``wrid`` table). An SRQ's WQEs complete out of ring order (several QPs, several CQs), so the
table is keyed by counter and a WQE counts against ``max_wr`` until its completion is polled.
Errnos are rxe's ``post_one_recv``: ENOMEM when full, EINVAL for too many SGEs.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable

from pyroce.nic.rings import COUNTER_MASK, DoorbellRecord, RecvRing
from pyroce.nic.wqe import SEG
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.wr import RecvWR, overflow_in


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (and >= 1): ring sizes, as libmlx5 rounds them."""
    return 1 << max(0, n - 1).bit_length()


class RecvQueue:
    """``max_wr`` WQEs of up to ``max_sge`` scatter entries, in a ring of its own."""

    def __init__(self, max_wr: int, max_sge: int, doorbell: DoorbellRecord, alloc: Callable[[int], memoryview]) -> None:
        """``alloc``: where rings go (the Context's ``driver_memory``)."""
        self.max_wr = max_wr
        self.alloc = alloc
        self.max_sge = max_sge
        self.doorbell = doorbell
        self.ring = self.new_ring(max_wr)
        self.producer = 0
        self.wr_ids: dict[int, int] = {}  # WQE counter -> wr_id, until the completion is polled

    def new_ring(self, max_wr: int) -> RecvRing:
        """A ring with room for ``max_wr`` WQEs of ``max_sge`` entries (stride a power of two)."""
        stride = pow2_at_least(max(1, self.max_sge) * SEG)
        count = pow2_at_least(max(1, max_wr))
        return RecvRing(self.alloc(count * stride), count, stride)

    @property
    def outstanding(self) -> int:
        """WQEs posted whose completion has not been polled."""
        return len(self.wr_ids)

    def post(self, wr: RecvWR | None) -> int:
        """Post the chain ``wr``: how many were posted. The WRs before a failing one stay
        posted (and published), as in libibverbs."""
        posted = 0
        error: Exception | None = None
        while wr is not None:
            if wr.num_sge > len(wr.sg):
                raise PyverbsUserError(f"num_sge is {wr.num_sge} but the WR has {len(wr.sg)} SGEs")
            if len(self.wr_ids) >= self.max_wr:  # outstanding
                error = PyverbsRDMAError("Failed to post receive: the receive queue is full", errno.ENOMEM)
                break
            if wr.num_sge > self.max_sge:
                error = PyverbsRDMAError(f"Failed to post receive: {wr.num_sge} SGEs exceed max_sge {self.max_sge}",
                                         errno.EINVAL)  # fmt: skip
                break
            try:
                self.ring.post(self.producer, wr.sg[: wr.num_sge])  # the WR's SGEs into the WQE's data segments
            except (struct.error, OverflowError) as exc:  # a value wider than its WQE field
                error = overflow_in(wr) or exc
                break
            self.wr_ids[self.producer & COUNTER_MASK] = wr.wr_id
            self.producer += 1
            posted += 1
            wr = wr.next_wr
        if posted:
            self.doorbell.publish(DoorbellRecord.RECV, self.producer)
        if error is not None:
            raise error
        return posted

    def retire(self, wqe_counter: int) -> int:
        """The WQE at ``wqe_counter`` completed: its ``wr_id``."""
        return self.wr_ids.pop(wqe_counter, 0)

    def resize(self, max_wr: int) -> RecvRing:
        """A ring for ``max_wr`` holding the WQEs that may not have been taken yet, at their
        counters (the caller hands it to the NIC). EINVAL if more are outstanding."""
        if max_wr < self.outstanding:
            raise PyverbsRDMAError(f"Failed to modify SRQ: max_wr {max_wr} is below the {self.outstanding} WQEs "
                                   "posted", errno.EINVAL)  # fmt: skip
        ring = self.new_ring(max_wr)
        for counter in range(self.producer - min(self.producer, ring.count, self.ring.count), self.producer):
            ring.slot(counter)[:] = self.ring.slot(counter)
        self.ring = ring
        self.max_wr = max_wr
        return ring

    def reset(self) -> None:
        """Empty (a QP's after a reset: its WQEs are gone, IBA 10.3.1)."""
        self.producer = 0
        self.wr_ids.clear()
        self.doorbell.publish(DoorbellRecord.RECV, 0)
