"""Application threads hand work to the engine here, and wake its thread.

Drivers ring doorbells from any thread (a Python program's, a C program's, later a GPU
proxy's) while the engine may be running; they never touch the engine's work lists. A
doorbell is a QPN added to a set under this module's own small lock, and the engine takes
the whole set at the start of a pass. The wake-up is one byte in a pipe whose read end the
engine thread waits on, with a flag so a burst of doorbells writes one byte.

The order of a drain matters (a lost wake-up otherwise): the engine reads the pipe first and
only then clears the flag, under the lock, and takes the sets after that. A wake-up before
the clear finds the flag set and writes nothing, but its QPN is in the sets the engine takes
next; a wake-up after it writes a byte, so the engine's next wait returns at once. Nothing
relies on the GIL: the sets and the flag change only under the lock.
"""

from __future__ import annotations

import os
import threading


class Handoff:
    """Doorbells from the drivers to the engine: rung send queues, new receive WQEs, wake-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rung: set[int] = set()
        self._receives: set[int] = set()
        self._signalled = False  # a byte is in the pipe, or about to be
        self._closed = False  # after close, a late doorbell must not write into a reused fd
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        """The fd that becomes readable on ``wake`` (what the engine thread waits on)."""
        return self._read_fd

    def ring(self, qpn: int) -> None:
        """The QP's send doorbell record moved."""
        with self._lock:
            self._rung.add(qpn)

    def post_receives(self, qpn: int) -> None:
        """The QP's receive doorbell record moved."""
        with self._lock:
            self._receives.add(qpn)

    def wake(self) -> None:
        """Make the engine thread's wait return (one byte however many calls)."""
        with self._lock:
            if self._signalled or self._closed:
                return
            self._signalled = True
            try:
                os.write(self._write_fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full: it is readable, which is all a wake-up needs

    def drain(self) -> None:
        """The engine thread woke: empty the pipe, then let the next ``wake`` write again."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            self._signalled = False

    @property
    def pending(self) -> bool:
        """Whether doorbells wait to be taken (a hint for deciding how long to wait)."""
        return bool(self._rung or self._receives)

    def take(self) -> tuple[set[int], set[int]]:
        """The QPNs rung since the last take: (send queues, receive queues)."""
        with self._lock:
            if not (self._rung or self._receives):
                return _EMPTY, _EMPTY
            rung, receives = self._rung, self._receives
            self._rung, self._receives = set(), set()
            return rung, receives

    def close(self) -> None:
        with self._lock:
            self._closed = True
            os.close(self._read_fd)
            os.close(self._write_fd)


_EMPTY: set[int] = set()  # never written: ``take`` with nothing rung
