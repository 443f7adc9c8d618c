"""Simulated time for NICs in host mode, the one rule the simulators share (``sim.corpus``, the
bridge's ``Fabric``): while any device has work or a frame is on its way, time moves by
``STEP_S``; when none has, it jumps to the earliest deadline, so an RNR wait or a timeout costs
no steps."""

from __future__ import annotations

from collections.abc import Iterable

STEP_S = 1e-6


def next_time(now: float, busy: bool, deadlines: Iterable[float | None]) -> float:
    """The time of the next step after ``now``."""
    if busy:
        return now + STEP_S
    due = [deadline for deadline in deadlines if deadline is not None]
    return max(now + STEP_S, min(due, default=now + STEP_S))
