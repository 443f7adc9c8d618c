"""A connection's shared memory: where the NIC puts the rings, doorbell records and CQEs of a
driver's objects, so both processes read and write them in place (as a NIC's queues live in
memory the driver and the device both reach).

One memfd per connection, mapped by the NIC and by the driver (the fd travels with the
``hello`` answer); a ring is a page-aligned piece of it, named to the driver by its offset
(``protocol.ArenaOffset``). The file is sparse: pages cost memory only once touched. A piece is
free again when the verbs object that holds its view is gone (the view's ctypes owner is
finalized), so a long-lived program that creates and destroys QPs does not run out.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import weakref

from pyroce.nicd.protocol import ArenaOffset, PassFd
from pyroce.verbs.driver_memory import address_of

ARENA_SIZE = 1 << 30  # address space per connection; only touched pages are memory
PAGE = mmap.PAGESIZE


class ArenaFull(MemoryError):
    """No free piece is large enough (the driver gets ENOMEM)."""


class Arena:
    """One end's mapping of a connection's shared memory, and the driver memory of the objects
    that allocate from it (``pyroce.verbs.driver_memory.DriverMemory``): the NIC's for a C
    driver's objects, which its verbs objects allocate there; a Python driver's
    (``nicd.remote_device``) allocates its own and names each piece by offset and length, which
    the NIC sees through ``view``. A connection's pieces are allocated at one end only."""

    def __init__(self, name: str, size: int = ARENA_SIZE) -> None:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
        except OSError:
            os.close(fd)
            raise
        self._attach(fd, size)

    @classmethod
    def attach(cls, fd: int, size: int) -> Arena:
        """The other end's mapping of an arena whose memfd came across (``fd`` is the arena's now)."""
        arena = cls.__new__(cls)
        arena._attach(fd, size)
        return arena

    def _attach(self, fd: int, size: int) -> None:
        self.fd = fd
        self._pid = os.getpid()  # a forked child's copy frees nothing: the pieces are its parent's
        try:
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            raise
        self.size = size
        self.base = address_of(memoryview(self._map)[:PAGE])
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, length), sorted, coalesced

    # --- DriverMemory ----------------------------------------------------------------

    def alloc(self, size: int) -> memoryview:
        """``size`` zeroed bytes, page-aligned, shared with the driver."""
        length = -(-max(size, 1) // PAGE) * PAGE
        for index, (offset, free) in enumerate(self._free):
            if free >= length:
                break
        else:
            raise ArenaFull(f"no {length} bytes left of the connection's {self.size >> 20} MiB of rings")
        if free == length:
            del self._free[index]
        else:
            self._free[index] = (offset + length, free - length)
        owner = (ctypes.c_char * length).from_buffer(self._map, offset)
        ctypes.memset(owner, 0, length)
        weakref.finalize(owner, self._release, offset, length)
        return memoryview(owner).cast("B")[:size]

    def address(self, view: memoryview) -> ArenaOffset:
        """How the driver finds ``view``: its offset in the shared memory."""
        offset = address_of(view) - self.base
        if not 0 <= offset < self.size:
            raise ValueError("the view is not in this connection's shared memory")
        return ArenaOffset(offset)

    def export_fd(self, fd: int) -> PassFd:
        """A descriptor of the NIC's (an event fd, the doorbell pipe) goes to the driver as a
        descriptor of its own."""
        return PassFd(fd)

    @property
    def mapping(self) -> mmap.mmap:
        return self._map

    def view(self, offset: int, length: int) -> memoryview:
        """The ``length`` bytes at ``offset`` (a piece the other end allocated); ValueError past the end."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError(f"{length} bytes at offset {offset} are not in the connection's shared memory")
        return memoryview(self._map)[offset : offset + length]

    def holds(self, view: memoryview) -> bool:
        """Whether ``view`` lies in this mapping."""
        return 0 <= address_of(view) - self.base < self.size if len(view) else False

    # --- the free list -----------------------------------------------------------------

    def _release(self, offset: int, length: int) -> None:
        if self._map.closed or os.getpid() != self._pid:
            return
        try:
            self._map.madvise(mmap.MADV_REMOVE, offset, length)  # its pages back to the system
        except OSError:
            pass
        index = bisect.bisect(self._free, (offset, 0))
        self._free.insert(index, (offset, length))
        self._coalesce(index)

    def _coalesce(self, index: int) -> None:
        free = self._free
        if index + 1 < len(free) and free[index][0] + free[index][1] == free[index + 1][0]:
            free[index] = (free[index][0], free[index][1] + free[index + 1][1])
            del free[index + 1]
        if index > 0 and free[index - 1][0] + free[index - 1][1] == free[index][0]:
            free[index - 1] = (free[index - 1][0], free[index - 1][1] + free[index][1])
            del free[index]

    def close(self) -> None:
        """Drop the NIC's mapping (views still held keep it until they go) and the fd."""
        try:
            self._map.close()
        except BufferError:
            pass  # a verbs object still holds a ring: the mapping goes with it
        os.close(self.fd)

