"""A pingpong tool's server and client in two processes, as rdma-core's ``ibv_*_pingpong`` run,
optionally through a TCP relay in this process that records the out-of-band exchange; the C
tools' output lines as patterns."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

from tests.cli import background, free_port, listening, pyroce

__all__ = ["ADDRESS", "BYTES", "ITERS", "LOCAL", "REMOTE", "free_port", "listening", "run_pair", "wait_listening"]

# printf("  %s address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", ...) with a pyroce0 GID
ADDRESS = re.compile(r"^  (local|remote) address: +LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.")
BYTES = re.compile(r"^(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$", re.MULTILINE)  # "%lld bytes in %.2f ..."
ITERS = re.compile(r"^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$", re.MULTILINE)  # "%d iters in %.2f ..."
LOCAL = "  local address:  "
REMOTE = "  remote address: "


def wait_listening(port: int, server: subprocess.Popen[str]) -> None:
    """Until ``server`` listens on ``port``; it must not exit first."""
    deadline = time.monotonic() + 30
    while not listening(port):
        assert server.poll() is None and time.monotonic() < deadline, server.communicate()
        time.sleep(0.02)


@dataclass
class Relay:
    """One TCP connection from ``listen_port`` to ``server_port``, relayed and recorded."""

    server_port: int
    listen_port: int
    to_server: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.listen_port))
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        with self.listener:
            client, _ = self.listener.accept()
        with client, socket.create_connection(("127.0.0.1", self.server_port)) as server:
            pumps = [threading.Thread(target=pump, args=args) for args in
                     ((client, server, self.to_server), (server, client, self.to_client))]  # fmt: skip
            for thread in pumps:
                thread.start()
            for thread in pumps:
                thread.join()

    def join(self) -> None:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the relay did not see both sides close"


def pump(src: socket.socket, dst: socket.socket, record: bytearray) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s writing side too."""
    while chunk := src.recv(65536):
        record += chunk
        dst.sendall(chunk)
    dst.shutdown(socket.SHUT_WR)


def run_pair(tool: str, port: int, *options: str, client_options: tuple[str, ...] = (), relay_port: int = 0,
             ok: bool = True) -> tuple[str, str, str, str, Relay | None]:  # fmt: skip
    """Run ``tool``'s server on ``port`` and its client (through a relay on ``relay_port`` if
    given) with ``options``; stdout and stderr of the server and of the client, and the relay.
    With ``ok``, both must have exited 0."""
    server = background(tool, "-p", str(port), *options)
    relay = None
    try:
        wait_listening(port, server)
        if relay_port:
            relay = Relay(port, relay_port)
        client_port = relay_port or port
        client = pyroce(tool, "-p", str(client_port), *options, *client_options, "127.0.0.1", timeout=120)
        server_out, server_err = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    if relay is not None:
        relay.join()
    if ok:
        assert client.returncode == 0, client.stderr
        assert server.returncode == 0, server_err
    return server_out, server_err, client.stdout, client.stderr, relay


def addresses(out: str, prefix: str) -> list[str]:
    """The address parts of ``out``'s lines that start with ``prefix``."""
    return [line[len(prefix) :] for line in out.splitlines() if line.startswith(prefix)]
