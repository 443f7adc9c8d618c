"""A shared receive queue as the NIC sees it (IBA 10.2.9): one receive ring that several QPs
draw from.

The ring and its doorbell record (the receive producer word) are driver memory, laid out as a
QP's receive queue (``nic.rings.RecvRing``). The NIC reads a WQE only when a message needs one,
so whichever QP's message arrives first takes the next WQE in ring order (rxe
``get_srq_wqe``). The CQE then carries the taking QP's number and the SRQ's WQE counter, which
the driver turns into the ``wr_id`` from the SRQ's table (mlx5's ``wqe_counter`` of an
SRQ-received message).

The limit (``ibv_modify_srq`` with IBV_SRQ_LIMIT) is armed once: when a WQE taken leaves fewer
than ``limit`` WQEs posted, IBV_EVENT_SRQ_LIMIT_REACHED is raised and the limit is disarmed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pyroce.ib.enums import EventType
from pyroce.nic.events import AsyncEvent, EventQueue
from pyroce.nic.rings import COUNTER_MASK, DoorbellRecord, RecvRing
from pyroce.transport.work import RecvWork


@dataclass(eq=False)
class HwSrq:
    """The SRQ's ring, doorbell record, how far the NIC has read it, and its armed limit; a
    ``transport.responder.RecvSource`` for every QP created on it."""

    srqn: int
    ring: RecvRing
    doorbell: DoorbellRecord
    events: EventQueue[AsyncEvent]  # its context's async events (SRQ_LIMIT_REACHED)
    consumer: int = 0
    limit: int = 0  # 0: not armed
    qps: int = 0  # QPs created on it (it cannot be destroyed while any is left)
    returned: deque[RecvWork] = field(default_factory=deque)  # given back by a dropped UC message

    @property
    def posted(self) -> int:
        """WQEs posted and not yet taken."""
        return (self.doorbell.read(DoorbellRecord.RECV) - self.consumer) & COUNTER_MASK

    def __bool__(self) -> bool:
        return bool(self.returned) or self.posted > 0

    def popleft(self) -> RecvWork:
        """Take the next WQE (a copy of its bytes, ``nic.wqe``); the caller checked one waits."""
        if self.returned:
            return self.returned.popleft()
        work = RecvWork(self.consumer & COUNTER_MASK, self.ring.fetch(self.consumer))
        self.consumer += 1
        if self.limit and self.posted < self.limit:
            self.limit = 0
            self.events.put(AsyncEvent(EventType.SRQ_LIMIT_REACHED, self.srqn,
                                       f"SRQ {self.srqn}: fewer than its limit of WQEs posted"))  # fmt: skip
        return work

    def appendleft(self, work: RecvWork) -> None:
        """A WQE taken for a message that was dropped goes back to the head (rxe
        ``do_class_d1e_error``)."""
        self.returned.appendleft(work)
