"""Completion queues (pyverbs ``cq.pyx``): ``CompChannel(ctx)``, ``CQ(ctx, cqe, ...)`` and ``WC``.

The CQ's ring is memory the NIC writes in mlx5's CQE layout; ``poll`` reads CQEs from it (owner
bit valid), turns each into a ``WC`` and publishes the consumer index, as libmlx5 does. The
``wr_id`` of each completion comes from the QP's table, indexed by the CQE's ``wqe_counter``
(``verbs.completions``: the reading, compiled with the NIC's modules).

Completion events: ``cq.req_notify()`` arms the CQ in the NIC (a command); the NIC writes the
next CQE, disarms the CQ and puts its CQN on the channel, whose ``fd`` (an eventfd, readable
while events wait) works with select, poll, epoll and asyncio. ``channel.get_cq_event(cq)``
takes one event (waiting for it), ``cq.ack_events(n)`` acknowledges them (``cq.num_events``).
"""

from __future__ import annotations

import errno
import weakref

from pyroce.host.notify import PollerWakeup
from pyroce.nic.cqe import CQE_SIZE
from pyroce.nic.events import EventQueue
from pyroce.nic.rings import CqRing
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.completions import WC, CompletingQp, CompletionReader
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsRDMAError


class CompChannel(PyverbsObject):
    """``CompChannel(ctx)`` (``ibv_create_comp_channel``): where the completion events of the
    CQs created on it arrive. Closing it closes those CQs first, as pyverbs does."""

    CLOSE_ORDER = 2  # after the CQs

    def __init__(self, context: Context) -> None:
        super().__init__()
        context._check_open()
        self.context = context
        self.events: EventQueue[int] = context.device.create_comp_channel()
        self.cqs: weakref.WeakValueDictionary[int, CQ] = weakref.WeakValueDictionary()  # by CQN
        context.add_ref(self)

    @property
    def fd(self) -> int:
        """Readable while events wait (select, poll, epoll, ``loop.add_reader``); made
        non-blocking, ``get_cq_event`` fails with EAGAIN instead of waiting."""
        return self.events.fileno()

    def get_cq_event(self, expected_cq: CQ) -> None:
        """Wait for the next completion event and count it on ``expected_cq`` (``num_events``).

        EINVAL at once if ``expected_cq`` is not on this channel (pyverbs would wait for an event
        that cannot come), or, the event taken, if it was another CQ's ("Received event on an
        unexpected CQ"; it is counted on that CQ). EAGAIN if ``fd`` is non-blocking and no
        event waits."""
        self._check_open()
        if expected_cq.channel is not self:
            raise PyverbsRDMAError("Failed to get CQ event: the CQ has no events on this channel", errno.EINVAL)
        self.context.device.waiting()  # the engine must run while this thread may wait
        try:
            cqn = self.events.get()
        except BlockingIOError:
            raise PyverbsRDMAError("Failed to get CQ event", errno.EAGAIN) from None
        cq = self.cqs.get(cqn)
        if cq is not None:
            cq.num_events += 1
        if cq is not expected_cq:
            raise PyverbsRDMAError("Received event on an unexpected CQ", errno.EINVAL)

    def _release(self) -> None:
        self.context.device.destroy_comp_channel(self.events)


