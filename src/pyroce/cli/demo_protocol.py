"""What the two ``pyroce demo`` processes say to each other: JSON lines over TCP.

Each side greets first (``["pyroce-demo/1"]``), so a peer that is something else (an SSH or
HTTP server, a port scanner) is named and refused within ``GREETING_S``, not after the whole
timeout. Every failure names the peer's address.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from pyroce.apps.rc_endpoint import PeerInfo
from pyroce.cli.errors import CliError
from pyroce.verbs.cq import WC
from pyroce.verbs.enums import ibv_wc_status, ibv_wc_status_str

GREETING = ["pyroce-demo/1"]
GREETING_S = 5.0  # how long a peer may take to greet: a pyroce demo greets at once
CONNECT_RETRY_S = 5.0  # how long a refused connection is retried: the server may be starting
MAX_LINE = 1 << 16


class Channel:
    """JSON lines over a TCP connection to ``peer``: the out-of-band path between the two sides."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        host, port = sock.getpeername()[:2]
        self.peer = f"{host}:{port}"
        self.timeout = timeout
        self.sock = sock
        self.reader = sock.makefile("rb")

    def send(self, *message: Any) -> None:
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError as exc:
            raise CliError(f"{self.peer}: connection lost: {exc.strerror or exc}") from None

    def recv(self, timeout: float | None = None, waiting_for: str = "answer") -> list[Any]:
        """The next message; ``CliError`` if the peer is silent for ``timeout`` seconds, closes,
        or sends something that is not a pyroce demo message."""
        wait = self.timeout if timeout is None else timeout
        self.sock.settimeout(wait)
        try:
            line = self.reader.readline(MAX_LINE)
        except TimeoutError:
            raise CliError(f"{self.peer}: no {waiting_for} within {wait:g} s") from None
        except OSError as exc:
            raise CliError(f"{self.peer}: connection lost: {exc.strerror or exc}") from None
        if not line:
            raise CliError(f"{self.peer} closed the connection")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, list) or not message:
            raise CliError(f"{self.peer} is not a pyroce demo: it sent {line[:40]!r}")
        return message

    def greet(self) -> None:
        """Exchange greetings; ``CliError`` if the peer is not a pyroce demo."""
        self.send(*GREETING)
        greeting = self.recv(min(GREETING_S, self.timeout), "pyroce demo greeting")
        if greeting != GREETING:
            raise CliError(f"{self.peer} is not a pyroce demo of this version: it greeted {greeting!r}")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def connect(address: tuple[str, int], timeout: float) -> Channel:
    """A greeted channel to the server at ``address``; a refused connection is retried for
    ``CONNECT_RETRY_S`` (it may still be starting)."""
    name = f"{address[0]}:{address[1]}"
    deadline = time.monotonic() + min(CONNECT_RETRY_S, timeout)
    while True:
        try:
            sock = socket.create_connection(address, timeout)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise CliError(f"cannot connect to {name}: connection refused: is `pyroce demo --serve` running there?")
            time.sleep(0.1)
        except OSError as exc:
            raise CliError(f"cannot connect to {name}: {exc.strerror or exc}") from None
    channel = Channel(sock, timeout)
    try:
        channel.greet()
    except CliError:
        channel.close()
        raise
    return channel


def to_wire(info: PeerInfo) -> list[Any]:
    return [info.gid.hex(), info.qpn, info.psn, info.rkey, info.addr]


def from_wire(fields: list[Any]) -> PeerInfo:
    gid, qpn, psn, rkey, addr = fields
    return PeerInfo(bytes.fromhex(gid), qpn, psn, rkey, addr)


def wc_failure(what: str, wc: WC) -> str:
    """A failed completion in one line: its status by name and text, and pyroce's reason."""
    status = ibv_wc_status(wc.status)
    reason = f": {wc.reason}" if wc.reason else ""
    return f"{what} failed with {status.name} ({ibv_wc_status_str(status)}){reason}"
