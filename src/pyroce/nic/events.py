"""What the NIC tells its drivers besides CQEs: asynchronous events, and the queues they go on.

The engine raises an ``AsyncEvent`` for a QP, CQ or SRQ (on the queue of the context that
created it), for the port or the device (on every context's queue), and puts a CQ's number on
its completion channel. The queues are the host's: ``EventQueue`` and ``EventQueues`` say what
the device and its drivers need of them, and ``pyroce.host.notify`` makes them (an eventfd
readable exactly while events wait, as the kernel's event files are), so the device model
holds no fd, lock or thread of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol, TypeVar

from pyroce.ib.enums import EventType

T = TypeVar("T")


class AsyncEvent(NamedTuple):
    """An asynchronous event (``ibv_async_event``): its type, its element (the QPN, CQN or
    SRQ number of an object's event, the port number of a port event, 0 for the device) and
    one line on why."""

    event_type: EventType
    element: int
    reason: str


class EventQueue(Protocol[T]):
    """Items from the engine to the drivers, oldest first (a completion channel's CQNs, a
    context's async events), safe to use from any thread."""

    def fileno(self) -> int:
        """Readable while items wait (what a driver waits on)."""
        ...

    def __len__(self) -> int: ...

    def put(self, item: T) -> None:
        """Queue ``item`` (the engine, after what it announces is written); ignored once closed."""
        ...

    def take(self) -> T | None:
        """The oldest item, or None if none waits."""
        ...

    def take_all(self) -> list[T]:
        """Every waiting item, oldest first."""
        ...

    def discard(self, unwanted: Callable[[T], bool]) -> None:
        """Drop the waiting items ``unwanted`` picks (the events of a destroyed object)."""
        ...

    def get(self) -> T:
        """The oldest item, waiting for one if none waits."""
        ...

    def close(self) -> None: ...


class EventQueues(Protocol[T]):
    """A device's asynchronous event queues, one per open context (the kernel's async event
    file per ``ibv_open_device``): an object's events go to the queue it was created with,
    ``broadcast`` what concerns them all (port and device events)."""

    def open(self) -> EventQueue[T]: ...

    def close(self, queue: EventQueue[T]) -> None:
        """Close ``queue`` (its context is closed); its unread events are gone."""
        ...

    def broadcast(self, item: T) -> None: ...

    def close_all(self) -> None: ...


class Poller(Protocol):
    """A driver polling a CQ that sleeps while the CQ stays empty (``NicDevice.wake_poller``):
    it sets ``napping[0]`` before it sleeps, and the NIC, finding it set when it writes a CQE,
    clears it and calls ``wake`` (``pyroce.host.notify.PollerWakeup``: an eventfd)."""

    napping: memoryview

    def wake(self) -> None: ...
