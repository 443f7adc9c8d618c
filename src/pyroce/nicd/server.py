"""The shared NIC's service: it listens at its place (``nicd.place``), answers each driver's
commands on its connection (``nicd.session``) and runs the device's engine thread meanwhile.

One thread serves every connection, one request at a time: a command is short (no command
waits: a driver waits for events on their descriptors, and takes them with a command), and the
engine thread moves all data meanwhile, as the kernel's rxe does in softirq. With more than one
engine (``engines``), the service is engine 0: it keeps the connection manager and the
programs it is given, and hands the others' connections, before their hello, to engine
processes of its own (``nicd.engines``). The service stops when asked (``stop``, from ``pyroce
nicd --stop``), on SIGTERM or SIGINT, or once no driver has been connected for ``idle`` seconds.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import socket
import time
from typing import Any, NamedTuple

from pyroce.host.registry import ENGINE_VARIABLE, LinkError
from pyroce.link.steering import Steering
from pyroce.nicd.engines import STATUS_WAIT_S, EngineProcess, Engines
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import ProtocolError, receive, send
from pyroce.nicd.session import Session, peer_credentials
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsError

log = logging.getLogger("pyroce.nicd")

DEFAULT_IDLE_S = 60.0


class NicBusy(Exception):
    """Another shared NIC already serves this place, or its address."""


def open_nic_context(place: NicPlace, steering: Steering | None) -> Context:
    """The device this process runs as the NIC (its address bound, its engine thread started):
    engine ``steering.index`` of several, or the only one."""
    os.environ["PYROCE_ADDR"] = place.address
    os.environ["PYROCE_NIC"] = "own"  # this process is the NIC: its Contexts are on its own device
    if steering is None:
        os.environ.pop(ENGINE_VARIABLE, None)
    else:
        os.environ[ENGINE_VARIABLE] = f"{steering.index}/{steering.engines}"
    return Context(name=place.device, progress="thread")


class StatusAsked(NamedTuple):
    """A ``pyroce nicd --status`` waiting for the engines' answers: each engine with the count
    of its answers that includes this one's (``EngineProcess.ask_status``)."""

    sock: socket.socket
    waits: list[tuple[EngineProcess, int]]
    deadline: float


STATUS_TURN_S = 0.001  # the shortest turn while a ``status`` waits


class SessionLoop:
    """Connections served one request at a time, and the descriptors of the service's own."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.device = context.device
        self.sessions: dict[int, Session] = {}
        self.selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector.register(self._wake_read, selectors.EVENT_READ)
        self.stopping = False

    def serve(self) -> None:
        """Serve until stopped (or, for the NIC's service, idle)."""
        try:
            while not self.stopping:
                timeout = self._timeout()
                if timeout is not None and timeout <= 0:
                    break
                for key, _ in self.selector.select(timeout):
                    if key.fileobj == self._wake_read:
                        continue  # stop() was asked: the loop's test ends it
                    if isinstance(key.fileobj, Session):
                        self._serve(key.fileobj)
                    else:
                        self._ready(key.fileobj)
                self._after_turn()
        finally:
            self.close()

    def _timeout(self) -> float | None:
        return None

    def _ready(self, fileobj: Any) -> None:
        """One of the service's own descriptors is readable."""

    def _after_turn(self) -> None:
        """The loop's turn has served what was ready (or its timeout passed)."""

    def _add(self, session: Session) -> None:
        self.sessions[session.fileno()] = session
        self.selector.register(session, selectors.EVENT_READ)

    def _serve(self, session: Session) -> None:
        was_greeted = session.greeted
        if session.serve_one():
            if session.greeted and not was_greeted:
                log.info("pid %d connected", session.pid)
            if session.greeted:
                return
        self._drop(session)

    def _drop(self, session: Session) -> None:
        self.selector.unregister(session)
        del self.sessions[session.fileno()]
        greeted = session.greeted
        left = session.close()
        if greeted:
            gone = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items())) or "nothing"
            log.info("pid %d gone: destroyed what it left: %s", session.pid, gone)
        self._ended(session, greeted)

    def _ended(self, session: Session, greeted: bool) -> None:
        """A connection has ended (its objects destroyed); ``greeted``: a driver's, past hello."""

    def _programs(self) -> list[int]:
        """Pids of the programs served here (not an engine's upstream connection)."""
        return sorted(session.pid for session in self.sessions.values()
                      if session.greeted and session.on_behalf_of is None)  # fmt: skip

    def stop(self) -> None:
        """End ``serve`` at its next turn; safe from a signal handler (one flag, one byte)."""
        self.stopping = True
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass

    def close(self) -> None:
        self._close_sessions()
        self.selector.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        if not self.context.closed:
            self.context.close()

    def _close_sessions(self) -> None:
        for session in list(self.sessions.values()):
            self.selector.unregister(session)
            session.close()
        self.sessions.clear()


