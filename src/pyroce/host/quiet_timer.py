"""A deadline the polling program keeps pushing back: a Linux ``timerfd`` (docs/architecture.md,
"Progress model").

While an inline program polls, its engine thread stands back. It used to wake every grace
(2 ms) to see whether the program still polled, and each wake took the GIL from the polling
thread for a hand-over the poller then waited out (the SEND row's slow rounds came every 2 ms).
Now the program re-arms this timer as it polls and the engine thread sleeps on its descriptor,
holding no GIL: it wakes only when the program has stopped pushing the deadline back.
``timerfd_create`` is not in Python's ``os`` before 3.13, hence ``ctypes``."""

from __future__ import annotations

import ctypes
import os
import select
from typing import Final

CLOCK_MONOTONIC: Final = 1
TFD_NONBLOCK: Final = os.O_NONBLOCK
TFD_CLOEXEC: Final = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)
_timerfd_create = _libc.timerfd_create
_timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
_timerfd_create.restype = ctypes.c_int
_timerfd_settime = _libc.timerfd_settime
_timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
_timerfd_settime.restype = ctypes.c_int


class QuietTimer:
    """A one-shot monotonic timer whose descriptor turns readable when it fires."""

    def __init__(self) -> None:
        fd = _timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._spec = _Itimerspec()  # reused: arming allocates nothing

    def arm(self, seconds: float) -> None:
        """Fire ``seconds`` from now (replacing any earlier deadline, and a firing not yet read); a
        zero would disarm the timer, so it is a nanosecond."""
        value = self._spec.it_value
        whole = int(seconds)
        nanoseconds = int((seconds - whole) * 1e9)
        value.tv_sec = whole
        value.tv_nsec = nanoseconds if whole or nanoseconds else 1
        _timerfd_settime(self._fd, 0, self._spec, None)

    def fire(self) -> None:
        """Fire now: the waiting thread looks at once."""
        self.arm(0.0)

    def wait(self, timeout: float) -> bool:
        """Sleep (no GIL held) until the timer fires or ``timeout`` passes; whether it fired.
        The firing is consumed, so the next wait sleeps until the next one."""
        readable, _, _ = select.select([self._fd], [], [], timeout)
        if not readable:
            return False
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return False  # re-armed between the select and the read: it has not fired after all
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
