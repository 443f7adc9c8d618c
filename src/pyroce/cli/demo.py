"""``pyroce demo``: two endpoints in two processes move data with RDMA and check every byte.

The client starts a server process (or, with ``--serve``/``--connect``, the two run apart, on
two hosts or network namespaces), and the two exchange their ``PeerInfo`` (GID, QPN, PSN,
R_Key, address) over TCP, as ibv_rc_pingpong does. Each process has its own pyroce0 device
(its own loopback address, or ``PYROCE_ADDR``), so every packet is real RoCEv2 over UDP with
its ICRC. The TCP channel also carries the checks (``demo_protocol``): the server reports
digests of what it received and of its memory, and the client compares them with what it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import closing
from typing import Any, TextIO

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.cli import args as types
from pyroce.cli.demo_client import Demo
from pyroce.cli.demo_protocol import Channel, connect
from pyroce.cli.demo_report import header_line, verified_line
from pyroce.cli.demo_server import open_endpoint, open_for, serve
from pyroce.cli.errors import CliError
from pyroce.cli.progress import Progress
from pyroce.verbs.pyverbs_error import PyverbsError

FAULTS = ("loss", "reorder", "duplicate", "corrupt")
DEFAULT_TIMEOUT_S = 60.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo",
        help="two processes move data with RDMA and verify every byte",
        description="Run SEND/RECV, RDMA WRITE, RDMA READ and atomics between two pyroce devices in two "
        "processes (spawned here, or apart with --serve and --connect) and verify every byte.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--serve", metavar="[HOST:]PORT", type=types.listen_endpoint,
                       help="run only the server side, waiting on TCP PORT (0: any free port; it is printed)")  # fmt: skip
    where.add_argument("--connect", metavar="HOST:PORT", type=types.peer_endpoint,
                       help="run only the client side, against a --serve")  # fmt: skip
    where.add_argument("--connect-server", type=types.peer_endpoint, help=argparse.SUPPRESS)  # the local child
    for fault in FAULTS:
        parser.add_argument(f"--{fault}", type=types.probability, default=0.0, metavar="P",
                            help=f"{fault} probability per packet")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1, help="seed of the injected faults")
    parser.add_argument("--timeout", type=types.seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"seconds to wait for the peer: a client, an answer, a completion "
                        f"(default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON (docs/cli.md)")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    faults = {name: getattr(args, name) for name in FAULTS}
    if any(faults.values()):
        settings = ",".join(f"{name}={p}" for name, p in faults.items())
        os.environ["PYROCE_FAULTS"] = f"{settings},seed={args.seed}"  # both processes inherit it
    if args.serve:
        return _serve(args, out)
    if args.connect_server:
        return _local_server(args)
    ep = open_endpoint()  # before any server starts: a device error shows once
    try:
        if args.connect:
            return _client(connect(args.connect, args.timeout), ep, args, out)
        return _run_local(ep, args, out)
    finally:
        ep.close()


def _client(conn: Channel, ep: RcEndpoint, args: argparse.Namespace, out: TextIO) -> int:
    """Run the checks against the server on ``conn``; 1 if anything differed."""
    progress = Progress(sys.stderr)
    try:
        demo = Demo(conn, ep, progress)
        if not args.json:
            print(header_line(demo.client, demo.server, 128 << demo.mtu, demo.sizes), file=out, flush=True)
        report = demo.run()
    finally:
        progress.clear()
        conn.close()
    if args.json:
        print(json.dumps(report.document(), indent=2), file=out)
    else:
        print("\n".join(report.lines()), file=out)
    return 1 if report.mismatches else 0


def _run_local(ep: RcEndpoint, args: argparse.Namespace, out: TextIO) -> int:
    """Both sides on this host: the server is a child process that connects back over TCP.
    It takes its own loopback address even when ``PYROCE_ADDR`` is set: one address cannot
    hold two devices."""
    env = {name: value for name, value in os.environ.items() if name != "PYROCE_ADDR"}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        command = [sys.executable, "-m", "pyroce", "demo", "--timeout", str(args.timeout),
                   "--connect-server", f"127.0.0.1:{listener.getsockname()[1]}"]  # fmt: skip
        server = subprocess.Popen(command, env=env)
        try:
            conn = Channel(_accept_child(listener, server, args.timeout), args.timeout)
            conn.greet()
            return _client(conn, ep, args, out)
        finally:
            try:
                server.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _accept_child(listener: socket.socket, server: subprocess.Popen[bytes], timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    listener.settimeout(0.1)
    while True:
        try:
            return listener.accept()[0]
        except TimeoutError:
            if server.poll() is not None:
                raise CliError(f"the server process exited with status {server.returncode} before connecting") from None
            if time.monotonic() > deadline:
                raise CliError(f"the server process did not connect within {timeout:g} s") from None


def _local_server(args: argparse.Namespace) -> int:
    """The spawned server: once connected, its errors go to the client, which prints them."""
    conn = connect(args.connect_server, args.timeout)
    try:
        with closing(open_for(conn)) as ep:
            serve(conn, ep)
    except (CliError, PyverbsError, OSError):
        return 1
    finally:
        conn.close()
    return 0


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    """``--serve``: open the device (a bad ``PYROCE_ADDR`` is said now, not when a client comes),
    say where it listens, wait ``--timeout`` for a client, serve it, report."""
    with closing(open_endpoint()) as ep:
        try:
            listener = socket.create_server(args.serve)
        except OSError as exc:
            raise CliError(f"cannot listen on {args.serve[0]}:{args.serve[1]}: {exc.strerror or exc}") from None
        with listener:
            host, port = listener.getsockname()[:2]
            _say(out, args.json, f"pyroce demo: listening on {host}:{port} for {args.timeout:g} s",
                 {"listening": {"host": host, "port": port}})  # fmt: skip
            listener.settimeout(args.timeout)
            try:
                sock = listener.accept()[0]
            except TimeoutError:
                raise CliError(f"no client connected to {host}:{port} within {args.timeout:g} s") from None
        conn = Channel(sock, args.timeout)
        try:
            conn.greet()
            verdict = serve(conn, ep)
        finally:
            conn.close()
    if set(verdict) != {"operations", "bytes", "errors"}:
        raise CliError(f"the client at {conn.peer} ended without a verdict")
    _say(out, args.json, f"pyroce demo: served {conn.peer}, {verified_line(verdict)}",
         {"client": conn.peer, "verified": verdict})  # fmt: skip
    return 1 if verdict["errors"] else 0


def _say(out: TextIO, as_json: bool, text: str, document: dict[str, Any]) -> None:
    """A line of the server's output: text, or one JSON document per line."""
    print(json.dumps(document) if as_json else text, file=out, flush=True)
