"""The NIC's memory-protection table: registered regions by key (the "MPT" of a real NIC).

Keys are ``index << 8 | key byte`` as rxe makes them: the index finds the entry in one dict
lookup, the key byte (random per registration) makes a stale or guessed key fail. ``lookup``
is the only way the engine reaches memory, and it checks key, PD, access and bounds before it
returns a view of exactly the bytes asked for (transport.memory's contract).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from pyroce.ib.enums import Access
from pyroce.transport.memory import MemFault

MAX_MR_INDEX = 1 << 24
_EMPTY = memoryview(bytearray(0))


@dataclass(eq=False)
class MemoryRegion:
    """One registration: ``length`` bytes at integer address ``addr`` seen through ``view``."""

    key: int
    pdn: int
    addr: int
    length: int
    access: Access
    view: memoryview


class MrTable:
    def __init__(self) -> None:
        self._by_index: dict[int, MemoryRegion] = {}
        self._next_index = secrets.randbelow(MAX_MR_INDEX >> 1) + 1

    def __len__(self) -> int:
        return len(self._by_index)

    def register(self, pdn: int, view: memoryview, addr: int, access: Access) -> MemoryRegion:
        """Register ``view`` (a writable byte view) at address ``addr`` for ``pdn``."""
        index = self._next_index
        while index in self._by_index:
            index = index % (MAX_MR_INDEX - 1) + 1
        self._next_index = index % (MAX_MR_INDEX - 1) + 1
        key = (index << 8) | secrets.randbits(8)
        region = MemoryRegion(key, pdn, addr, len(view), access, view)
        self._by_index[index] = region
        return region

    def deregister(self, region: MemoryRegion) -> None:
        if self._by_index.get(region.key >> 8) is region:
            del self._by_index[region.key >> 8]

    def lookup(self, key: int, addr: int, length: int, access: Access, pdn: int) -> memoryview | MemFault:
        if length == 0:
            return _EMPTY  # IBA 9.4.3/9.4.4: a zero-length access checks no key and touches nothing
        region = self._by_index.get(key >> 8)
        if region is None or region.key != key:
            return MemFault.BAD_KEY
        if region.pdn != pdn:
            return MemFault.BAD_PD
        if int(access) & ~int(region.access):  # ints: IntFlag operators build enum members
            return MemFault.ACCESS
        start = addr - region.addr
        if start < 0 or length < 0 or start + length > region.length:
            return MemFault.BOUNDS
        return region.view[start : start + length]
