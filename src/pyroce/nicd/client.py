"""A driver's side of the shared NIC: its connection, started NIC and commands.

The first command a process sends connects it (``hello``, then the connection's shared memory
is mapped here) and, when no NIC serves its place, starts one (``nicd.launch``), saying so in
one line. The objects the NIC names (``RemoteObject``) belong to the connection that made them:
a ``fork()``ed child gets a connection of its own on its first command, and its parent's
objects are refused there (EIO), as a child's use of its parent's verbs would be meaningless.
"""

from __future__ import annotations

import errno
import mmap
import os
import select
import socket
import threading
import time
from typing import Any

from pyroce import __version__
from pyroce.nicd.arena import Arena
from pyroce.nicd.launch import launch
from pyroce.nicd.place import NicPlace, nic_place
from pyroce.nicd.protocol import PROTOCOL, Handle, receive, send

CONNECT_TIMEOUT_S = 10.0


class NicError(OSError):
    """A command the NIC refused (its errno), or a NIC that cannot be reached."""


class RemoteObject(Handle):
    """An object of the NIC, valid on the connection that made it."""

    connection: Connection


class Connection:
    """One process's connection: the socket, the shared memory mapped, one request at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.arena: mmap.mmap | None = None
        self.base = 0
        self.fds: dict[int, int] = {}  # handle of a channel or context -> its event fd here
        self.lost = False  # the NIC closed the connection
        # what a Python driver's empty polls sleep on (``RemoteDevice._nap``): a flag byte in the
        # arena and the NIC's eventfd, asked once for all of this process's CQs; None until then
        self.poller: tuple[memoryview, int] | None = None
        self.asking = threading.Lock()  # held while the first nap asks for ``poller``
        greeting = self.call("hello", {"protocol": PROTOCOL, "version": __version__})
        # this end's mapping; a Python driver allocates its rings in it (nicd.remote_device)
        self.memory = Arena.attach(greeting["arena"], greeting["arena_size"])
        self.arena = self.memory.mapping
        self.base = self.memory.base

    def call(self, command: str, *args: Any) -> Any:
        for value in _walk(args):
            if isinstance(value, RemoteObject) and value.connection is not self:
                raise NicError(errno.EIO, "the object belongs to another connection to the NIC (a parent "
                                          "process's, after fork()): open the device again")  # fmt: skip
        with self.lock:
            try:
                send(self.sock, (command, args))
                message = receive(self.sock, self._address)
            except (BrokenPipeError, ConnectionResetError):
                message = None
        if message is None:
            self.lost = True
            raise NicError(errno.EIO, "the shared NIC closed the connection (stopped, or crashed: see its log)")
        answer = message.value
        if answer[0] == "err":
            raise NicError(answer[1], answer[2])
        return self._own(answer[1])

    def _address(self, offset: int) -> int:
        return self.base + offset

    def _own(self, value: Any) -> Any:
        if isinstance(value, Handle):
            obj = RemoteObject(value)
            obj.connection = self
            return obj
        if isinstance(value, tuple):
            return tuple(self._own(item) for item in value)
        return value

    def wait(self, fd: int) -> None:
        """Wait until ``fd`` (an event fd) is readable, unless it was made non-blocking."""
        if os.get_blocking(fd):
            select.select([fd], [], [])


def _walk(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    else:
        yield value


def connect(place: NicPlace, start: bool = True) -> Connection:
    """A connection to the NIC at ``place``, started first if none serves it and ``start``."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    started = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.connect(place.socket_name)
            return Connection(sock)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            sock.close()
            if not start:
                raise NicError(errno.ENODEV, f"no shared NIC serves {place.describe()}") from exc
            if not started:
                try:
                    launch(place)
                except OSError as failure:
                    raise NicError(failure.errno, failure.strerror) from None
                started = True
            elif time.monotonic() > deadline:
                raise NicError(errno.ETIMEDOUT, f"the shared NIC for {place.describe()} did not start: see "
                                                f"{place.log_path}") from None  # fmt: skip
            time.sleep(0.02)
        except BaseException:
            sock.close()
            raise


def ask(place: NicPlace, request: str) -> Any:
    """The answer of the NIC at ``place`` to ``stop`` (its pid) or ``status`` (a mapping), as
    ``pyroce nicd --stop``/``--status`` ask; ``NicError`` (ENODEV) when none serves it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(place.socket_name)
        except (ConnectionRefusedError, FileNotFoundError):
            raise NicError(errno.ENODEV, f"no shared NIC serves {place.describe()}") from None
        send(sock, (request, ()))
        message = receive(sock)
    if message is None or message.value[0] != "ok":
        raise NicError(errno.EIO, f"the shared NIC {place.describe()} did not answer")
    return message.value[1]


_lock = threading.Lock()
_connections: dict[NicPlace, Connection] = {}


def connection() -> Connection:
    """This process's connection to the NIC its settings name, made on first use (again once
    that NIC closed it)."""
    place = nic_place()
    with _lock:
        current = _connections.get(place)
        if current is None or current.lost:
            current = _connections[place] = connect(place)
        return current


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    for conn in _connections.values():
        try:
            conn.sock.close()  # the child's copy: the parent's connection goes on
            conn.memory.close()
        except (OSError, BufferError):
            pass
    _connections.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
