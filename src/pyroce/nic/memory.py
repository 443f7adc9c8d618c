"""The NIC's memory-protection table: registered regions by key (the "MPT" of a real NIC).

Keys are ``index << 8 | key byte`` as rxe makes them: the index finds the entry in one dict
lookup, the key byte (random per registration) makes a stale or guessed key fail. ``lookup``
is the only way the engine reaches memory, and it checks key, PD, access and bounds before it
returns a view of exactly the bytes asked for (transport.memory's contract).

A region may be another process's memory (``MirroredMemory``: the shared NIC's clients), which
the NIC cannot address: the transport still gets real memoryviews, of a local mirror. A lookup
first pulls the range from the memory into the mirror (a fault is ``MemFault.UNMAPPED``); a
range looked up for an access that may write it is dirty while its view lives, and is pushed
back when the view goes (a weak reference to the ctypes array the view is made from) and by
``flush``, which the engine calls before it writes a CQE and at the end of each pass. A push
writes back only the bytes that changed since they were pulled (or last pushed), as a DMA
writes only what it places: a receive WQE's buffer is larger than most messages, and a program
may use the bytes past them meanwhile (UCX keeps the next buffer's descriptor header in the
last bytes of a posted one). A message's destination (a ``placing`` lookup: an RDMA WRITE's
target, a receive buffer, a READ's local buffer) is neither pulled nor compared: the transport
says how far it placed it (``placed``, with the view it was given), and that goes back, once
(an RDMA WRITE's with the others its engine pass placed: ``placed_later``). It is not pulled at all, not
even probed: a memory gone shows when ``placed`` pushes, which then says so, and the transport
fails the message as it fails one refused at its first packet (a 2-byte message between two
programs of one shared NIC paid a third of its system calls for the probe). A push that fails
is counted (``dma_errors``), never raised. The sources of the sends a fetch takes are pulled
together first, as one span per region where they lie close (``prefetch``): their lookups in
that pass pull nothing more (``fresh``).
Ordinary regions pay one attribute test per lookup; the engine, one dict test per pass and per
CQE batch (``dirty``).
"""

from __future__ import annotations

import ctypes
import functools
import secrets
import weakref
from builtins import memoryview  # mypyc finds a dataclass field's type among the module's globals
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pyroce.ib.counters import Counters
from pyroce.ib.enums import Access
from pyroce.nic.mirrored import Mirror, MirroredMemory
from pyroce.transport.memory import MemFault, MemoryTable
from pyroce.transport.work import Sge

