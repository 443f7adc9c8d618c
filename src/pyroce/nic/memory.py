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
_REMOTE = int(Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
_EMPTY = memoryview(bytearray(0))
_WINDOW_GRANTS = Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC  # a window's key is an rkey only


@dataclass(eq=False)
class MemoryRegion:
    """One registration: ``length`` bytes at integer address ``addr`` seen through ``view``."""

    key: int
    pdn: int
    addr: int
    length: int
    access: Access
    view: memoryview


@dataclass(eq=False)
class MemoryWindow:
    """A window: unbound (``region`` None) until a bind gives it a range, access and key byte."""

    key: int
    pdn: int
    mw_type: int
    region: MemoryRegion | None = None
    addr: int = 0
    length: int = 0
    access: Access = Access.LOCAL_READ  # nothing granted
    qpn: int = 0  # type 2: the QP that bound it


class BindError(ValueError):
    """A bind, or an invalidation, the table refuses (rxe answers EINVAL / IB_WC_MW_BIND_ERR)."""


class BusyError(ValueError):
    """An MR a window is bound to cannot change its memory (rxe refuses to deregister it, EINVAL)."""


class MrTable:
    def __init__(self) -> None:
        self._by_index: dict[int, MemoryRegion | MemoryWindow] = {}
        self._next_index = secrets.randbelow(MAX_MR_INDEX >> 1) + 1

    def __len__(self) -> int:
        return len(self._by_index)

    def _new_key(self) -> int:
        index = self._next_index
        while index in self._by_index:
            index = index % (MAX_MR_INDEX - 1) + 1
        self._next_index = index % (MAX_MR_INDEX - 1) + 1
        return (index << 8) | secrets.randbits(8)

    def register(self, pdn: int, view: memoryview, addr: int, access: Access) -> MemoryRegion:
        """Register ``view`` (a writable byte view) at address ``addr`` for ``pdn``."""
        region = MemoryRegion(self._new_key(), pdn, addr, len(view), access, view)
        self._by_index[region.key >> 8] = region
        return region

    def deregister(self, entry: MemoryRegion | MemoryWindow) -> None:
        """Remove an MR or a window; a window bound to a removed MR grants nothing after."""
        if self._by_index.get(entry.key >> 8) is entry:
            del self._by_index[entry.key >> 8]

    def retranslate(self, region: MemoryRegion, view: memoryview, addr: int) -> None:
        """``region`` reaches ``view`` at ``addr`` from now on, under the same key; the ranges
        of windows bound to it would name the old memory, so it must have none."""
        if any(isinstance(entry, MemoryWindow) and entry.region is region for entry in self._by_index.values()):
            raise BusyError("a memory window is bound to the MR")
        region.view, region.addr, region.length = view, addr, len(view)

    def alloc_window(self, pdn: int, mw_type: int) -> MemoryWindow:
        window = MemoryWindow(self._new_key(), pdn, mw_type)
        self._by_index[window.key >> 8] = window
        return window

    def window(self, key: int) -> MemoryWindow | None:
        """The window a BIND_MW names: its index, whatever key byte the bind gives it."""
        window = self._by_index.get(key >> 8)
        return window if isinstance(window, MemoryWindow) else None

    def region(self, key: int) -> MemoryRegion | None:
        region = self._by_index.get(key >> 8)
        return region if isinstance(region, MemoryRegion) and region.key == key else None

    def bind(self, window: MemoryWindow, region: MemoryRegion | None, addr: int, length: int, access: Access,
             key_byte: int, qpn: int) -> None:  # fmt: skip
        """Bind ``window`` to ``length`` bytes at ``addr`` of ``region`` (rxe_check_bind_mw's
        rules); ``length`` 0 unbinds it. The window's key takes ``key_byte``."""
        if window.mw_type == 2 and window.region is not None:
            raise BindError("a bound type 2 window must be invalidated before it is bound again")
        if window.mw_type == 2 and not length:
            raise BindError("a type 2 window is unbound by invalidation, not by a zero-length bind")
        if length:
            if region is None or self._by_index.get(region.key >> 8) is not region:
                raise BindError("the MR is not registered")
            if region.pdn != window.pdn:
                raise BindError("the MR and the window belong to different protection domains")
            if not region.access & Access.MW_BIND:
                raise BindError("the MR was registered without IBV_ACCESS_MW_BIND")
            if int(access) & int(Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not region.access & Access.LOCAL_WRITE:
                raise BindError("remote write or atomic access through a window needs local write on the MR")
            if addr < region.addr or length < 0 or addr + length > region.addr + region.length:
                raise BindError("the window's range lies outside the MR")
        window.region = region if length else None
        window.addr, window.length, window.access, window.qpn = addr, length, access & _WINDOW_GRANTS, qpn
        window.key = (window.key & ~0xFF) | (key_byte & 0xFF)

    def invalidate(self, key: int, qpn: int) -> MemFault | None:
        """LOCAL_INV or a peer's SEND with invalidate: only a bound type 2 window of ``qpn``
        (rxe refuses type 1 windows and MRs that are not fast-registered, which pyroce has not)."""
        window = self._by_index.get(key >> 8)
        if not isinstance(window, MemoryWindow) or window.key != key:
            return MemFault.BAD_KEY
        if window.mw_type != 2 or window.region is None or window.qpn != qpn:
            return MemFault.ACCESS
        window.region = None
        window.length = 0
        return None

    def lookup(self, key: int, addr: int, length: int, access: Access, pdn: int) -> memoryview | MemFault:
        if length == 0:
            return _EMPTY  # IBA 9.4.3/9.4.4: a zero-length access checks no key and touches nothing
        region = self._by_index.get(key >> 8)
        if region is None or region.key != key:
            return MemFault.BAD_KEY
        if isinstance(region, MemoryWindow):
            return self._through_window(region, addr, length, access, pdn)
        if region.pdn != pdn:
            return MemFault.BAD_PD
        if int(access) & ~int(region.access):  # ints: IntFlag operators build enum members
            return MemFault.ACCESS
        start = addr - region.addr
        if start < 0 or length < 0 or start + length > region.length:
            return MemFault.BOUNDS
        return region.view[start : start + length]

    def _through_window(self, window: MemoryWindow, addr: int, length: int, access: Access,
                        pdn: int) -> memoryview | MemFault:  # fmt: skip
        region = window.region
        if region is None or self._by_index.get(region.key >> 8) is not region:
            return MemFault.BAD_KEY  # unbound, invalidated, or its MR is gone
        if not int(access) & _REMOTE:
            return MemFault.BAD_KEY  # a window's key is an R_Key: an SGE's L_Key names an MR (IBA 10.6.7)
        if window.pdn != pdn:
            return MemFault.BAD_PD
        if int(access) & ~int(window.access):
            return MemFault.ACCESS
        start = addr - window.addr
        if start < 0 or length < 0 or start + length > window.length:
            return MemFault.BOUNDS
        offset = addr - region.addr
        return region.view[offset : offset + length]
