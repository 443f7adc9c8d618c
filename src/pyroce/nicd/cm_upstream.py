"""A program's rdma_cm commands, on an engine other than its NIC's first, passed on to the first.

A NIC address has one connection manager (the kernel's rdma_cm is one per host): its port
spaces and listeners are the address's, and every MAD comes to QP1, which the kernel steers
to engine 0 (``link.steering``). So an engine that serves a program (``nicd.engine_server``)
runs its verbs itself and passes each ``cm_*`` command on, as it came, over a connection of
its own to the NIC's service (engine 0), one per program: when the program goes, that
connection closes and the service destroys the program's ids as it would for any driver. The
CM never touches a QP (``pyroce.cm.manager``), so nothing more than QPNs crosses.

The objects the first engine answers with (a CM file, an id, a multicast join) are
``Forwarded`` here, numbered for the program like the engine's own objects; each goes back as
the handle the first engine gave it. The descriptors an answer carries (a CM file's eventfd)
are passed on to the program and then closed here.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from pyroce import __version__
from pyroce.nicd.commands import DEVICE_PREFIX
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import PROTOCOL, CommandError, Handle, Record, receive, send

CM_PREFIX = "cm_"  # the C library's rdma_cm commands; a Python driver's are its device's (``device.cm_``)


class Forwarded:
    """An rdma_cm object of the NIC's first engine, by its handle on the upstream connection."""

    __slots__ = ("destroyed", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self.destroyed = False  # a closing command (``cm_close``, ``cm_destroy_id`` ...) took it


class CmUpstream:
    """One program's connection to the NIC's first engine, made on its first rdma_cm command."""

    def __init__(self, place: NicPlace, pid: int) -> None:
        self.place = place
        self.pid = pid
        self.sock: socket.socket | None = None
        self._objects: dict[int, Forwarded] = {}
        self._device_open = False

    def call(self, command: str, arguments: tuple[Any, ...], closing: bool = False) -> tuple[Any, list[int]]:
        """The first engine's answer to ``command`` and the descriptors that came with it, the
        caller's to close once passed on; ``CommandError`` for a refusal. The C library's
        commands name objects (``Forwarded`` here; ``closing``: the command destroys its last
        argument); a Python driver's device commands (``device.cm_*``) name handles, which
        pass as they are: that driver never gives a CM handle where a verbs one goes."""
        sock = self._connection()
        if command.startswith(DEVICE_PREFIX) and not self._device_open:
            self._request(sock, f"{DEVICE_PREFIX}open_device", (self.place.device,))
            self._device_open = True
        value, fds = self._request(sock, command, arguments)
        if command.startswith(DEVICE_PREFIX):
            return value, fds
        if closing and arguments and isinstance(arguments[-1], Forwarded):
            arguments[-1].destroyed = True
        return self._own(value), fds

    def _request(self, sock: socket.socket, command: str, arguments: tuple[Any, ...]) -> tuple[Any, list[int]]:
        try:
            send(sock, (command, arguments), _number)
            message = receive(sock)
        except OSError as exc:
            raise CommandError(errno.EIO, f"{command}: the NIC's connection manager is unreachable: {exc}") from None
        if message is None:
            raise CommandError(errno.EIO, f"{command}: the NIC's connection manager closed its connection")
        answer = message.value
        if answer[0] != "ok":
            for fd in message.fds:
                socket.close(fd)
            raise CommandError(answer[1], answer[2])
        if command == f"{DEVICE_PREFIX}open_device":
            for fd in message.fds:  # the first engine's doorbell: not this program's
                socket.close(fd)
        return answer[1], message.fds

    def _connection(self) -> socket.socket:
        if self.sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            try:
                sock.connect(self.place.socket_name)
                send(sock, ("hello", ({"protocol": PROTOCOL, "version": __version__, "for": self.pid},)))
                message = receive(sock)
                if message is None or message.value[0] != "ok":
                    raise OSError(errno.EPROTO, f"the NIC's first engine refused: {message and message.value}")
                for fd in message.fds:  # its shared memory: no rdma_cm command uses it
                    socket.close(fd)
            except OSError as exc:
                sock.close()
                raise CommandError(errno.EIO, f"the NIC's connection manager is unreachable: {exc}") from None
            self.sock = sock
        return self.sock

    def _own(self, value: Any) -> Any:
        if isinstance(value, Handle):
            obj = self._objects.get(value)
            if obj is None:
                obj = self._objects[value] = Forwarded(value)
            return obj
        if isinstance(value, tuple):
            return tuple(self._own(item) for item in value)
        if isinstance(value, dict):
            return {key: self._own(item) for key, item in value.items()}
        if isinstance(value, Record):
            return Record(value.kind, {key: self._own(item) for key, item in vars(value).items() if key != "kind"})
        return value

    def close(self) -> None:
        """The program is gone: its rdma_cm objects go with this connection (their ids send
        their DREQs first)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._objects.clear()


def _number(obj: Any) -> int | None:
    return obj.number if isinstance(obj, Forwarded) else None
