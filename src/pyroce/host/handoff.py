"""Application threads hand work to the engine here, and wake its thread.

Drivers ring doorbells from any thread (a Python program's, a C program's, later a GPU
proxy's) while the engine may be running; they never touch the engine's work lists. A
doorbell is a QPN added to a set under this module's own small lock, and the engine takes
the whole set at the start of a pass. The wake-up is a record in a pipe whose read end the
engine thread waits on, with a flag so a burst of doorbells writes one record.

A driver that holds no GIL (the C library, ``pyroce.driver``) cannot take that lock: it rings
by writing one 4-byte record (native byte order) to ``doorbell_fd``, the pipe's write end:
``SEND_DOORBELL | qpn`` or ``RECV_DOORBELL | qpn``. A pipe write of 4 bytes is atomic, so
records from many threads never interleave, and the write is itself the wake-up. The
engine thread's drain turns the records into the same sets; a plain wake-up is the record 0.

The order of a drain matters (a lost wake-up otherwise): the engine reads the pipe first and
only then clears the flag, under the lock, and takes the sets after that. A wake-up before
the clear finds the flag set and writes nothing, but its QPN is in the sets the engine takes
next; a wake-up after it writes a record, so the engine's next wait returns at once. A
record written after the read stays in the pipe, which the next wait finds readable. Nothing
relies on the GIL: the sets and the flag change only under the lock.
"""

from __future__ import annotations

import os
import threading
from typing import Final

RECORD_SIZE: Final = 4  # bytes of one record in the wake-up pipe (a native-order u32)
SEND_DOORBELL: Final = 1 << 24  # the QP's send doorbell record moved
RECV_DOORBELL: Final = 2 << 24  # the QP's receive doorbell record moved
QPN_MASK: Final = 0xFFFFFF
_WAKE: Final = bytes(RECORD_SIZE)  # the record of a plain wake-up
_READ_SIZE: Final = 65536  # bytes a drain asks of the pipe at a time (its default capacity)


class Handoff:
    """Doorbells from the drivers to the engine: rung send queues, new receive WQEs, wake-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()  # one drain reads the pipe at a time
        self._rung: set[int] = set()
        self._receives: set[int] = set()
        self._signalled = False  # a record is in the pipe, or about to be
        # Whether doorbells wait to be taken: a hint read without the lock (a pass that misses
        # one takes it on the next), so a pass with none makes no call to ``take``
        self.pending = False
        self._closed = False  # after close, a late doorbell must not write into a reused fd
        self._partial = b""  # the start of a record a read split (never expected: writes are atomic)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        """The fd that becomes readable on ``wake`` (what the engine thread waits on)."""
        return self._read_fd

    @property
    def doorbell_fd(self) -> int:
        """The pipe's write end, where a driver without the GIL writes its doorbell records
        (non-blocking: on EAGAIN it waits for the fd to be writable and writes again)."""
        return self._write_fd

    # ``ring``, ``post_receives`` and ``take`` run per message: they take the lock with
    # ``acquire`` and ``release`` (nothing in them raises), where compiled code would look up
    # and call a ``with``'s ``__enter__`` and ``__exit__`` generically (~1 100 instructions,
    # twice the two calls)

    def ring(self, qpn: int) -> None:
        """The QP's send doorbell record moved."""
        self._lock.acquire()
        self._rung.add(qpn)
        self.pending = True
        self._lock.release()

    def post_receives(self, qpn: int) -> None:
        """The QP's receive doorbell record moved."""
        self._lock.acquire()
        self._receives.add(qpn)
        self.pending = True
        self._lock.release()

    def wake(self) -> None:
        """Make the engine thread's wait return (one record however many calls)."""
        with self._lock:
            if self._signalled or self._closed:
                return
            self._signalled = True
            try:
                os.write(self._write_fd, _WAKE)
            except BlockingIOError:
                pass  # the pipe is full: it is readable, which is all a wake-up needs

    def drain(self) -> None:
        """Empty the pipe (its doorbell records join the sets), then let the next ``wake`` write
        again: the engine thread when it wakes, or a command that must see every doorbell rung
        before it (destroying a QP). Drains take turns reading, so none splits another's record."""
        with self._read_lock:
            chunks = [self._partial]
            try:
                # A pipe read returns all it holds up to the size asked: a shorter read emptied
                # it (no second read to fail with EAGAIN: its exception cost 2 µs a wake-up)
                while len(chunk := os.read(self._read_fd, _READ_SIZE)) == _READ_SIZE:
                    chunks.append(chunk)
                chunks.append(chunk)
            except BlockingIOError:
                pass
            data = b"".join(chunks)
            whole = len(data) - len(data) % RECORD_SIZE
            self._partial = data[whole:]
            records = [record for record in memoryview(data[:whole]).cast("I") if record] if whole else []
            with self._lock:
                for record in records:
                    if record & SEND_DOORBELL:
                        self._rung.add(record & QPN_MASK)
                    if record & RECV_DOORBELL:
                        self._receives.add(record & QPN_MASK)
                self.pending = bool(self._rung or self._receives)
                self._signalled = False

    def take(self) -> tuple[set[int], set[int]]:
        """The QPNs rung since the last take: (send queues, receive queues)."""
        self._lock.acquire()
        rung, receives = self._rung, self._receives
        if rung or receives:
            self._rung, self._receives = set(), set()
        else:
            rung = receives = _EMPTY
        self.pending = False
        self._lock.release()
        return rung, receives

    def close(self) -> None:
        with self._lock:
            self._closed = True
            os.close(self._read_fd)
            os.close(self._write_fd)


_EMPTY: Final[set[int]] = set()  # never written: ``take`` with nothing rung
