"""A process's device put together: the device model (``pyroce.nic``) and what its host gives it.

``build_device`` makes the parts that need threads, fds, clocks or files: the engine lock, the
event queues (``notify``), the hand-off of doorbells (``handoff``), who runs the engine
(``progress``) and the engine thread's idle work in the stats folder (``StatsFolder``), and
gives them to the ``Engine`` and the ``NicDevice``. ``registry`` builds pyroce0 so; a test or a
simulator builds devices on links of its own (``link.memory``, ``progress="host"``).
"""

from __future__ import annotations

import os
import threading
import time

from pyroce.host.capture_request import CaptureRequests
from pyroce.host.handoff import Handoff
from pyroce.host.notify import EventFdQueue, EventFdQueues
from pyroce.host.progress import Progress
from pyroce.host.stats_file import StatsFile
from pyroce.link.base import Link
from pyroce.link.faults import FaultConfig, FaultInjector
from pyroce.nic.device import NicDevice
from pyroce.nic.engine import MAX_EVENTS, Engine
from pyroce.nic.events import AsyncEvent
from pyroce.nic.port import Clock


def build_device(name: str, link: Link, *, verify_icrc: bool = True, progress: str = "inline",
                 faults: FaultConfig | None = None, stats_dir: str | None = None,
                 clock: Clock = time.monotonic) -> NicDevice:  # fmt: skip
    """Device ``name`` on ``link`` (which it owns and closes, also when this fails), its engine
    run per ``progress`` (``progress.MODES``) on ``clock``, its counters and capture requests
    in ``stats_dir`` if given."""
    queues: EventFdQueues[AsyncEvent] | None = None
    handoff = None
    try:  # nothing is left open when a step fails: the link is the device's from here on
        queues = EventFdQueues(MAX_EVENTS)
        injector = FaultInjector(faults) if faults is not None and faults.active else None
        engine = Engine(link, queues, verify_icrc=verify_icrc, faults=injector, clock=clock)
        handoff = Handoff()
        lock = threading.Lock()  # engine state: held by whoever runs the engine or a command
        runner = Progress(engine, handoff, lock, progress, clock, name)
        device = NicDevice(name, engine, lock=lock, doorbells=handoff, runner=runner, new_channel=EventFdQueue)
        runner.start(StatsFolder(device, stats_dir) if stats_dir else None)
    except BaseException:
        if handoff is not None:
            handoff.close()
        if queues is not None:
            queues.close_all()
        link.close()
        raise
    return device


class StatsFolder:
    """The engine thread's idle work in the stats folder: the device's counters file
    (``stats_file``, ``pyroce stats`` reads it) and the captures another process asks for
    (``capture_request``)."""

    def __init__(self, device: NicDevice, directory: str) -> None:
        self._device = device
        self._stats_file = StatsFile(directory, device.name)
        self._capture_requests = CaptureRequests(directory, device.name, lambda sink: device.start_capture(sink=sink),
                                                 device.stop_capture)  # fmt: skip

    def __call__(self, now: float) -> None:
        """After an engine-thread pass: serve capture requests, and publish the counters when
        it is time."""
        self._capture_requests.poll(now)
        stats_file = self._stats_file
        if not stats_file.due(now):
            return
        stats_file.write(self._document, now)

    def _document(self) -> dict[str, object]:
        device = self._device
        counters, qps = device.stats_snapshot()
        steering = device.engine.port.steering  # one engine of a shared NIC's several: which
        engine = None if steering is None else {"index": steering.index, "of": steering.engines}
        return {"device": device.name, "address": device.address, "pid": os.getpid(), "engine": engine,
                "counters": counters,
                "qps": {f"0x{qpn:x}": qp for qpn, qp in qps.items()},
                "owners": {f"0x{qpn:x}": pid for qpn, pid in dict(device.qp_owners).items()}}  # fmt: skip

    def close(self) -> None:
        """The engine thread has stopped: the capture ends and the counters file goes."""
        self._capture_requests.close()
        self._stats_file.remove()
