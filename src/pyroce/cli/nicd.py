"""``pyroce nicd``: the shared NIC, one per user, device and address (``pyroce.nicd``).

In the foreground it serves with its log on stderr until Ctrl-C, SIGTERM, ``--stop`` or idle;
``--background`` is how a program that finds no NIC starts one (it prints one line: ``ready
PID``, ``busy`` when another NIC serves the place, or ``failed WHY``); ``--stop`` and
``--status`` speak to a running one. SIGUSR1 prints every thread's stack of the service (and of
an engine, sent to it) into the log: what a NIC that does not stop is waiting for.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
from typing import Any, TextIO

from pyroce.cli.args import seconds_or_zero
from pyroce.cli.errors import CliError
from pyroce.host.registry import LinkError
from pyroce.link.steering import MAX_ENGINES, Steering
from pyroce.nicd.client import NicError, ask
from pyroce.nicd.engine_server import EngineServer
from pyroce.nicd.engines import default_engines
from pyroce.nicd.launch import BUSY, FAILED, READY
from pyroce.nicd.place import DEFAULT_DEVICE, NicPlace, nic_place
from pyroce.nicd.server import DEFAULT_IDLE_S, NicBusy, NicServer, open_server
from pyroce.verbs.pyverbs_error import PyverbsError

DESCRIPTION = """The shared NIC: one pyroce0 per user and address (PYROCE_ADDR, default 127.0.0.1) that every
program run with `pyroce run` uses, as programs share the kernel's rxe. The first such program starts it when
none runs; it stops by itself once no program has used it for --idle seconds. Run in the foreground, it
prints its log."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("nicd", help="run, stop or query the shared NIC", description=DESCRIPTION)
    parser.add_argument("--device", default=DEFAULT_DEVICE, help="the device (default pyroce0)")
    parser.add_argument("--idle", type=seconds_or_zero, help="stop after this many seconds without a program, 0: never "
                                                     f"(default PYROCE_NICD_IDLE or {DEFAULT_IDLE_S:.0f})")  # fmt: skip
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop the running NIC (its programs' QPs go with it)")
    action.add_argument("--status", action="store_true", help="print the running NIC's pid, address and programs")
    action.add_argument("--background", action="store_true", help="start in the background; print one line")
    parser.add_argument("--json", action="store_true", help="--status as JSON")
    parser.add_argument("--engines", type=engine_count, help="engine processes at most, each serving its programs "
                        f"on its own core (default PYROCE_NICD_ENGINES or one per two cores, up to 4: here "
                        f"{default_engines()})")  # fmt: skip
    parser.add_argument("--engine", type=engine_place, help=argparse.SUPPRESS)  # INDEX/COUNT: an engine the NIC runs
    parser.add_argument("--control", type=int, help=argparse.SUPPRESS)  # the engine's end of its control pair
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    place = nic_place(args.device)
    if args.idle is None:
        try:
            args.idle = seconds_or_zero(os.environ.get("PYROCE_NICD_IDLE", str(DEFAULT_IDLE_S)))
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"PYROCE_NICD_IDLE: {exc}") from None
    if args.engine is not None:
        return _engine(place, args.engine, args.control)
    if args.engines is None:
        try:
            args.engines = engine_count(os.environ.get("PYROCE_NICD_ENGINES", str(default_engines())))
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"PYROCE_NICD_ENGINES: {exc}") from None
    if args.stop or args.status:
        return _ask(place, "stop" if args.stop else "status", args.json, out)
    if args.background:
        return _background(place, args.idle, args.engines, out)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="pyroce nicd: %(message)s")
    server = _open(place, args.idle, args.engines)
    _stop_on_signals(server)
    server.serve()
    return 0


def engine_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_ENGINES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of engines from 1 to {MAX_ENGINES}")
    return count


def engine_place(text: str) -> Steering:
    index, _, count = text.partition("/")
    try:
        return Steering(int(count), int(index))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _engine(place: NicPlace, steering: Steering, control: int | None) -> int:
    """Run as engine ``steering.index`` of a NIC, for its service (``nicd.engines``): its log
    goes where the service's does, each line naming the engine."""
    if control is None:
        raise CliError("--engine needs --control (an engine is started by the NIC's service)")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s pyroce nicd engine {steering.index}: %(message)s")  # fmt: skip
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the service's to act on: it stops its engines
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    control_socket = socket.socket(fileno=control)
    try:
        server = EngineServer(place, steering, control_socket)
    except (LinkError, PyverbsError, OSError) as exc:
        logging.getLogger("pyroce.nicd").error("cannot serve %s: %s", place.describe(), exc)
        control_socket.close()
        return 1
    signal.signal(signal.SIGTERM, lambda _signum, _frame: server.stop())
    server.serve()
    return 0


def _open(place: NicPlace, idle_s: float, engines: int) -> NicServer:
    try:
        return open_server(place, idle_s, engines)
    except NicBusy as exc:
        raise CliError(str(exc)) from None
    except LinkError as exc:
        raise CliError(f"cannot serve {place.describe()}: {exc.strerror or exc}") from None


def _stop_on_signals(server: NicServer) -> None:
    """SIGTERM (and SIGINT) end the service at its next turn, never in the middle of a command;
    SIGUSR1 prints its threads' stacks to the log (written by faulthandler's C handler, so a
    service blocked in a wait answers too)."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: server.stop())
    signal.signal(signal.SIGINT, lambda _signum, _frame: server.stop())
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _background(place: NicPlace, idle_s: float, engines: int, out: TextIO) -> int:
    """Fork the service into a session of its own; it writes the one line when it serves (the
    caller reads stdout to its end, which comes once the service has left it for its log)."""
    out.flush()
    if os.fork():
        os._exit(0)
    os.setsid()
    log = os.open(place.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(log, 2)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s pyroce nicd: %(message)s")
    try:
        server = open_server(place, idle_s, engines)
    except NicBusy:
        print(BUSY, file=out, flush=True)
        os._exit(0)
    except (LinkError, OSError) as exc:
        logging.getLogger("pyroce.nicd").error("cannot serve %s: %s", place.describe(), exc)
        print(
            f"{FAILED} cannot serve {place.describe()}: {getattr(exc, 'strerror', None) or exc}", file=out, flush=True
        )
        os._exit(1)
    print(f"{READY} {os.getpid()}", file=out, flush=True)
    os.dup2(log, 1)
    os.close(log)
    _stop_on_signals(server)
    try:
        server.serve()
    finally:
        os._exit(0)


def _ask(place: NicPlace, request: str, as_json: bool, out: TextIO) -> int:
    try:
        answer = ask(place, request)
    except NicError as exc:
        raise CliError(exc.strerror) from None
    if request == "stop":
        print(f"pyroce nicd: stopped {place.describe()} (pid {answer})", file=out)
    elif as_json:
        print(json.dumps(answer), file=out)
    else:
        print(describe_status(place, answer), file=out)
    return 0


def describe_status(place: NicPlace, answer: dict[str, Any]) -> str:
    programs = " ".join(map(str, answer["programs"])) or "none"
    engines = answer.get("engines", [])
    line = f"{place.describe()}: pid {answer['pid']}, {answer['qps']} QPs, programs (pids): {programs}"
    if len(engines) < 2:
        return line
    return (
        line
        + "; engines: "
        + ", ".join(
            f"{engine['index']} (pid {engine['pid']}, {len(engine['programs'])} programs, {engine['qps']} QPs)"
            for engine in engines
        )
    )
