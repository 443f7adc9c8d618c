"""RC endpoints whose NICs are models at the other end of the simulator bridge, for tests.

Each device is pyroce's engine served by ``bridge.model.serve_model`` in a thread of this
process, over a socketpair of its own; the verbs drive a ``RemoteNic`` on a ``Fabric`` that
carries the models' Ethernet frames and their simulated time. A model that fails is recorded
and fails the test when the models are closed (it must answer errors, never end on one).
"""

from __future__ import annotations

import socket
import threading

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.bridge.model import serve_model
from pyroce.bridge.remote_nic import Fabric, RemoteNic
from pyroce.verbs.device import Context
from tests.rc_pair import MR_SIZE, START_PSN


class Models:
    """Model servers in threads, each behind a ``RemoteNic`` on one ``fabric``."""

    def __init__(self) -> None:
        self.fabric = Fabric()
        self.nics: list[RemoteNic] = []
        self.threads: list[threading.Thread] = []
        self.failures: list[BaseException] = []

    def serve(self, sock: socket.socket, name: str, address: str) -> threading.Thread:
        """``serve_model`` on ``sock`` in a thread; what it raises is recorded."""

        def run() -> None:
            try:
                serve_model(sock, name, address)
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                self.failures.append(exc)

        thread = threading.Thread(target=run, name=f"model-{name}", daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def open(self) -> RemoteNic:
        """A new model (``bridge<n>`` at 10.0.0.<n+1>) and the RemoteNic on it."""
        number = len(self.threads)
        driver, model = socket.socketpair()
        self.serve(model, f"bridge{number}", f"10.0.0.{number + 1}")
        nic = RemoteNic(driver, self.fabric)
        self.nics.append(nic)
        return nic

    def endpoint(self, nic: RemoteNic | None = None, events: bool = False) -> RcEndpoint:
        """An RC endpoint (as ``tests.rc_pair``'s) on ``nic``, else on a new model; ``events``:
        its CQ reports to a completion channel."""
        return RcEndpoint.open(MR_SIZE, psn=START_PSN, context=Context(device=nic or self.open()), events=events)

    def pair(self, one_model: bool = False, events: bool = False, **connect: int) -> tuple[RcEndpoint, RcEndpoint]:
        """Two connected endpoints, each on a model of its own (their packets cross the driver
        side as frames) or, ``one_model``, both on one (the model's loopback carries them)."""
        a = self.endpoint(events=events)
        b = self.endpoint(self.nics[-1] if one_model else None, events)
        a.connect(b.info(), **connect)
        b.connect(a.info(), **connect)
        return a, b

    def close(self) -> None:
        """Hang up on every model; each must end cleanly, and none may have failed."""
        for nic in self.nics:
            nic.close()
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive(), f"{thread.name} did not end when its driver hung up"
        assert not self.failures, f"a model failed: {self.failures!r}"
