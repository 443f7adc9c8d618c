"""The ``pyroce`` command: one sub-command per tool, errors as one line and a non-zero exit."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from pyroce import __version__
from pyroce.cli import decode, demo, events, stats
from pyroce.wire import WireError

_TOOLS = (demo, decode, stats, events)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyroce", description="pyroce: a software RoCEv2 RDMA stack in Python.")
    parser.add_argument("--version", action="version", version=f"pyroce {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for tool in _TOOLS:
        tool.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run a sub-command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args, out or sys.stdout)
    except BrokenPipeError:  # output piped into head(1) and the like: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (WireError, OSError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = f": {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        print(f"pyroce: error{where}: {detail}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