class NicServer(SessionLoop):
    """The listening socket, the connections and the device they share: engine 0 of
    ``engines``."""

    def __init__(self, place: NicPlace, idle_s: float = DEFAULT_IDLE_S, engines: int = 1) -> None:
        self.place = place
        self.idle_s = idle_s
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        # the address's lock too: engines bind it with SO_REUSEPORT, which a second NIC of this
        # user (another stats folder) would join rather than fail to bind
        self._address_lock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        for sock, name, busy in ((self.listener, place.socket_name, f"a shared NIC already serves {place.describe()}"),
                                 (self._address_lock, f"\0pyroce-nicd-address/{os.getuid()}/{place.address}",
                                  f"a shared NIC of another stats folder already serves {place.address}")):  # fmt: skip
            try:
                sock.bind(name)
            except OSError as exc:
                self.listener.close()
                self._address_lock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise NicBusy(busy) from None
                raise
        self.listener.listen(64)
        # The device is opened (its address bound, its engine thread started) before the first
        # driver comes, and held while the service runs: a driver's failure to bind is this one's.
        try:
            context = open_nic_context(place, Steering(engines, 0) if engines > 1 else None)
        except (PyverbsError, ValueError):
            self.listener.close()
            self._address_lock.close()
            raise
        super().__init__(context)
        self.engines = Engines(place, engines, lambda engine: self.selector.register(engine, selectors.EVENT_READ))
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.waiting: dict[int, socket.socket] = {}  # connections whose first message decides where they go
        self.status_asked: list[StatusAsked] = []  # ``--status`` connections, answered once every engine has
        self.idle_since = time.monotonic()

    def serve(self) -> None:
        log.info("serving %s (engine pid %d, %d engines at most, counters in %s)", self.place.describe(),
                 os.getpid(), self.engines.count, self.place.folder)  # fmt: skip
        super().serve()

    def _timeout(self) -> float | None:
        timeout = None
        if not self._program_count() and self.idle_s > 0:
            timeout = self.idle_since + self.idle_s - time.monotonic()
            if timeout <= 0:
                log.info("no program for %.0f s: stopping", self.idle_s)
                return timeout
        if self.status_asked:  # a turn when the first runs out of time (never 0: that ends the loop)
            wait = max(self.status_asked[0].deadline - time.monotonic(), STATUS_TURN_S)
            timeout = wait if timeout is None else min(timeout, wait)
        return timeout

    def _after_turn(self) -> None:
        """Answer each ``status`` whose engines have all answered, or ended, or whose time ran out."""
        now = time.monotonic()
        for asked in list(self.status_asked):
            if now >= asked.deadline or all(engine.ended or engine.answers >= count for engine, count in asked.waits):
                self.status_asked.remove(asked)
                with contextlib.suppress(OSError):
                    send(asked.sock, ("ok", self.status()))
                asked.sock.close()

    def _program_count(self) -> int:
        return len(self._programs()) + len(self.engines.programs())

    def _ready(self, fileobj: Any) -> None:
        if fileobj is self.listener:
            self._accept()
        elif isinstance(fileobj, EngineProcess):
            self._engine_says(fileobj)
        else:
            self._route(fileobj)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        pid, uid, _ = peer_credentials(sock)
        if uid != os.getuid():
            log.warning("pid %d of uid %d refused: this NIC serves uid %d", pid, uid, os.getuid())
            sock.close()
            return
        self.waiting[sock.fileno()] = sock
        self.selector.register(sock, selectors.EVENT_READ)

    def _route(self, sock: socket.socket) -> None:
        """A new connection's first message: ``pyroce nicd --stop``/``--status`` answered here; a
        driver's hello served here or by the engine chosen for it (an engine's own connection
        for a program's rdma_cm commands stays here, with the connection manager)."""
        self.selector.unregister(sock)
        del self.waiting[sock.fileno()]
        try:
            message = receive(sock, peek=True)
        except (OSError, ProtocolError):
            message = None
        if message is None:  # closed unspoken (a look at whether the NIC serves): no program
            sock.close()
            return
        request = message.value
        command = request[0] if isinstance(request, tuple) and request else None
        if command in ("stop", "status"):
            receive(sock)
            if command == "stop":
                log.info("stop asked by pid %d", peer_credentials(sock)[0])
                send(sock, ("ok", os.getpid()))
                self.stop()
                sock.close()
            else:
                waits = [(engine, engine.ask_status()) for engine in self.engines.running]
                self.status_asked.append(StatusAsked(sock, waits, time.monotonic() + STATUS_WAIT_S))
            return
        engine = None if _upstream_hello(request) else self.engines.choose(len(self._programs()))
        if engine is None:
            session = Session(sock)
            self._add(session)
            self._serve(session)
        else:
            engine.hand_over(sock, peer_credentials(sock)[0])

    def _engine_says(self, engine: EngineProcess) -> None:
        message = engine.take()
        if message is None:
            if not self.stopping:
                log.error("engine %d (pid %d) ended: stopping the NIC (its address's steering is broken)",
                          engine.index, engine.pid)  # fmt: skip
                self.stop()
            self.selector.unregister(engine)
            return
        engine.note(message.value)
        if not self._program_count():
            self.idle_since = time.monotonic()

    def _ended(self, session: Session, greeted: bool) -> None:
        if greeted and not self._program_count():
            self.idle_since = time.monotonic()

    def status(self) -> dict[str, object]:
        own = {"index": 0, "pid": os.getpid(), "programs": self._programs(), "qps": len(self.device.engine.qps)}
        engines = [own, *(engine.status() for engine in self.engines.running)]
        return {"pid": os.getpid(), "device": self.place.device, "address": self.place.address,
                "programs": sorted(pid for engine in engines for pid in engine["programs"]),  # type: ignore[attr-defined]
                "qps": sum(engine["qps"] for engine in engines), "engines": engines}  # type: ignore[misc]  # fmt: skip

    def close(self) -> None:
        """Every connection ends before the engines are asked to stop: an engine serving a
        program's rdma_cm command waits for the service's answer (``cm_upstream``), which a
        service waiting for that engine to stop would never give."""
        log.info("stopping: %d connections end, then %d engines", len(self.sessions), len(self.engines.running))
        self._refuse_connections()
        for sock in [*self.waiting.values(), *(asked.sock for asked in self.status_asked)]:
            sock.close()
        self.waiting.clear()
        self.status_asked.clear()
        self._close_sessions()
        self.engines.stop()
        self.listener.close()
        self._address_lock.close()
        super().close()

    def _refuse_connections(self) -> None:
        """New connections refused at their ``connect`` (the name stays bound until the end, so
        no second NIC starts on the place meanwhile), and those not accepted yet closed."""
        self.listener.shutdown(socket.SHUT_RD)
        self.listener.setblocking(False)
        while True:
            try:
                sock, _ = self.listener.accept()
            except ConnectionError:
                continue  # one whose program went meanwhile
            except OSError:
                return  # none left (EAGAIN)
            sock.close()


def _upstream_hello(request: Any) -> bool:
    """The hello of an engine's connection for a program's rdma_cm commands."""
    return (isinstance(request, tuple) and len(request) == 2 and request[0] == "hello" and isinstance(request[1], tuple)
            and len(request[1]) == 1 and isinstance(request[1][0], dict) and "for" in request[1][0])  # fmt: skip


def open_server(place: NicPlace, idle_s: float = DEFAULT_IDLE_S, engines: int = 1) -> NicServer:
    """A server for ``place``: ``NicBusy`` if one runs, ``LinkError`` if its address cannot be bound."""
    try:
        return NicServer(place, idle_s, engines)
    except PyverbsError as exc:
        raise LinkError(getattr(exc, "error_code", errno.EIO), str(exc)) from None