MAX_MR_INDEX: Final = 1 << 24
_REMOTE: Final = int(Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
_WRITES: Final = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)  # accesses that may write
_EMPTY: Final = memoryview(bytearray(0))
_WINDOW_GRANTS: Final = _REMOTE  # a window's key is an rkey only
_MW_BIND: Final = int(Access.MW_BIND)
_LOCAL_WRITE: Final = int(Access.LOCAL_WRITE)
_REMOTE_WRITES: Final = int(Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
# A fetch's send sources in one mirrored region are pulled as one span if it is at most a page,
# or at most PREFETCH_SPAN and at least half of it theirs (``MrTable.prefetch``)
PREFETCH_PAGE: Final = 4096
PREFETCH_SPAN: Final = 256 << 10


def _holder(mirror: Mirror, start: int, length: int) -> tuple[ctypes.Array[ctypes.c_char], int]:
    """A ctypes array over the mirror that covers ``length`` bytes at ``start``, and where they
    begin in it. Its length is a power of two (or the whole mirror), so the array types made
    stay few: ctypes keeps every array type it makes for the life of the process."""
    total = len(mirror)
    size = 1 << (length - 1).bit_length()
    if size >= total:
        return (ctypes.c_char * total).from_buffer(mirror), start
    at = min(start, total - size)
    return (ctypes.c_char * size).from_buffer(mirror, at), start - at


@dataclass(eq=False)
class MemoryRegion:
    """One registration: ``length`` bytes at integer address ``addr`` seen through ``view``."""

    key: int
    pdn: int
    addr: int
    length: int
    access: int  # ``Access`` flags, a plain int: IntFlag operators build an enum member each
    view: memoryview
    mirrored: MirroredMemory | None = None  # another process's memory: ``view`` is its mirror

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (the caller checks the bounds), from the memory itself
        for a mirrored region (``OSError`` if it cannot be reached)."""
        if self.mirrored is not None:
            return self.mirrored.read(offset, length)
        return bytes(self.view[offset : offset + length])

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset`` (the caller checks the bounds)."""
        if self.mirrored is not None:
            self.mirrored.write(offset, data)
        else:
            self.view[offset : offset + len(data)] = data


@dataclass(eq=False)
class MemoryWindow:
    """A window: unbound (``region`` None) until a bind gives it a range, access and key byte."""

    key: int
    pdn: int
    mw_type: int
    region: MemoryRegion | None = None
    addr: int = 0
    length: int = 0
    access: int = 0  # ``Access`` flags, a plain int: nothing granted
    qpn: int = 0  # type 2: the QP that bound it


class DirtyRange:
    """A range of a mirrored region the transport may write, while a view of it lives, with its
    bytes as last pulled or pushed: what changed since is what a push writes back. ``known``
    None: a message's destination, never pulled, of which only what ``MrTable.placed`` names goes back.

    A class with its own ``__init__``, not a dataclass: one is made per message into a C
    program's memory, and a dataclass's generated ``__init__`` stays interpreted in the compiled
    build (6% of the shared NIC's engine under ``ib_write_bw -s 2``)."""

    __slots__ = ("known", "length", "memory", "start", "watch")

    def __init__(self, memory: MirroredMemory, start: int, length: int, known: bytes | None) -> None:
        self.memory = memory
        self.start = start
        self.length = length
        self.known = known
        # what the transport holds: the ctypes array its views are made from, whose end pushes
        # the range; a destination's own view, whose end without ``placed`` drops it
        self.watch: weakref.ref[ctypes.Array[ctypes.c_char]] | weakref.ref[memoryview] | None = None

    def changed(self, known: bytes) -> tuple[int, bytes] | None:
        """Where the mirror's range differs from ``known`` (its bytes as last pulled or pushed)
        and the range now, up to its last changed byte; None if none changed. Bisected with
        slice comparisons (memcmp)."""
        now = bytes(memoryview(self.memory.mirror)[self.start : self.start + self.length])
        if now == known:
            return None
        lo, hi = 0, len(now)  # now[:lo] == known[:lo], now[:hi] != known[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if now[lo:mid] == known[lo:mid] else (lo, mid)
        first, hi = lo, len(now)  # now[hi:] == known[hi:], now[lo:] != known[lo:]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if now[mid:hi] == known[mid:hi] else (mid, hi)
        return first, now[:hi]

    def push(self) -> None:
        """The changed bytes back to the memory (from the first change to the last), known
        from then on; ``OSError`` if the memory cannot be reached."""
        known = self.known
        if known is None:  # a message's destination: ``MrTable.placed`` pushes it
            return
        changed = self.changed(known)
        if changed is None:
            return
        first, now = changed
        self.memory.push(self.start + first, len(now) - first)
        self.known = now + known[len(now) :]


class BindError(ValueError):
    """A bind, or an invalidation, the table refuses (rxe answers EINVAL / IB_WC_MW_BIND_ERR)."""


class BusyError(ValueError):
    """An MR a window is bound to cannot change its memory (rxe refuses to deregister it, EINVAL)."""


# A destination placed and not yet written back: its memory, start, end, and what refuses its
# message if it cannot be (``refuse(token)``)
Unpushed = tuple[MirroredMemory, int, int, Callable[[int], None], int]


class MrTable(MemoryTable[DirtyRange]):
    def __init__(self, counters: Counter[str] | None = None) -> None:
        super().__init__()
        self._by_index: dict[int, MemoryRegion | MemoryWindow] = {}
        self._next_index = secrets.randbelow(MAX_MR_INDEX >> 1) + 1
        self.counters: Counter[str] = Counters() if counters is None else counters
        # ``dirty``: ranges of mirrored regions looked up for an access that may write, while
        # their view lives, by the id of the ctypes array their views are made from
        # (``view.obj``, alive as long as they are), a destination's by the id of its view
        # (which ``placed`` is given). Empty when nothing is mirrored.
        self.mirrors = 0  # mirrored regions registered: what a fetch prefetches for, if any
        # Destinations placed and not yet written back (``placed_later``), in the order they
        # were placed. Kept one list: the engine holds it to see whether a pass has any.
        self.unpushed: list[Unpushed] = []
        # Spans of mirrored memory pulled by ``prefetch`` in this engine pass, by the memory's
        # id: a lookup inside one pulls nothing. The engine empties it at the end of each pass.
        self.fresh: dict[int, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._by_index)

    def _new_key(self) -> int:
        index = self._next_index
        while index in self._by_index:
            index = index % (MAX_MR_INDEX - 1) + 1
        self._next_index = index % (MAX_MR_INDEX - 1) + 1
        return (index << 8) | secrets.randbits(8)

    def register(self, pdn: int, view: memoryview, addr: int, access: Access,
                 mirrored: MirroredMemory | None = None) -> MemoryRegion:  # fmt: skip
        """Register ``view`` (a writable byte view) at address ``addr`` for ``pdn``; with
        ``mirrored``, ``view`` is its mirror (one region per ``MirroredMemory``)."""
        region = MemoryRegion(self._new_key(), pdn, addr, len(view), int(access), view, mirrored)
        self._by_index[region.key >> 8] = region
        self.mirrors += mirrored is not None
        return region

    def deregister(self, entry: MemoryRegion | MemoryWindow) -> None:
        """Remove an MR or a window; a window bound to a removed MR grants nothing after. A
        mirrored MR's memory is no longer reached: what the transport still holds of its mirror
        is not pushed (what completed was pushed before its CQE), and the mirror is dropped."""
        if self._by_index.get(entry.key >> 8) is entry:
            del self._by_index[entry.key >> 8]
            if isinstance(entry, MemoryRegion) and entry.mirrored is not None:
                self.mirrors -= 1
                self._forget(entry.mirrored)

    def retranslate(self, region: MemoryRegion, view: memoryview, addr: int,
                    mirrored: MirroredMemory | None = None) -> None:  # fmt: skip
        """``region`` reaches ``view`` at ``addr`` from now on, under the same key; the ranges
        of windows bound to it would name the old memory, so it must have none."""
        if any(isinstance(entry, MemoryWindow) and entry.region is region for entry in self._by_index.values()):
            raise BusyError("a memory window is bound to the MR")
        if region.mirrored is not None and region.mirrored is not mirrored:
            self._forget(region.mirrored)
        self.mirrors += (mirrored is not None) - (region.mirrored is not None)
        region.view, region.addr, region.length, region.mirrored = view, addr, len(view), mirrored

    def _forget(self, memory: MirroredMemory) -> None:
        for holder, entry in list(self.dirty.items()):  # (a snapshot: see ``_view_gone``)
            if entry.memory is memory:
                del self.dirty[holder]
        self.fresh.pop(id(memory), None)
        memory.close()

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
            if not region.access & _MW_BIND:
                raise BindError("the MR was registered without IBV_ACCESS_MW_BIND")
            if int(access) & _REMOTE_WRITES and not region.access & _LOCAL_WRITE:
                raise BindError("remote write or atomic access through a window needs local write on the MR")
            if addr < region.addr or length < 0 or addr + length > region.addr + region.length:
                raise BindError("the window's range lies outside the MR")
        window.region = region if length else None
        window.addr, window.length, window.access, window.qpn = addr, length, int(access) & _WINDOW_GRANTS, qpn
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

    def lookup(self, key: int, addr: int, length: int, access: int, pdn: int,
               placing: bool = False) -> memoryview | MemFault:  # fmt: skip
        if length == 0:
            return _EMPTY  # IBA 9.4.3/9.4.4: a zero-length access checks no key and touches nothing
        region = self._by_index.get(key >> 8)
        if region is None or region.key != key:
            return MemFault.BAD_KEY
        if isinstance(region, MemoryWindow):
            return self._through_window(region, addr, length, access, pdn, placing)
        if region.pdn != pdn:
            return MemFault.BAD_PD
        if access & ~region.access:
            return MemFault.ACCESS
        start = addr - region.addr
        if start < 0 or length < 0 or start + length > region.length:
            return MemFault.BOUNDS
        if region.mirrored is not None:
            return self._mirrored(region.mirrored, region.view, start, length, access, placing)
        return region.view[start : start + length]

    def _through_window(self, window: MemoryWindow, addr: int, length: int, access: int, pdn: int,
                        placing: bool) -> memoryview | MemFault:  # fmt: skip
        region = window.region
        if region is None or self._by_index.get(region.key >> 8) is not region:
            return MemFault.BAD_KEY  # unbound, invalidated, or its MR is gone
        if not access & _REMOTE:
            return MemFault.BAD_KEY  # a window's key is an R_Key: an SGE's L_Key names an MR (IBA 10.6.7)
        if window.pdn != pdn:
            return MemFault.BAD_PD
        if access & ~window.access:
            return MemFault.ACCESS
        start = addr - window.addr
        if start < 0 or length < 0 or start + length > window.length:
            return MemFault.BOUNDS
        offset = addr - region.addr
        if region.mirrored is not None:
            return self._mirrored(region.mirrored, region.view, offset, length, access, placing)
        return region.view[offset : offset + length]

    # --- mirrored regions (another process's memory) ---------------------------------------

    def prefetch(self, sources: list[Sge]) -> None:
        """Pull the sources of the send WQEs one fetch took (their SGEs) for each mirrored
        region in one ``pull`` of the span they lie in, when they lie close: within a page, or
        filling at least half of a span of at most ``PREFETCH_SPAN``. Their lookups in this
        pass then pull nothing (``fresh``): one system call for a fetch's messages where each
        paid its own (2-byte WRITEs between two C programs on one engine: ~50 to a fetch, each
        pull ~3 µs). Keys, PDs and bounds stay the lookups' to check; a span that faults, or
        that holds a range the NIC has written and not pushed back, is not pulled (the lookups
        pull theirs, and fail where they should)."""
        if self.unpushed:
            self.push_placed()  # the NIC's bytes before the program's are pulled over them
        spans: dict[int, tuple[MirroredMemory, list[int]]] = {}  # by its id: [first, end, bytes of sources, sources]
        for sge in sources:
            region = self._by_index.get(sge.lkey >> 8)
            if not isinstance(region, MemoryRegion) or region.key != sge.lkey or region.mirrored is None:
                continue
            start = sge.addr - region.addr
            end = start + sge.length
            if start < 0 or end <= start or end > region.length:
                continue
            memory = region.mirrored
            found = spans.get(id(memory))
            if found is None:
                spans[id(memory)] = (memory, [start, end, end - start, 1])
            else:
                span = found[1]
                span[0], span[1] = min(span[0], start), max(span[1], end)
                span[2] += end - start
                span[3] += 1
        for ident, (memory, (first, end, covered, count)) in spans.items():
            width = end - first
            if count < 2 or (width > PREFETCH_PAGE and (width > PREFETCH_SPAN or 2 * covered < width)):
                continue  # one source pulls as much either way; far apart, the span is mostly not theirs
            if self.dirty and any(entry.memory is memory and entry.start < end and first < entry.start + entry.length
                                  for entry in list(self.dirty.values())):  # fmt: skip
                continue  # the NIC's bytes there are not the program's yet
            try:
                memory.pull(first, width)
            except OSError:
                continue
            self.fresh[ident] = (first, end)

    def _mirrored(self, memory: MirroredMemory, mirror: memoryview, start: int, length: int, access: int,
                  placing: bool) -> memoryview | MemFault:  # fmt: skip
        """A checked range of a mirrored region (``mirror``: the region's view of its mirror):
        pulled into the mirror, then its view; dirty while the view lives if the access may
        write (what it changes is pushed back). A ``placing`` range that may be written is not
        pulled: what ``placed`` names is pushed."""
        writes = access & _WRITES
        placing = placing and bool(writes)  # a range the transport only reads is pulled whole
        if not placing:
            fresh = self.fresh.get(id(memory)) if self.fresh else None
            if fresh is None or start < fresh[0] or start + length > fresh[1]:
                # the NIC's bytes first
                if self.unpushed:
                    self.push_placed()
                overlapping = self._push_overlapping(memory, start, length) if self.dirty else []
                try:
                    memory.pull(start, length)
                except OSError:
                    self.counters["dma_errors"] += 1
                    return MemFault.UNMAPPED
                for entry in overlapping:  # the pull is no change of theirs: the program's bytes
                    entry.known = bytes(mirror[entry.start : entry.start + entry.length])
            if not writes:
                return mirror[start : start + length]
        if placing:
            # A destination is handed back with the view itself (``placed``): that view is
            # the range's, and its end without ``placed`` drops the range (an abandoned
            # message). No ctypes array to hold it, which cost a tenth of the shared NIC's engine
            # under 2-byte WRITEs between C programs.
            view = mirror[start : start + length]
            entry = DirtyRange(memory, start, length, None)
            entry.watch = weakref.ref(view, functools.partial(self._view_gone, id(view)))
            self.dirty[id(view)] = entry
            return view
        holder, at = _holder(memory.mirror, start, length)
        entry = DirtyRange(memory, start, length, bytes(mirror[start : start + length]))
        # A weak reference, not weakref.finalize (a Python class: a quarter of a pull's cost);
        # kept by the entry, so a range dropped unpushed (deregistered) calls nothing
        entry.watch = weakref.ref(holder, functools.partial(self._view_gone, id(holder)))
        self.dirty[id(holder)] = entry
        return memoryview(holder).cast("B")[at : at + length]

    def _push_overlapping(self, memory: MirroredMemory, start: int, length: int) -> list[DirtyRange]:
        """Push the dirty ranges of ``memory`` that overlap the range; those ranges. A message's
        destination in progress is left as it is: its bytes are undefined until the message
        ends, and a pull over them meanwhile (a race of the program's) overwrites what it placed."""
        end = start + length
        found = [entry for entry in list(self.dirty.values())  # (a snapshot: see ``_view_gone``)
                 if entry.memory is memory and entry.known is not None and entry.start < end
                 and start < entry.start + entry.length]  # fmt: skip
        for entry in found:
            self._push(entry)
        return found

    def _view_gone(self, holder: int, _watch: object) -> None:
        """The last view of a dirty range went: its bytes go back to the memory (a message's
        destination not ``placed``, a message abandoned, has none to). It runs in whatever
        thread let the view go (a collection's, say), even while the engine walks ``dirty``:
        the walks go over a snapshot (``list()`` of a dict is one step no thread interrupts)."""
        entry = self.dirty.pop(holder, None)
        if entry is not None:
            self._push(entry)

    def placed(self, view: memoryview, length: int) -> bool:
        """The transport placed the first ``length`` bytes of a message's destination (a
        ``placing`` view): a mirrored one's go back to the memory now, the rest untouched.
        False when they could not (counted): the memory is gone, and so is the message."""
        return self._push_destination(self.dirty.pop(id(view), None) if self.dirty else None, length)

    def _push_destination(self, entry: DirtyRange | None, length: int) -> bool:
        """``placed`` of the range a view was handed out for (None: not mirrored memory)."""
        if entry is None:
            return True
        if entry.known is not None:
            return self._push(entry)
        try:
            entry.memory.push(entry.start, min(length, entry.length))
        except OSError:
            self.counters["dma_errors"] += 1
            return False
        return True

    def placed_later(self, view: memoryview, length: int, refuse: Callable[[int], None], token: int) -> bool:
        """``placed``, written back by the next ``push_placed`` with what else was placed by then
        (one ``push_ranges`` a memory: 2-byte WRITEs between two C programs paid a system call
        each, ~a third of the shared NIC's engine)."""
        entry = self.dirty.pop(id(view), None) if self.dirty else None
        if entry is None or entry.known is not None:
            return self._push_destination(entry, length)
        start = entry.start
        self.unpushed.append((entry.memory, start, start + min(length, entry.length), refuse, token))
        return True

    def push_placed(self) -> None:
        """Write back what ``placed_later`` left, one ``push_ranges`` a memory, a range that
        touches or overlaps the one placed before it joining it (the mirror holds the latest
        bytes: a stream into one buffer, WRITEs again to one address). Every message placed in
        a range that cannot be written is refused, in the order they were placed (a QP's first
        is its NAK)."""
        unpushed = self.unpushed
        if not unpushed:
            return
        placed = list(unpushed)
        unpushed.clear()
        by_memory: dict[int, list[int]] = {}  # indexes into ``placed``, in order, by the memory's id
        for index, entry in enumerate(placed):
            by_memory.setdefault(id(entry[0]), []).append(index)
        refused: list[int] = []
        for indexes in by_memory.values():
            memory = placed[indexes[0]][0]
            ranges: list[tuple[int, int]] = []  # (offset, length)
            for index in indexes:
                _, start, end, _, _ = placed[index]
                if ranges:
                    first, length = ranges[-1]
                    if start <= first + length and first <= end:  # it touches or overlaps the last
                        low = min(first, start)
                        ranges[-1] = (low, max(first + length, end) - low)
                        continue
                ranges.append((start, end - start))
            failed = memory.push_ranges(ranges)
            if failed:  # (rare: the program unmapped its memory, or is gone)
                self.counters["dma_errors"] += len(failed)
                lost = [ranges[which] for which in failed]
                refused += (index for index in indexes
                            if any(first <= placed[index][1] < first + length for first, length in lost))  # fmt: skip
        for index in sorted(refused):
            _, _, _, refuse, token = placed[index]
            refuse(token)

    def _push(self, entry: DirtyRange) -> bool:
        """The range's changed bytes back to the memory; a push that fails is counted."""
        try:
            entry.push()
        except OSError:
            self.counters["dma_errors"] += 1
            return False
        return True

    def flush(self) -> None:
        """Push every dirty range whose view is still held: the engine calls it before it
        writes a CQE (a completion is never seen before its data) and at the end of each pass.
        A message's destination goes back when ``placed``, before its ACK or completion, or
        with the others ``placed_later`` left."""
        self.push_placed()
        for entry in list(self.dirty.values()):
            self._push(entry)
