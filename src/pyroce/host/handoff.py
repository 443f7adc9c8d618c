"""Application threads hand work to the engine here, and wake its thread.

Drivers ring doorbells from any thread (a Python program's, a C program's, later a GPU
proxy's) while the engine may be running; they never touch the engine's work lists. A
doorbell is a record appended to a queue (a ``collections.deque``, whose appends and pops are
thread-safe: no lock, which cost ~860 instructions a doorbell and a take, compiled), and the
engine takes what is queued at the start of a pass. The wake-up is a record in a pipe whose
read end the engine thread waits on, with a flag so a burst of doorbells writes one record.

A driver that holds no GIL (the C library, ``pyroce.driver``) cannot append to a queue: it rings
by writing one 4-byte record (native byte order) to ``doorbell_fd``, the pipe's write end:
``SEND_DOORBELL | qpn`` or ``RECV_DOORBELL | qpn``. A pipe write of 4 bytes is atomic, so
records from many threads never interleave, and the write is itself the wake-up. The
engine thread's drain appends them to the same queue; a plain wake-up is the record 0.

The order of a drain matters (a lost wake-up otherwise): the engine reads the pipe first and
only then clears the flag, under the lock, and takes the queue after that. A doorbell
appends its record before it wakes: a wake-up before the clear finds the flag set and writes
nothing, but its record is in the queue the engine takes next; a wake-up after it writes a
record, so the engine's next wait returns at once. A record written after the read stays in
the pipe, which the next wait finds readable. ``pending`` is a hint set after the append and
cleared before a take pops: a record is never left behind with the hint down (at worst a
take finds nothing). Nothing relies on the GIL: the queue is thread-safe, the flag changes
only under the lock.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from typing import Final

from pyroce.nic.engine import RECV_DOORBELL, SEND_DOORBELL

RECORD_SIZE: Final = 4  # bytes of one record in the wake-up pipe (a native-order u32)
_WAKE: Final = bytes(RECORD_SIZE)  # the record of a plain wake-up
_READ_SIZE: Final = 65536  # bytes a drain asks of the pipe at a time (its default capacity)


class Handoff:
    """Doorbells from the drivers to the engine: rung send queues, new receive WQEs, wake-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the wake-up's flag and the pipe's closing
        self._read_lock = threading.Lock()  # one drain reads the pipe at a time
        self._records: deque[int] = deque()  # doorbell records, as the pipe carries them
        self._signalled = False  # a record is in the pipe, or about to be
        # Whether doorbells wait to be taken: a hint read without the lock (a pass that misses
        # one takes it on the next), so a pass with none makes no call to ``take``
        self.pending = False
        self._closed = False  # after close, a late doorbell must not write into a reused fd
        self._partial = b""  # the start of a record a read split (never expected: writes are atomic)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._readable = select.poll()
        self._readable.register(self._read_fd, select.POLLIN)

    def fileno(self) -> int:
        """The fd that becomes readable on ``wake`` (what the engine thread waits on)."""
        return self._read_fd

    @property
    def doorbell_fd(self) -> int:
        """The pipe's write end, where a driver without the GIL writes its doorbell records
        (non-blocking: on EAGAIN it waits for the fd to be writable and writes again)."""
        return self._write_fd

    def ring(self, qpn: int) -> None:
        """The QP's send doorbell record moved."""
        self._records.append(SEND_DOORBELL | qpn)
        self.pending = True

    def post_receives(self, qpn: int) -> None:
        """The QP's receive doorbell record moved."""
        self._records.append(RECV_DOORBELL | qpn)
        self.pending = True

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

    def drain(self, readable: bool | None = None) -> None:
        """Empty the pipe (its doorbell records join the queue ``take`` pops), then let the next ``wake`` write
        again: the engine thread when it wakes, or a command that must see every doorbell rung
        before it (destroying a QP). Drains take turns reading, so none splits another's record.
        ``readable``: what the caller's ``select`` said of the pipe (a record written since
        stays for the next), None if it did not look: then a poll asks, as a read of an empty
        pipe raises (with its message: 7% of a receiving engine thread under 64 KiB WRITEs)."""
        with self._read_lock:
            if readable or (readable is None and self._readable.poll(0)):
                self._read()
            with self._lock:
                self._signalled = False

    def _read(self) -> None:
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
        if records:
            self._records.extend(records)
            self.pending = True

    def take(self) -> list[int]:
        """The doorbell records queued since the last take, oldest first (``Engine.doorbells``
        reads them). The queue is popped, not swapped for an empty one: a doorbell that read
        the old one and appended after the swap would be lost."""
        self.pending = False
        records = self._records
        taken: list[int] = []
        while records:
            taken.append(records.popleft())
        return taken

    def close(self) -> None:
        with self._lock:
            self._closed = True
            os.close(self._read_fd)
            os.close(self._write_fd)
