"""Capturing a running device's traffic from another process (``pyroce capture``), through the
stats folder where ``pyroce stats`` finds the devices (``host.stats_file``).

Each process has its own pyroce0 and engine, so a tool cannot record its packets; it asks:
- the tool writes ``<pid>-<device>.capture`` (``{"path": pcap, "count": N or null}``), whole;
- the device's engine thread looks for it on its idle path every ``CHECK_EVERY_S`` (never per
  packet), opens the pcap itself and streams every frame it sends and receives into it
  (``host.capture_stream``), then writes ``<pid>-<device>.capture-state``: ``{"state":
  "capturing"}``, ``"done"`` after N frames, or ``"failed"`` with an ``"error"``;
- the tool removes the request when it is done (count, timeout, Ctrl-C); the device stops at
  its next look and removes the state file, which tells the tool the pcap is complete.

Security: the stats folder is made per user with mode 0700, and a device acts only on a
request file owned by its own user; the pcap is written by the device's process, with its
rights, wherever the request names.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from pyroce.host.capture_stream import PcapSink
from pyroce.host.stats_file import device_path, replace_json
from pyroce.nic.capture import FrameSink

CHECK_EVERY_S = 0.25  # how often the engine thread looks for a request


class CaptureFiles(NamedTuple):
    """The two files of one device's rendezvous."""

    request: str  # written and removed by the tool
    state: str  # written and removed by the device

    @classmethod
    def of(cls, directory: str, pid: int, device: str) -> CaptureFiles:
        return cls(device_path(directory, pid, device, ".capture"),
                   device_path(directory, pid, device, ".capture-state"))  # fmt: skip

    def request_capture(self, pcap: str, count: int | None) -> None:
        """The tool's side: ask for ``count`` frames (None: until withdrawn) into ``pcap``."""
        replace_json(self.request, {"path": pcap, "count": count})

    def withdraw(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.request)

    def read_state(self) -> dict[str, Any] | None:
        """The device's answer; None before it answers and after it has stopped."""
        try:
            with open(self.state) as handle:
                return dict(json.load(handle))
        except (OSError, ValueError):
            return None


class CaptureRequests:
    """The device's side: serves the request found in the stats folder, ``start`` and ``stop``
    being its ``start_capture(sink=...)`` and ``stop_capture``. Runs on the engine thread."""

    def __init__(self, directory: str, device: str, start: Callable[[FrameSink], object],
                 stop: Callable[[], None]) -> None:  # fmt: skip
        self.files = CaptureFiles.of(directory, os.getpid(), device)
        self._start = start
        self._stop = stop
        self._checked_at = float("-inf")
        self._served: tuple[int, int] | None = None  # (inode, mtime) of the request served
        self._sink: PcapSink | None = None

    def poll(self, now: float) -> None:
        """Start, finish or stop the capture as the request file says."""
        sink = self._sink
        if now - self._checked_at < CHECK_EVERY_S and (sink is None or not sink.full):
            return
        self._checked_at = now
        try:
            found = os.stat(self.files.request)
        except OSError:
            found = None
        ident = None if found is None or found.st_uid != os.getuid() else (found.st_ino, found.st_mtime_ns)
        if ident != self._served:
            self.close()
            if ident is not None:
                self._served = ident
                self._begin()
        elif sink is not None and sink.full:
            self._end()
            self._answer({"state": "failed", "error": sink.failure} if sink.failure else {"state": "done"})

    def close(self) -> None:
        """Stop capturing and withdraw the answer (the device closes, or the request went)."""
        self._end()
        self._served = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.files.state)

    def _begin(self) -> None:
        try:
            with open(self.files.request) as handle:
                request = json.load(handle)
            self._sink = PcapSink(str(request["path"]), request.get("count"))
        except OSError as exc:
            self._answer({"state": "failed", "error": f"{exc.filename}: {exc.strerror}"})
            return
        except (ValueError, KeyError, TypeError):
            self._answer({"state": "failed", "error": f"{self.files.request}: not a capture request"})
            return
        self._start(self._sink)
        self._answer({"state": "capturing"})

    def _end(self) -> None:
        if self._sink is not None:
            self._stop()
            self._sink.close()
            self._sink = None

    def _answer(self, state: dict[str, str]) -> None:
        with contextlib.suppress(OSError):
            replace_json(self.files.state, state)
