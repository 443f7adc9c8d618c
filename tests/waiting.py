"""Deadlines for tests that spin until something happens, so a bug fails the test instead of hanging it."""

from __future__ import annotations

import time
from collections.abc import Callable

DEADLINE_S = 10.0


def spin_until(done: Callable[[], bool], what: str, spin: Callable[[], object] = lambda: None,
               timeout_s: float = DEADLINE_S) -> None:  # fmt: skip
    """Call ``spin`` (e.g. ``device.kick``) until ``done()``; ``AssertionError`` saying ``what`` was
    awaited if ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        spin()
