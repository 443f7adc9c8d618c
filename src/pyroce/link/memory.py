"""Links joined in memory: datagrams between devices of one process, with no sockets.

A ``MemoryWire`` is a segment of Ethernet that only this process sees: each ``MemoryLink`` on
it is bound to an address, and what one sends to an address the link bound there receives,
the same bytes a UDP socket would deliver. With devices in host mode
(``pyroce.host.assembly.build_device(..., progress="host")``) and a host that calls
``step(now)``, two NICs run in simulated time, as under a simulator. Its fd becomes readable
when a datagram waits, so the engine thread can also wait on it.
"""

from __future__ import annotations

import os
from collections import deque

from pyroce.link.base import Link


class MemoryWire:
    """The links joined by this wire, by address."""

    def __init__(self) -> None:
        self.links: dict[str, MemoryLink] = {}
        self.groups: dict[str, set[MemoryLink]] = {}  # a multicast address -> the links that joined it

    def link(self, address: str) -> MemoryLink:
        if address in self.links:
            raise ValueError(f"{address} is already on this wire")
        link = self.links[address] = MemoryLink(self, address)
        return link


class QueuedLink(Link):
    """A link whose datagrams arrive in a queue this process fills (no socket, no GSO): the
    inbox, its fd (readable while a datagram waits, so an engine thread can wait on it), and
    the receive side the engine reads. Subclasses say where ``send`` puts datagrams and how a
    multicast group's come in (``join``)."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self._inbox: deque[tuple[bytes, str, str]] = deque()  # datagram, sender, the address it was sent to
        self._ready = os.eventfd(0, os.EFD_NONBLOCK)
        # Deliveries written to the fd, and what reads took back: the fd is read only when they
        # differ, so a pass that finds the inbox empty makes no system call and raises nothing
        # (an eventfd read with nothing in it fails with EAGAIN, an exception, ~9 000 instructions).
        # A count lost to two threads delivering at once only costs a read that finds nothing.
        self._signalled = self._drained = 0

    def fileno(self) -> int:
        return self._ready

    @property
    def waiting(self) -> bool:
        """A datagram waits (what the fd's readability says, without a system call)."""
        return bool(self._inbox)

    def deliver(self, data: bytes, sender: str, dest: str | None = None) -> None:
        """A datagram from ``sender`` arrived for this link: to its address, or to ``dest``
        (a multicast group it joined)."""
        self._inbox.append((data, sender, dest or self.address))
        os.eventfd_write(self._ready, 1)
        self._signalled += 1  # after the write: a reader that sees it finds the fd readable

    def send_segments(self, data: memoryview, segment_size: int, peer: str) -> bool:
        for start in range(0, len(data), segment_size):
            self.send(data[start : start + segment_size], peer)
        return True

    def recv_into(self, buf: bytearray) -> tuple[int, tuple[str, int], int, str] | None:
        if not self._inbox:
            signalled = self._signalled
            if signalled == self._drained:
                return None  # nothing written since the fd was last read: it is not readable
            try:  # not readable until the next delivery; checked again after, so none is missed
                self._drained += os.eventfd_read(self._ready)
            except BlockingIOError:  # the writes counted before the read were all read already
                self._drained = signalled  # (a count lost, see __init__; a later write counts after)
            if not self._inbox:
                return None
        data, sender, dest = self._inbox.popleft()
        buf[: len(data)] = data
        return len(data), (sender, self.port), len(data), dest

    def close(self) -> None:
        if self._ready >= 0:
            os.close(self._ready)
            self._ready = -1


class MemoryLink(QueuedLink):
    """One address on a ``MemoryWire`` (the ``Link`` the engine needs; no GSO)."""

    def __init__(self, wire: MemoryWire, address: str) -> None:
        super().__init__(address)
        self._wire = wire

    def send(self, data: memoryview | bytes, peer: str) -> bool:
        """Deliver to the link bound at ``peer``, or to the other links that joined group ``peer``
        (its own: its NIC delivered them); to no link, the datagram is lost (as on a wire)."""
        wire = self._wire
        target = wire.links.get(peer)
        if target is not None:
            target.deliver(bytes(data), self.address)
        for link in wire.groups.get(peer, ()) if target is None else ():
            if link is not self:
                link.deliver(bytes(data), self.address, peer)
        return True

    def join(self, group: str) -> None:
        """Receive what other links send to multicast address ``group``."""
        self._wire.groups.setdefault(group, set()).add(self)

    def leave(self, group: str) -> None:
        self._wire.groups.get(group, set()).discard(self)

    def close(self) -> None:
        if self._wire.links.get(self.address) is self:
            del self._wire.links[self.address]
        for members in self._wire.groups.values():
            members.discard(self)
        super().close()
