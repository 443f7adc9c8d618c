"""The shared NIC's engines after the first: one process each, started as programs come.

One engine is one Python thread: two busy programs on one engine share its core for both
transports (perftest's pair through one engine moved 245 MB/s against 434 on two NICs). So the
service (engine 0, ``nicd.server``) hands each new program to the engine with the fewest (its
own included), starting the next engine when all have one, up to ``count``
(``PYROCE_NICD_ENGINES``). Every engine binds the NIC's address, and the kernel steers each
datagram to the engine that owns its QP (``link.steering``); an engine serves its programs'
connections whole (``nicd.engine_server``): their commands, their memory, their data path.

The service and an engine speak over a ``SOCK_SEQPACKET`` pair in the protocol's values:
``("ready", pid)`` once the engine's device is open, ``("serve", fd)`` a program's connection
passed over (its hello not yet read), ``("gone", pid)`` when that program's connection ends,
``("status",)`` answered with ``("status", mapping)``, ``("stop",)``. An engine that ends
unasked takes the NIC down: the kernel numbers the address's sockets in the order they bound,
and a socket gone renumbers the last, so the others would get its datagrams.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from pyroce.nicd.launch import python
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import Message, PassFd, ProtocolError, receive, send

log = logging.getLogger("pyroce.nicd")

STATUS_WAIT_S = 5.0  # for every engine's answer to ``status`` (one serves a request at a time: it may be in one)
STOP_WAIT_S = 10.0
STACKS_WAIT_S = 1.0  # for a stuck engine to print its stacks (SIGUSR1) before it is killed


def default_engines() -> int:
    """Engines for a NIC with no ``PYROCE_NICD_ENGINES``: one per two of the cores this process
    may run on, at most four. Each program's own poll needs a core as much as its engine does:
    on two cores, two engines for perftest's pair (four busy processes) doubled to quadrupled
    every latency test's round trip and gained a fifth to a half in 64 KiB bandwidth
    (docs/performance.md, "An engine per program")."""
    return max(1, min(len(os.sched_getaffinity(0)) // 2, 4))


class EngineProcess:
    """Engine ``index``: its process, its end of the control pair, its programs."""

    def __init__(self, place: NicPlace, index: int, count: int) -> None:
        self.index = index
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [python(), "-m", "pyroce", "nicd", "--device", place.device, "--engine", f"{index}/{count}",
                   "--control", str(theirs.fileno())]  # fmt: skip
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()])
        except OSError:
            self.control.close()
            raise
        finally:
            theirs.close()
        self.pid = self.process.pid
        self.ready = False
        self.waiting: list[tuple[socket.socket, int]] = []  # connections handed over before it was ready
        self.programs: set[int] = set()  # pids of the programs it serves (or will, once ready)
        self.asked = self.answers = 0  # ``status`` asked of it, and answered
        self.last_status: dict[str, Any] | None = None
        self.ended = False

    def fileno(self) -> int:
        return self.control.fileno()

    def hand_over(self, sock: socket.socket, pid: int) -> None:
        """Pass a program's connection to the engine (once it is ready); this end's copy closes."""
        self.programs.add(pid)
        if self.ready:
            self._pass(sock, pid)
        else:
            self.waiting.append((sock, pid))

    def _pass(self, sock: socket.socket, pid: int) -> None:
        try:
            send(self.control, ("serve", PassFd(sock.fileno())))
        except OSError as exc:
            log.error("engine %d (pid %d) cannot take pid %d's connection: %s", self.index, self.pid, pid, exc)
            self.programs.discard(pid)
        finally:
            sock.close()

    def take(self) -> Message | None:
        """The engine's next message; None once it has ended."""
        try:
            message = receive(self.control)
        except (OSError, ProtocolError) as exc:
            log.error("engine %d (pid %d): %s", self.index, self.pid, exc)
            message = None
        self.ended = message is None
        return message

    def note(self, message: Any) -> None:
        """What the engine said (``ready``, ``gone``): its state here follows."""
        if message[0] == "ready":
            self.ready = True
            log.info("engine %d serving (pid %d)", self.index, self.pid)
            waiting, self.waiting = self.waiting, []
            for sock, pid in waiting:
                self._pass(sock, pid)
        elif message[0] == "gone":
            self.programs.discard(message[1])
        elif message[0] == "status":
            self.answers += 1
            self.last_status = dict(message[1])

    def ask_status(self) -> int:
        """Ask the engine for its ``status``: the count of its answers (``answers``) at which
        this one has come. Answers come in the service's loop (``note``), which never waits
        for one: the engine may be waiting for the service (``cm_upstream``)."""
        try:
            send(self.control, ("status",))
        except OSError:
            self.ended = True  # the service hears of it next
            return self.answers
        self.asked += 1
        return self.asked

    def status(self) -> dict[str, Any]:
        """The engine's last answer to ``status`` (pid, programs, QPs); what is known here
        before the first."""
        if self.last_status is not None:
            return self.last_status
        return {"index": self.index, "pid": self.pid, "programs": sorted(self.programs), "qps": 0}

    def stop(self) -> None:
        for sock, _ in self.waiting:
            sock.close()
        self.waiting.clear()
        try:
            send(self.control, ("stop",))
        except OSError:
            pass  # ended already
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            log.error("engine %d (pid %d) did not stop in %.0f s: its threads' stacks follow, then it is killed",
                      self.index, self.pid, STOP_WAIT_S)  # fmt: skip
            self.process.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STACKS_WAIT_S)  # time to write them
            self.process.kill()
            self.process.wait()
        self.control.close()


class Engines:
    """Engines 1 .. ``count`` - 1 of a NIC whose service runs engine 0; ``watch`` is called
    with each one started (the service then waits for its messages)."""

    def __init__(self, place: NicPlace, count: int, watch: Callable[[EngineProcess], object]) -> None:
        self.place = place
        self.count = count
        self.watch = watch
        self.running: list[EngineProcess] = []

    def choose(self, own_programs: int) -> EngineProcess | None:
        """The engine for a new program: the one with the fewest, the next one started when
        every engine has one; None for the service's own."""
        load, chosen = own_programs, None
        for engine in self.running:
            if len(engine.programs) < load:
                load, chosen = len(engine.programs), engine
        if load == 0 or len(self.running) + 1 >= self.count:
            return chosen
        try:
            engine = EngineProcess(self.place, len(self.running) + 1, self.count)
        except OSError as exc:
            log.error("cannot start engine %d: %s", len(self.running) + 1, exc)
            return chosen
        self.running.append(engine)
        self.watch(engine)
        return engine

    def programs(self) -> list[int]:
        return sorted(pid for engine in self.running for pid in engine.programs)

    def stop(self) -> None:
        for engine in reversed(self.running):
            engine.stop()
        self.running.clear()
