"""A progress line for long runs, on a terminal only.

It goes to stderr and only when stderr is a terminal, rewritten in place at most every
``EVERY_S``, and erased before the final report, so the report stays the last thing shown
(as perftest's table) and piped or captured output has no progress in it at all.
"""

from __future__ import annotations

import time
from typing import TextIO

EVERY_S = 0.1


class Progress:
    """``update(text)`` shows ``text`` on the terminal; ``clear()`` erases it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.shown = False
        self.shown_at = float("-inf")

    def update(self, text: str) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.shown_at < EVERY_S:
            return
        self.shown_at = now
        self.shown = True
        self.stream.write(f"\r{text}\x1b[K")
        self.stream.flush()

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
