"""A driver's memory as the model's NIC reaches it over the bridge: by region and offset, in
DMA messages, never by address.

``DmaMemory`` is an MR's region: a ``nic.memory.MirroredMemory`` whose pulls and pushes are
DMA_READ and DMA_WRITE, so ``MrTable`` pulls what a lookup names and pushes back only the bytes
the transport changed, as for the shared NIC's clients. ``RingMirror`` is a ring's or a
record's region: pulled whole when named, then where a doorbell says (``pull``), and after
each command and engine pass whatever the NIC changed in it goes back (``sync``: CQEs, a
resized CQ's records).
"""

from __future__ import annotations

import errno
import mmap
from typing import Protocol

from pyroce.bridge.messages import MAX_DMA
from pyroce.nic.memory import DirtyRange, MirroredMemory


class DmaPort(Protocol):
    """The model's end of the bridge as its memory uses it; both raise ``OSError``."""

    def dma_read(self, region: int, offset: int, length: int) -> bytes: ...

    def dma_write(self, region: int, offset: int, data: bytes) -> None: ...


class DmaMemory(MirroredMemory):
    """Region ``region`` of the driver (``length`` bytes, which SGEs and RETHs name at
    ``address``), mirrored in an anonymous mapping of the model's."""

    def __init__(self, port: DmaPort, region: int, address: int, length: int) -> None:
        self.port = port
        self.region = region
        self.address = address
        self.length = length
        self.mirror = mmap.mmap(-1, max(length, 1))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(region={self.region}, length={self.length})"

    def probe(self, offset: int, length: int, writable: bool) -> None:
        if offset < 0 or length < 0 or offset + length > self.length:
            raise OSError(errno.EFAULT, f"{length} bytes at {offset} are outside region {self.region}")

    def pull(self, offset: int, length: int) -> None:
        self.mirror[offset : offset + length] = self.read(offset, length)

    def push(self, offset: int, length: int) -> None:
        self.write(offset, self.mirror[offset : offset + length])

    def read(self, offset: int, length: int) -> bytes:
        """The bytes in DMA_READs of at most ``MAX_DMA`` each."""
        self.probe(offset, length, False)
        return b"".join(self.port.dma_read(self.region, at, min(MAX_DMA, offset + length - at))
                        for at in range(offset, offset + length, MAX_DMA))  # fmt: skip

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self.probe(offset, len(data), True)
        raw = bytes(data)
        for at in range(0, len(raw), MAX_DMA):
            self.port.dma_write(self.region, offset + at, raw[at : at + MAX_DMA])


class RingMirror(DmaMemory):
    """A ring or a record: the engine reads and writes its mirror directly; ``sync`` sends back
    what it changed since the last pull or sync."""

    def __init__(self, port: DmaPort, region: int, length: int) -> None:
        super().__init__(port, region, 0, length)
        super().pull(0, length)
        self.tracked = DirtyRange(self, 0, length, self.mirror[:length])

    def pull(self, offset: int, length: int) -> None:
        """The driver's bytes, which are not changes of the NIC's to send back."""
        super().pull(offset, length)
        self.accept(offset, length)

    def accept(self, offset: int, length: int) -> None:
        """The mirror's bytes there are the driver's (pulled, or a value a doorbell carried):
        nothing ``sync`` sends back."""
        known = self.tracked.known
        self.tracked.known = known[:offset] + self.mirror[offset : offset + length] + known[offset + length :]

    def pull_slots(self, first: int, count: int, slot: int, slots: int) -> None:
        """Pull ``count`` entries of ``slot`` bytes from counter ``first`` of a ring of
        ``slots`` entries (wrapping at its end; a whole ring at most)."""
        count = min(count, slots)
        start = first % slots
        head = min(count, slots - start)
        if head:
            self.pull(start * slot, head * slot)
        if count > head:
            self.pull(0, (count - head) * slot)

    def sync(self) -> None:
        """What the NIC changed, back to the driver (``OSError`` if it cannot be)."""
        self.tracked.push()
