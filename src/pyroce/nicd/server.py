"""The shared NIC's service: it listens at its place (``nicd.place``), answers each driver's
commands on its connection (``nicd.session``) and runs the device's engine thread meanwhile.

One thread serves every connection, one request at a time: a command is short (no command
waits: a driver waits for events on their descriptors, and takes them with a command), and the
engine thread moves all data meanwhile, as the kernel's rxe does in softirq. The service stops
when asked (``stop``, from ``pyroce nicd --stop``), on SIGTERM or SIGINT, or once no driver has
been connected for ``idle`` seconds.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import time

from pyroce.host.registry import LinkError
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import ProtocolError, receive, send
from pyroce.nicd.session import Session
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsError

log = logging.getLogger("pyroce.nicd")

DEFAULT_IDLE_S = 60.0


class NicBusy(Exception):
    """Another shared NIC already serves this place."""


class NicServer:
    """The listening socket, the connections and the device they share."""

    def __init__(self, place: NicPlace, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.place = place
        self.idle_s = idle_s
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            self.listener.bind(place.socket_name)
        except OSError as exc:
            self.listener.close()
            if exc.errno == errno.EADDRINUSE:
                raise NicBusy(f"a shared NIC already serves {place.describe()}") from None
            raise
        self.listener.listen(64)
        # The device is opened (its address bound, its engine thread started) before the first
        # driver comes, and held while the service runs: a driver's failure to bind is this one's.
        os.environ["PYROCE_ADDR"] = place.address
        os.environ["PYROCE_NIC"] = "own"  # this process is the NIC: its Contexts are on its own device
        try:
            self.context = Context(name=place.device, progress="thread")
        except PyverbsError:
            self.listener.close()
            raise
        self.device = self.context.device
        self.sessions: dict[int, Session] = {}
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector.register(self._wake_read, selectors.EVENT_READ)
        self.stopping = False
        self.idle_since = time.monotonic()

    def serve(self) -> None:
        """Serve until stopped or idle."""
        log.info("serving %s (engine pid %d, counters in %s)", self.place.describe(), os.getpid(), self.place.folder)
        try:
            while not self.stopping:
                timeout = None
                if not self._programs() and self.idle_s > 0:
                    timeout = self.idle_since + self.idle_s - time.monotonic()
                    if timeout <= 0:
                        log.info("no program for %.0f s: stopping", self.idle_s)
                        break
                for key, _ in self.selector.select(timeout):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj == self._wake_read:
                        continue  # stop() was asked: the loop's test ends it
                    else:
                        self._serve(key.fileobj)  # type: ignore[arg-type]
        finally:
            self.close()

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        session = Session(sock)
        if session.uid != os.getuid():
            log.warning("pid %d of uid %d refused: this NIC serves uid %d", session.pid, session.uid, os.getuid())
            session.close()
            return
        self.sessions[session.fileno()] = session
        self.selector.register(session, selectors.EVENT_READ)

    def _programs(self) -> int:
        """Connections of drivers (greeted), not of ``--stop``/``--status`` or not yet known."""
        return sum(session.greeted for session in self.sessions.values())

    def _serve(self, session: Session) -> None:
        if not session.greeted and self._control(session):
            return
        was_greeted = session.greeted
        if session.serve_one():
            if session.greeted and not was_greeted:
                log.info("pid %d connected", session.pid)
            if session.greeted:
                return
        self._drop(session)

    def _control(self, session: Session) -> bool:
        """The first message of a connection from ``pyroce nicd --stop``/``--status``, answered
        here (True); False for a driver's greeting, which its session answers."""
        try:
            message = receive(session.sock, peek=True)
        except (OSError, ProtocolError):
            message = None
        request = message.value if message is not None else None
        if not (isinstance(request, tuple) and request[:1] in (("stop",), ("status",))):
            return False
        receive(session.sock)
        if request[0] == "stop":
            log.info("stop asked by pid %d", session.pid)
            send(session.sock, ("ok", os.getpid()))
            self.stop()
        else:
            send(session.sock, ("ok", self.status()))
        self._drop(session)
        return True

    def _drop(self, session: Session) -> None:
        self.selector.unregister(session)
        del self.sessions[session.fileno()]
        greeted = session.greeted
        left = session.close()
        if not greeted:
            return
        gone = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items())) or "nothing"
        log.info("pid %d gone: destroyed what it left: %s", session.pid, gone)
        if not self._programs():
            self.idle_since = time.monotonic()

    def stop(self) -> None:
        """End ``serve`` at its next turn; safe from a signal handler (one flag, one byte)."""
        self.stopping = True
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass

    def status(self) -> dict[str, object]:
        return {"pid": os.getpid(), "device": self.place.device, "address": self.place.address,
                "programs": sorted(session.pid for session in self.sessions.values() if session.greeted),
                "qps": len(self.device.engine.qps)}  # fmt: skip

    def close(self) -> None:
        for session in list(self.sessions.values()):
            self.selector.unregister(session)
            session.close()
        self.sessions.clear()
        self.selector.close()
        self.listener.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        if not self.context.closed:
            self.context.close()


def open_server(place: NicPlace, idle_s: float = DEFAULT_IDLE_S) -> NicServer:
    """A server for ``place``: ``NicBusy`` if one runs, ``LinkError`` if its address cannot be bound."""
    try:
        return NicServer(place, idle_s)
    except PyverbsError as exc:
        raise LinkError(getattr(exc, "error_code", errno.EIO), str(exc)) from None
