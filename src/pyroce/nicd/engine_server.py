"""One engine of a shared NIC after the first: a process that serves the programs the NIC's
service hands it (``nicd.engines``), with a device of its own on the NIC's address.

Its device binds the address as engine ``index`` of ``count`` (``link.steering``): the kernel
gives it the datagrams of its own QPs, and it numbers its QPs so. A program's connection comes
over the control pair before its hello and is then served here whole, as the service serves
its own (``nicd.session``: commands, shared memory, the program's memory, the data path),
except its rdma_cm commands, which go to the service's connection manager
(``nicd.cm_upstream``). The engine ends when the service says so or goes (the control pair
closes), closing its programs' connections as the service does when it stops.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
from typing import Any

from pyroce.link.steering import Steering
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import ProtocolError, receive, send
from pyroce.nicd.server import SessionLoop, open_nic_context
from pyroce.nicd.session import Session

log = logging.getLogger("pyroce.nicd")


class EngineServer(SessionLoop):
    """Engine ``steering.index``: the connections handed over on ``control``, and its device."""

    def __init__(self, place: NicPlace, steering: Steering, control: socket.socket) -> None:
        self.place = place
        self.index = steering.index
        self.control = control
        super().__init__(open_nic_context(place, steering))
        self.selector.register(control, selectors.EVENT_READ)
        send(control, ("ready", os.getpid()))

    def _ready(self, fileobj: Any) -> None:
        try:
            message = receive(self.control)
        except (OSError, ProtocolError) as exc:
            log.error("engine %d: the service's message: %s", self.index, exc)
            message = None
        if message is None or message.value[0] == "stop":
            self.stopping = True
            return
        if message.value[0] == "serve":
            sock = socket.socket(fileno=message.fds[0])
            self._add(Session(sock, self.place))
        elif message.value[0] == "status":
            send(self.control, ("status", {"index": self.index, "pid": os.getpid(), "programs": self._programs(),
                                           "qps": len(self.device.engine.qps)}))  # fmt: skip

    def _ended(self, session: Session, greeted: bool) -> None:
        try:
            send(self.control, ("gone", session.pid))
        except OSError:
            self.stopping = True  # the service is gone

    def close(self) -> None:
        super().close()
        self.control.close()
