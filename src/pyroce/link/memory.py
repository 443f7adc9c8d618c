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

from pyroce.link.paths import RocePaths


class MemoryWire:
    """The links joined by this wire, by address."""

    def __init__(self) -> None:
        self.links: dict[str, MemoryLink] = {}

    def link(self, address: str) -> MemoryLink:
        if address in self.links:
            raise ValueError(f"{address} is already on this wire")
        link = self.links[address] = MemoryLink(self, address)
        return link


class QueuedLink(RocePaths):
    """A link whose datagrams arrive in a queue this process fills (no socket, no GSO): the
    inbox, its fd (readable while a datagram waits, so an engine thread can wait on it), and
    the receive side the engine reads. Subclasses say where ``send`` puts datagrams."""

    gso = False

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self._inbox: deque[tuple[bytes, str]] = deque()
        self._ready = os.eventfd(0, os.EFD_NONBLOCK)

    def fileno(self) -> int:
        return self._ready

    @property
    def waiting(self) -> bool:
        """A datagram waits (what the fd's readability says, without a system call)."""
        return bool(self._inbox)

    def deliver(self, data: bytes, sender: str) -> None:
        """A datagram from ``sender`` arrived for this link."""
        self._inbox.append((data, sender))
        os.eventfd_write(self._ready, 1)

    def send(self, data: memoryview | bytes, peer: str) -> bool:
        raise NotImplementedError

    def send_segments(self, data: memoryview, segment_size: int, peer: str) -> bool:
        for start in range(0, len(data), segment_size):
            self.send(data[start : start + segment_size], peer)
        return True

    def recv_into(self, buf: bytearray) -> tuple[int, tuple[str, int], int] | None:
        if not self._inbox:
            try:  # not readable until the next delivery; checked again after, so none is missed
                os.eventfd_read(self._ready)
            except BlockingIOError:
                pass
            if not self._inbox:
                return None
        data, sender = self._inbox.popleft()
        buf[: len(data)] = data
        return len(data), (sender, self.port), len(data)

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
        """Deliver to the link bound at ``peer``; to no link, the datagram is lost (as on a wire)."""
        target = self._wire.links.get(peer)
        if target is not None:
            target.deliver(bytes(data), self.address)
        return True

    def close(self) -> None:
        if self._wire.links.get(self.address) is self:
            del self._wire.links[self.address]
        super().close()
