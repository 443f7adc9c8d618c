"""A running device's counters in a file, where ``pyroce stats`` reads them (as rxe's
``hw_counters`` are read from sysfs)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable

PUBLISH_EVERY_S = 1.0  # how often the engine thread writes its counters, at most
# ... and the share of its time that writing them may take: a device of 10 000 QPs spent ~0.1 s
# a write (every QP's counters summed, copied and encoded, under the engine lock and the GIL),
# which made the counters file a sixth of a busy sender's CPU; it writes less often instead
PUBLISH_SHARE = 0.01
SUMMARY_COUNTERS = ("sent_pkts", "rcvd_pkts", "icrc_errors", "retransmitted_pkts", "drop_wrong_source")


def summary_line(device: str, counters: dict[str, int]) -> str:
    """``pyroce0 counters: sent_pkts N, ...``: the counters an interop run checks, zeros included
    (a pingpong tool's ``--stats`` and ``PYROCE_PRINT_STATS`` print it)."""
    return f"{device} counters: " + ", ".join(f"{name} {counters.get(name, 0)}" for name in SUMMARY_COUNTERS)


def device_path(directory: str, pid: int, device: str, suffix: str) -> str:
    """``<dir>/<pid>-<device><suffix>``: the files of one process's device in the stats folder."""
    return os.path.join(directory, f"{pid}-{device}{suffix}")


def replace_json(path: str, document: object) -> None:
    """Write ``document`` to ``path`` whole (a reader never sees half of it); raises OSError."""
    partial = path + ".tmp"
    with open(partial, "w") as handle:
        # encoded whole first: ``json.dump`` encodes in pieces through the interpreted encoder,
        # ~3.5 x slower (the counters file of 10 000 QPs: 42 against 12 ms, in the engine thread)
        handle.write(json.dumps(document))
    os.replace(partial, path)


class StatsFile:
    """``<dir>/<pid>-<device>.json``, replaced whole on each write and removed on close."""

    def __init__(self, directory: str, device: str) -> None:
        self.path: str | None = device_path(directory, os.getpid(), device, ".json")
        self.written_at = float("-inf")
        self.interval = PUBLISH_EVERY_S  # until the next write: longer when a write costs more

    def due(self, now: float) -> bool:
        return self.path is not None and now - self.written_at >= self.interval

    def write(self, document: Callable[[], dict[str, object]], now: float) -> None:
        """Write what ``document`` makes; the next write is due after ``PUBLISH_EVERY_S``, or
        later, so that making and writing it stay within ``PUBLISH_SHARE`` of the time."""
        self.written_at = now
        if self.path is None:
            return
        started = time.perf_counter()
        try:
            replace_json(self.path, document())
        except OSError:
            self.path = None  # nowhere to write: stop trying
        self.interval = max(PUBLISH_EVERY_S, (time.perf_counter() - started) / PUBLISH_SHARE)

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
