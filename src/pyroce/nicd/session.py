"""One driver's connection to the shared NIC: its objects, its shared memory, its process.

A connection is what an open of ``/dev/infiniband/uverbs0`` is to the kernel: the objects a
driver creates through it are numbered for it (handles), are checked and created by the same
verbs objects a Python program uses (``pyroce.driver.calls``), and go when the connection
goes: a program that exits or is killed has its QPs destroyed (their peers' retries then
fail), its MRs deregistered and its CQs freed, and nobody else's objects are touched.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import os
import socket
import struct
import traceback
from typing import Any

from pyroce import __version__
from pyroce.cm.ids import CmId
from pyroce.cm.multicast import McGroup
from pyroce.driver import calls, cm_calls
from pyroce.driver.build import sources_digest
from pyroce.nicd.arena import Arena, ArenaFull
from pyroce.nicd.cm_upstream import CM_PREFIX, CmUpstream, Forwarded
from pyroce.nicd.commands import DEVICE_PREFIX, DeviceCommands
from pyroce.nicd.place import NicPlace
from pyroce.nicd.process_memory import ForeignMemory, ProcessAccess
from pyroce.nicd.protocol import PROTOCOL, CommandError, Handle, ProtocolError, receive, send
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.device import Context
from pyroce.verbs.driver_memory import LOCAL

log = logging.getLogger("pyroce.nicd")

COMMANDS = {name: function for module in (calls, cm_calls)  # the verbs, and the rdma_cm file's commands
            for name, function in inspect.getmembers(module, inspect.isfunction)
            if function.__module__ == module.__name__ and not name.startswith("_")}  # fmt: skip
CLOSING = ("close_", "destroy_", "dealloc_", "dereg_", "cm_close", "cm_destroy_", "cm_leave_")  # objects may go


NicObject = PyverbsObject | CmId | McGroup | Forwarded


def gone(obj: NicObject) -> bool:
    """The object was closed (a verbs object, an rdma_cm file) or destroyed (an rdma_cm id, a
    multicast join left or of an id destroyed; one of the first engine's, by its command)."""
    return obj.destroyed if isinstance(obj, (CmId, McGroup, Forwarded)) else obj.closed


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from the kernel (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class ProgramMemory:
    """A connection's ``DriverMemory``: rings in its arena, descriptors sent across, and the
    program's own memory reached from outside (``nicd.process_memory``)."""

    def __init__(self, arena: Arena, pid: int) -> None:
        self.arena = arena
        self.pid = pid
        self.alloc = arena.alloc
        self.address = arena.address
        self.export_fd = arena.export_fd
        self.mr_memory = LOCAL.mr_memory  # the NIC's own memory: a C driver's MRs are its program's
        self.process = ProcessAccess(pid)  # what its MRs' memory is read and written through

    def program_memory(self, addr: int, length: int) -> Any:
        return ForeignMemory(self.pid, addr, length, self.process)


class Session:
    """The NIC's side of one connection; on an engine other than the first, its rdma_cm
    commands go to the first (``upstream``)."""

    def __init__(self, sock: socket.socket, cm_place: NicPlace | None = None) -> None:
        """``cm_place``: the NIC whose first engine runs this connection's rdma_cm commands
        (given on the other engines)."""
        self.sock = sock
        self.pid, self.uid, _ = peer_credentials(sock)
        self.upstream = None if cm_place is None else CmUpstream(cm_place, self.pid)
        self.arena = Arena(f"pyroce-nicd-{self.pid}")
        self.memory = ProgramMemory(self.arena, self.pid)
        self.device_commands = DeviceCommands(self.pid, self.arena)  # a Python driver's (nicd.remote_device)
        self.objects: dict[int, NicObject] = {}
        self.numbers: dict[int, int] = {}  # id(object) -> handle
        self.next_handle = 1
        self.greeted = False
        self.on_behalf_of: int | None = None  # the program an engine's upstream connection serves
        self._passed_on: list[int] = []  # descriptors of the first engine's answer, closed once sent

    def fileno(self) -> int:
        return self.sock.fileno()

    # --- handles ---------------------------------------------------------------------

    def handle_of(self, obj: Any) -> int | None:
        """The handle of a verbs object, rdma_cm id or multicast join an answer names (numbered
        on first sight)."""
        if not isinstance(obj, (PyverbsObject, CmId, McGroup, Forwarded)):
            return None
        number = self.numbers.get(id(obj))
        if number is None:
            number = self.next_handle
            self.next_handle += 1
            self.objects[number] = obj
            self.numbers[id(obj)] = number
        return number

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, Handle):
            obj = self.objects.get(int(value))
            if obj is None:
                raise CommandError(errno.EBADF, f"no object {int(value)} on this connection")
            return obj
        if isinstance(value, tuple):
            return tuple(self._resolve(item) for item in value)
        if isinstance(value, dict):
            return {key: self._resolve(item) for key, item in value.items()}
        return value

    def _forget_closed(self) -> None:
        for number, obj in list(self.objects.items()):
            if gone(obj):
                del self.objects[number]
                del self.numbers[id(obj)]

    # --- requests ----------------------------------------------------------------------

    def serve_one(self) -> bool:
        """Answer the next request; False when the connection is over."""
        try:
            message = receive(self.sock)
        except (ProtocolError, OSError) as exc:
            log.warning("pid %d: %s: closing its connection", self.pid, exc)
            return False
        if message is None:
            return False
        for fd in message.fds:  # requests carry no descriptors
            socket.close(fd)
        try:
            answer: Any = ("ok", self.run(message.value))
        except CommandError as exc:
            answer = ("err", exc.code, str(exc))
        try:
            send(self.sock, answer, self.handle_of)
        except (ProtocolError, OSError) as exc:
            log.warning("pid %d: cannot answer (%s): closing its connection", self.pid, exc)
            return False
        finally:
            for fd in self._passed_on:
                socket.close(fd)
            self._passed_on.clear()
        return True

    def run(self, request: Any) -> Any:
        if not (isinstance(request, tuple) and len(request) == 2 and isinstance(request[0], str)
                and isinstance(request[1], tuple)):  # fmt: skip
            raise CommandError(errno.EINVAL, "a request is (command, arguments)")
        command, arguments = request
        if command == "hello":
            return self._hello(*arguments)
        if not self.greeted:
            raise CommandError(errno.EPROTO, "the first request must be hello")
        if command.startswith(DEVICE_PREFIX + CM_PREFIX) and self.upstream is not None:
            value, self._passed_on = self.upstream.call(command, arguments)
            return value
        if command.startswith(DEVICE_PREFIX):
            try:
                return self.device_commands.run(command[len(DEVICE_PREFIX) :], arguments)
            except Exception as exc:  # noqa: BLE001 - every failure becomes the driver's errno
                raise CommandError(*errno_of(command, exc)) from None
        if self.upstream is not None and command.startswith(CM_PREFIX):
            try:
                result, self._passed_on = self.upstream.call(command, self._resolve(arguments),
                                                             command.startswith(CLOSING))  # fmt: skip
            finally:
                if command.startswith(CLOSING):
                    self._forget_closed()
            return result
        function = COMMANDS.get(command)
        if function is None:
            raise CommandError(errno.EOPNOTSUPP, f"no command {command!r}")
        args = self._resolve(arguments)
        if command in ("open_context", "cm_open"):
            args = (*args, self.memory)
        elif command in EVENT_QUEUES:  # the driver waits on the fd: the NIC never blocks
            function = _take_event(EVENT_QUEUES[command])
        try:
            result = function(*args)
        except CommandError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes the driver's errno
            raise CommandError(*errno_of(command, exc)) from None
        finally:
            if command.startswith(CLOSING):
                self._forget_closed()
        if command == "create_qp":  # `pyroce stats --qp` says whose it is
            qp = result[0]
            qp.device.qp_owners[qp.qp_num] = self.pid
        return result

    def _hello(self, greeting: Any = None) -> dict[str, Any]:
        wanted = greeting.get("protocol") if isinstance(greeting, dict) else None
        if wanted != PROTOCOL:
            raise CommandError(errno.EPROTO, f"this NIC speaks protocol {PROTOCOL} (pyroce {__version__}), the "
                                             f"driver {wanted}: use one pyroce for both")  # fmt: skip
        driver = greeting.get("driver")  # the C library's sources digest; a Python driver sends none
        if driver is not None and driver != driver_digest():
            raise CommandError(errno.EPROTO, f"this libibverbs.so.1 was built from other sources than the pyroce of "
                                             f"the shared NIC (pid {os.getpid()}, {PYROCE_ROOT}): run the program "
                                             "with that pyroce's `pyroce run`, or stop the NIC (`pyroce nicd "
                                             "--stop`) and run it again")  # fmt: skip
        self.greeted = True
        on_behalf_of = greeting.get("for")  # an engine's connection for a program's rdma_cm commands
        self.on_behalf_of = on_behalf_of if isinstance(on_behalf_of, int) else None
        return {"protocol": PROTOCOL, "version": __version__, "arena": self.arena.export_fd(self.arena.fd),
                "arena_size": self.arena.size}  # fmt: skip

    def close(self) -> dict[str, int]:
        """The connection is gone: destroy what it left, as the kernel does for a dead process.
        Returns how many objects of each kind went (for the log)."""
        left: dict[str, int] = {}
        for obj in self.objects.values():
            if not gone(obj) and not isinstance(obj, Forwarded):  # (the first engine says what those were)
                left[type(obj).__name__] = left.get(type(obj).__name__, 0) + 1
        # rdma_cm files first (their ids: a connected one sends its DREQ), then contexts (their
        # PDs, MRs, CQs, QPs ... in pyverbs' order)
        if self.upstream is not None:
            self.upstream.close()
        for kind in (cm_calls.CmFile, Context):
            for obj in reversed(list(self.objects.values())):
                if isinstance(obj, kind) and not obj.closed:
                    try:
                        obj.close()
                    except Exception:  # noqa: BLE001 - one bad object must not keep the rest alive
                        log.error("pid %d: closing its %s failed:\n%s", self.pid, kind.__name__, traceback.format_exc())
        self.objects.clear()
        self.numbers.clear()
        for kind, count in self.device_commands.close().items():
            left[kind] = left.get(kind, 0) + count
        self.sock.close()
        self.arena.close()
        return left


PYROCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def driver_digest() -> str:
    """The sources digest a C library built from this pyroce sends in its hello."""
    return sources_digest()


EVENT_QUEUES = {"get_cq_event": lambda channel: channel.events, "get_async_event": lambda ctx: ctx.async_queue}


def _take_event(queue_of: Any) -> Any:
    """A command that takes the next event of an object's queue, EAGAIN if none waits."""

    def take(obj: Any) -> Any:
        obj._check_open()
        event = queue_of(obj).take()
        if event is None:
            raise CommandError(errno.EAGAIN, "no event waits")
        return (event.event_type, event.element) if hasattr(event, "event_type") else event

    return take


def errno_of(command: str, exc: Exception) -> tuple[int, str]:
    """The errno a driver gets for a failure: a PyverbsError's ``error_code`` (EINVAL for a
    usage error), an OSError's errno; anything else is a bug of pyroce's, logged, EIO."""
    code = getattr(exc, "error_code", None)
    if code is None and isinstance(exc, OSError):
        code = exc.errno
    if isinstance(exc, ArenaFull):
        code = errno.ENOMEM
    if code is None:
        log.error("%s: internal error:\n%s", command, traceback.format_exc())
        return errno.EIO, f"{command}: internal error: {exc}"
    return (code if code > 0 else errno.EINVAL), str(exc)
