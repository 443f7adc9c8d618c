"""Where a Context's rings, doorbell records and CQEs live, and how its driver names them.

A Python program's verbs keep their rings in the process's own memory (``LocalMemory``). When
the NIC serves another process's driver (the shared NIC, ``pyroce.nicd``), the same verbs
objects put them in memory both processes map, name them by offset, hand descriptors across
and reach the program's own memory from outside: that connection's ``DriverMemory`` is given
to the Context (``Context(..., driver_memory=...)``).
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any, Protocol


def address_of(view: memoryview) -> int:
    """The integer address of a writable buffer's first byte."""
    holder = (ctypes.c_char * len(view)).from_buffer(view)
    try:
        return ctypes.addressof(holder)
    finally:
        del holder


class DriverMemory(Protocol):
    def alloc(self, size: int) -> memoryview:
        """``size`` zeroed bytes for a ring or a record."""
        ...

    def address(self, view: memoryview) -> int:
        """How the driver finds ``view`` (an address in its process, or an offset)."""
        ...

    def export_fd(self, fd: int) -> int:
        """How the driver gets one of the NIC's descriptors."""
        ...

    def program_memory(self, addr: int, length: int) -> Any:
        """What ``MR(..., address=)`` registers for ``length`` bytes at ``addr`` of the program."""
        ...

    def mr_memory(self, length: int) -> tuple[mmap.mmap | None, memoryview]:
        """``length`` zeroed, page-aligned bytes for an MR that allocates its own (pyverbs'
        ``MR(pd, length, access)``), where the NIC reaches them best, and what the MR closes
        with them (None: they go when the view does)."""
        ...


class LocalMemory:
    """The program is this process: plain buffers, real addresses, the same descriptors."""

    def alloc(self, size: int) -> memoryview:
        return memoryview(bytearray(size))

    def address(self, view: memoryview) -> int:
        return address_of(view)

    def export_fd(self, fd: int) -> int:
        return fd

    def program_memory(self, addr: int, length: int) -> Any:
        return addr

    def mr_memory(self, length: int) -> tuple[mmap.mmap | None, memoryview]:
        memory = mmap.mmap(-1, max(length, 1))
        return memory, memoryview(memory)[:length]


LOCAL = LocalMemory()
