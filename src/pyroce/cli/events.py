"""``pyroce events``: print the asynchronous events of a context of a device as they come, as
``ibv_asyncwatch`` does (``pyroce.apps.asyncwatch``)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pyroce.apps.asyncwatch import describe, watch
from pyroce.verbs.device import Context

DESCRIPTION = """Print the asynchronous events of a pyroce device as they come, as ibv_asyncwatch
does, until interrupted, COUNT events or TIMEOUT seconds. Like ibv_asyncwatch it opens a
context of its own, which sees the port and device events (the port going down and up); a QP's,
CQ's or SRQ's events go to the context that created it. Each process has its own pyroce0: this
command sees the device it opens in its own process. Within a program or a test, use
pyroce.apps.asyncwatch.watch(ctx) with the context whose objects raise the events."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("events", help="print a device's async events (ibv_asyncwatch)",
                                   description=DESCRIPTION)  # fmt: skip
    parser.add_argument("-d", "--ib-dev", default="pyroce0", help="the device (default pyroce0)")
    parser.add_argument("--count", type=int, help="stop after this many events")
    parser.add_argument("--timeout", type=float, help="stop after this many seconds")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    """Errors (no such device) reach ``pyroce.cli.main``, which prints them in one line."""
    with Context(name=args.ib_dev) as ctx:
        print(f"{ctx.name}: async event FD {ctx.async_fd}", file=out, flush=True)
        for event in watch(ctx, args.count, args.timeout):
            print(describe(event), file=out, flush=True)
    return 0
