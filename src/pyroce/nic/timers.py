"""The engine's transport deadlines: at most one per QP, so their number is bounded by the QPs.

A QP's deadline moves with every ACK (the local ACK timer restarts on progress). A heap
gives the next deadline cheaply, but replacing an entry in it is not; so ``arm`` records the
QP's current deadline and pushes a new entry, and an entry whose deadline is no longer its
QP's is stale: skipped when it reaches the top, and swept out whenever stale entries would
outnumber the live ones. The heap then never holds more than about twice the QPs with a
timer armed, however long the traffic runs.
"""

from __future__ import annotations

from collections.abc import Hashable
from heapq import heapify, heappop, heappush  # module globals: compiled, ``heapq.x`` is a generic lookup
from typing import Final, Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
SWEEP_SLACK: Final = 64  # stale entries tolerated beyond the live ones before a sweep


class Timers(Generic[Key]):
    """One optional deadline per key (a QP): ``arm``, ``cancel``, ``due``, ``next_deadline``."""

    def __init__(self) -> None:
        self.deadlines: dict[Key, float] = {}  # each key's live deadline (read by anyone, changed by ``arm`` only)
        self.heap: list[
            tuple[float, int, Key]
        ] = []  # (deadline, order, key); some stale: its top is no later than the next deadline
        self._order = 0  # the last entry's order (ties between equal deadlines go first in, first out)

    def __len__(self) -> int:
        """Entries held, stale ones included (what the bound is about)."""
        return len(self.heap)

    def armed(self) -> int:
        return len(self.deadlines)

    def arm(self, key: Key, deadline: float | None) -> None:
        """``key``'s deadline is now ``deadline`` (None: no timer)."""
        if deadline is None:  # cancelled here, not through ``cancel``: this runs per engine pass
            if self.deadlines.pop(key, None) is not None and len(self.heap) > 2 * len(self.deadlines) + SWEEP_SLACK:
                self._sweep()
            return
        if self.deadlines.get(key) == deadline:
            return
        self.deadlines[key] = deadline
        self._order += 1
        heappush(self.heap, (deadline, self._order, key))
        if len(self.heap) > 2 * len(self.deadlines) + SWEEP_SLACK:
            self._sweep()

    def cancel(self, key: Key) -> None:
        self.arm(key, None)

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or None."""
        heap = self.heap
        while heap and self.deadlines.get(heap[0][2]) != heap[0][0]:
            heappop(heap)  # stale: its key's deadline moved or was cancelled
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[Key]:
        """The keys whose deadline has come (each disarmed), earliest first."""
        keys: list[Key] = []
        heap, live = self.heap, self.deadlines
        while heap and heap[0][0] <= now:
            deadline, _, key = heappop(heap)
            if live.get(key) == deadline:
                del live[key]
                keys.append(key)
        return keys

    def _sweep(self) -> None:
        live = self.deadlines
        self.heap = [entry for entry in self.heap if live.get(entry[2]) == entry[0]]
        heapify(self.heap)
