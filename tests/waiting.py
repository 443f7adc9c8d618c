"""Deadlines for tests that spin until something happens, so a bug fails the test instead of hanging it."""

from __future__ import annotations

import selectors
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


def readable(fd: int, timeout_s: float) -> bool:
    """Whether a selector finds ``fd`` readable within ``timeout_s`` (0: now)."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout_s))
