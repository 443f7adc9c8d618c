"""The event queues application threads wait on: completion events and asynchronous events.

An ``EventFdQueue`` is a queue with an eventfd that is readable exactly while the queue holds
something, so an application waits on ``fileno()`` with select, poll, epoll or asyncio's
``add_reader`` and then takes an item, or blocks in ``get`` (in ``poll``, holding no GIL).
It is what a completion channel's fd (the kernel's ``ib_uverbs_event_queue``) and a context's
``async_fd`` are: the ``EventQueue`` of ``nic.events`` that the host gives the device.
``EventFdQueues`` are a device's asynchronous event queues, one per open context, as the kernel
keeps one async event file per ``ibv_open_device``: an event of a QP, CQ or SRQ goes to the
queue of the context that created it, a port or device event to all.

The invariant, kept under the queue's lock: the eventfd's counter is non-zero if and only if
items wait. ``put`` writes 1 when the queue goes from empty to non-empty, and ``take`` reads
(so resets) the counter when it takes the last item; a read under the lock never blocks,
since the counter is known to be 1. The engine puts an item only after what it announces is
visible (a CQE written, owner bit last), so a thread woken by the fd finds both. Nothing relies
on the GIL: the items and the counter change together under the lock.
"""

from __future__ import annotations

import os
import select
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Generic, TypeVar

from pyroce.nic.events import EventQueue

T = TypeVar("T")


class EventFdQueue(Generic[T]):
    """An ``EventQueue``: items from the engine to the application, oldest first, and the fd
    that says some wait.

    With ``maxlen``, a full queue drops its oldest item (as a NIC's event queue overflows)."""

    def __init__(self, maxlen: int | None = None) -> None:
        self._lock = threading.Lock()
        self._items: deque[T] = deque(maxlen=maxlen)
        self._fd = os.eventfd(0, os.EFD_CLOEXEC)
        self._closed = False

    def fileno(self) -> int:
        """Readable while items wait. Made non-blocking (``os.set_blocking``), ``get`` raises
        ``BlockingIOError`` instead of waiting, as a read of a non-blocking channel fd does."""
        return self._fd

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        """Queue ``item`` (the engine, after what it announces is written); ignored once closed."""
        with self._lock:
            if self._closed:
                return
            if not self._items:
                os.eventfd_write(self._fd, 1)
            self._items.append(item)

    def take(self) -> T | None:
        """The oldest item, or None if none waits."""
        with self._lock:
            if not self._items:
                return None
            item = self._items.popleft()
            if not self._items:
                os.eventfd_read(self._fd)
            return item

    def take_all(self) -> list[T]:
        """Every waiting item, oldest first."""
        with self._lock:
            items = list(self._items)
            if items:
                self._items.clear()
                os.eventfd_read(self._fd)
            return items

    def discard(self, unwanted: Callable[[T], bool]) -> None:
        """Drop the waiting items ``unwanted`` picks (the events of a destroyed CQ)."""
        with self._lock:
            kept = [item for item in self._items if not unwanted(item)]
            if len(kept) != len(self._items):
                self._items.clear()
                self._items.extend(kept)
                if not kept:
                    os.eventfd_read(self._fd)

    def get(self) -> T:
        """The oldest item, waiting for one if none waits (``BlockingIOError`` if the fd was
        made non-blocking). Several threads may wait: each item goes to one of them."""
        waiter: select.poll | None = None
        while True:
            item = self.take()
            if item is not None:
                return item
            if not os.get_blocking(self._fd):
                raise BlockingIOError("no event is waiting")
            if waiter is None:
                waiter = select.poll()
                waiter.register(self._fd, select.POLLIN)
            waiter.poll()

    def close(self) -> None:
        """Release the eventfd; later ``put`` calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._items.clear()
        os.close(self._fd)


class PollerWakeup:
    """A ``nic.events.Poller`` for a driver without the GIL (the C library's ``ibv_poll_cq``):
    ``napping`` is a byte of memory the driver shares, ``fileno`` an eventfd it sleeps on
    (non-blocking; the driver reads it to reset it). ``wake`` adds 1, so a wake-up that comes
    before the driver sleeps is not lost: its next sleep returns at once."""

    def __init__(self, napping: memoryview, counters: Counter[str]) -> None:
        self.napping = napping
        self._counters = counters  # the device's: ``poller_wakeups``
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def fileno(self) -> int:
        return self._fd

    def wake(self) -> None:
        self._counters["poller_wakeups"] += 1
        os.eventfd_write(self._fd, 1)

    def close(self) -> None:
        os.close(self._fd)


class EventFdQueues(Generic[T]):
    """``EventQueues``: the asynchronous event queues of a device's open contexts
    (``ib_uverbs_async_event_file`` per open): ``open`` one per context, ``broadcast`` what
    concerns them all (port and device events); an object's own events go to the queue it was
    created with. Each queue is bounded."""

    def __init__(self, maxlen: int) -> None:
        self._lock = threading.Lock()
        self._maxlen = maxlen
        self._queues: list[EventQueue[T]] = []

    def open(self) -> EventQueue[T]:
        queue: EventQueue[T] = EventFdQueue(self._maxlen)
        with self._lock:
            self._queues.append(queue)
        return queue

    def close(self, queue: EventQueue[T]) -> None:
        """Close ``queue`` (its context is closed); its unread events are gone."""
        with self._lock:
            if queue in self._queues:
                self._queues.remove(queue)
        queue.close()

    def broadcast(self, item: T) -> None:
        """``item`` to every open queue."""
        with self._lock:
            queues = list(self._queues)
        for queue in queues:
            queue.put(item)

    def close_all(self) -> None:
        with self._lock:
            queues, self._queues = self._queues, []
        for queue in queues:
            queue.close()
