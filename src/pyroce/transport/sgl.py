"""A scatter/gather list resolved to memory views: a message's bytes spread over SGEs.

Views come from the ``MemoryTable`` (already checked), so reads and writes here can only
touch registered memory. A slice that falls inside one SGE is returned as a view (no copy).
"""

from __future__ import annotations

from itertools import accumulate

from pyroce.transport.memory import MemFault, MemoryTable
from pyroce.transport.work import Sge
from pyroce.wire.icrc import MEMORYVIEW


class ScatterGather:
    __slots__ = ("length", "starts", "views")

    def __init__(self, views: list[memoryview]) -> None:
        self.views = views
        self.starts = [0, len(views[0])] if len(views) == 1 else [0, *accumulate(len(v) for v in views)]
        self.length = self.starts[-1]

    @staticmethod
    def resolve(memory: MemoryTable, sges: tuple[Sge, ...], access: int, pdn: int,
                placing: bool = False) -> ScatterGather | MemFault:  # fmt: skip
        """Check every SGE against the memory table; the first refusal is returned.
        ``placing``: a message's destination, handed back with ``placed`` (``MemoryTable.lookup``).
        (A static method naming its class: compiled, ``cls(views)`` was a generic call.)"""
        views = []
        for sge in sges:
            view = memory.lookup(sge.lkey, sge.addr, sge.length, access, pdn, placing)
            if isinstance(view, MemFault):
                return view
            if sge.length:
                views.append(view)
        return ScatterGather(views)

    def one_view(self) -> memoryview | None:
        """The message's memory as one view when it is one SGE: a run of packets is then
        placed by slices of it, with no SGE located per packet (``write``); else None."""
        return self.views[0] if len(self.views) == 1 else None

    def placed(self, memory: MemoryTable, length: int) -> bool:
        """The message's first ``length`` bytes are in place: each SGE's part handed back;
        False if any could not reach the memory (``MemoryTable.placed``)."""
        reached = True
        for view, start in zip(self.views, self.starts):
            if start >= length:
                break
            reached = memory.placed(view, min(len(view), length - start)) and reached
        return reached

    def _locate(self, offset: int) -> int:
        index = 0
        starts = self.starts
        while starts[index + 1] <= offset:
            index += 1
        return index

    def read(self, offset: int, length: int) -> memoryview | bytes:
        """``length`` bytes from message offset ``offset`` (caller keeps it within ``length``)."""
        if length == 0:
            return b""
        index = 0 if offset < self.starts[1] else self._locate(offset)  # most often in the first SGE
        start = offset - self.starts[index]
        view = self.views[index]
        if start + length <= len(view):
            return view[start : start + length]
        parts = []
        while length:
            take = min(length, len(view) - start)
            parts.append(view[start : start + take])
            length -= take
            index += 1
            if length:
                view, start = self.views[index], 0
        return b"".join(parts)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Place ``data`` at message offset ``offset`` (caller keeps it within ``length``)."""
        length = len(data)
        if length == 0:
            return
        source = MEMORYVIEW(data)
        index = 0 if offset < self.starts[1] else self._locate(offset)  # most often in the first SGE
        start = offset - self.starts[index]
        done = 0
        while done < length:
            view = self.views[index]
            take = min(length - done, len(view) - start)
            view[start : start + take] = source[done : done + take]
            done += take
            index += 1
            start = 0