class CQ(PyverbsObject):
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    CLOSE_ORDER = 1

    def __init__(self, creator: Context, cqe: int, cq_context: object = None, channel: CompChannel | None = None,
                 comp_vector: int = 0) -> None:  # fmt: skip
        super().__init__()
        creator._check_open()
        check_injected(creator.device, "create_cq", "create CQ")
        _check_cqe(creator, cqe, "create")
        if channel is not None:
            channel._check_open()
        if comp_vector >= creator.num_comp_vectors:
            raise PyverbsRDMAError(f"Failed to create CQ: no completion vector {comp_vector}", errno.EINVAL)
        count = _ring_size(cqe)
        self.ctx = creator
        self.cq_context = cq_context
        self.channel = channel
        self.num_events = 0  # events taken by get_cq_event and not acknowledged
        self._buf = creator.driver_memory.alloc(count * CQE_SIZE)
        self._consumer_record = creator.driver_memory.alloc(4)
        self.hw = creator.device.create_cq(memoryview(self._buf), count, memoryview(self._consumer_record),
                                           channel.events if channel is not None else None,
                                           creator.async_queue)  # fmt: skip
        self.cqe = count - 1
        self.qps: dict[int, CompletingQp] = {}  # its QPs by number, as its reader reads them
        self.reader = CompletionReader(CqRing(memoryview(self._buf), count), memoryview(self._consumer_record),
                                       self.hw.cqn, self.qps, creator.device)  # fmt: skip
        self._poller: PollerWakeup | None = None  # what a driver without the GIL sleeps on
        creator.add_ref(self)
        if channel is not None:
            channel.cqs[self.hw.cqn] = self
            channel.add_ref(self)

    @property
    def comp_channel(self) -> CompChannel | None:
        return self.channel

    def req_notify(self, solicited_only: bool = False) -> None:
        """``ibv_req_notify_cq``: raise one event on the channel when the next completion is
        written (``solicited_only``: the next solicited or failed one); re-arm after each event.
        Completions already in the CQ raise none: arm, then poll, then wait."""
        self._check_open()
        self.ctx.device.arm_cq(self.hw, bool(solicited_only))

    def ack_events(self, num_events: int) -> None:
        """``ibv_ack_cq_events``: acknowledge events ``get_cq_event`` returned. ``close``
        acknowledges what is left, as pyverbs does, so destroying never waits for them."""
        self.num_events -= num_events

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions, oldest first: ``(count, [WC, ...])``."""
        if self.closed:
            raise self._closed_error()
        wcs = self.reader.poll(num_entries)
        return len(wcs), wcs

    @property
    def consumer(self) -> int:
        """CQEs read (the driver's consumer index)."""
        return self.reader.consumer

    @consumer.setter
    def consumer(self, value: int) -> None:
        self.reader.consumer = value

    def resize(self, cqe: int) -> None:
        """``ibv_resize_cq``: at least ``cqe`` entries; completions not yet polled are kept.
        EINVAL if ``cqe`` is out of range or smaller than what is waiting to be polled."""
        self._check_open()
        _check_cqe(self.ctx, cqe, "resize")
        # Work posted before the resize is done first (rxe's requester has sent a UD datagram by
        # then), so its completions count against the new size: EINVAL if they would not fit.
        self.ctx.device.kick()
        count = _ring_size(cqe)
        buf = self.ctx.driver_memory.alloc(count * CQE_SIZE)
        try:
            self.ctx.device.resize_cq(self.hw, memoryview(buf), count, self.consumer)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to resize CQ: {exc}", errno.EINVAL) from None
        for qp in self.qps.values():  # CQE indexes restart at 0 in the new ring
            if self.hw.cqn in qp.reset_at:
                qp.reset_at[self.hw.cqn] = max(0, qp.reset_at[self.hw.cqn] - self.consumer)
        self._buf = buf
        self.reader.ring = self.hw.ring
        self.consumer = 0
        self.cqe = count - 1

    @property
    def driver_rings(self) -> tuple[memoryview, memoryview]:
        """What another driver of this CQ (the C library) reads and writes: the CQE ring and the
        consumer record."""
        return memoryview(self._buf), memoryview(self._consumer_record)

    def poller_wakeup(self) -> tuple[memoryview, int]:
        """What another driver of this CQ (the C library) sleeps on when it has polled the CQ
        empty for a while: a flag byte it sets first, and an eventfd the NIC writes with the
        next CQE (``NicDevice.wake_poller``). Made on the first call, closed with the CQ."""
        if self._poller is None:
            self._poller = PollerWakeup(memoryview(self.ctx.driver_memory.alloc(1)), self.ctx.device.counters)
            self.ctx.device.wake_poller(self.hw, self._poller)
        return self._poller.napping, self._poller.fileno()

    def _release(self) -> None:
        if self.num_events:
            self.ack_events(self.num_events)
        self.ctx.device.destroy_cq(self.hw)
        if self._poller is not None:
            self._poller.close()


def _ring_size(cqe: int) -> int:
    """Room for ``cqe`` + 1 entries, a power of two (libmlx5)."""
    return 1 << cqe.bit_length()


def _check_cqe(ctx: Context, cqe: int, verb: str) -> None:
    max_cqe = ctx.query_device().max_cqe
    if cqe < 1 or cqe > max_cqe:
        raise PyverbsRDMAError(f"Failed to {verb} CQ: cqe {cqe} is outside 1..{max_cqe}", errno.EINVAL)
