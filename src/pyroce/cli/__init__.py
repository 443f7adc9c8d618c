"""The ``pyroce`` command: one sub-command per tool, errors as one line and a non-zero exit.

Every error a user can cause is one line on stderr, ``pyroce <tool>: error: <what>`` (or
``pyroce: error: ...`` before a tool is chosen), with exit status 1 (2 for a bad command line).
Library code raises; this is the one place that turns its exceptions into that line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from pyroce import __version__
from pyroce.apps.rc_endpoint import PollTimeout
from pyroce.cli import (
    capture,
    corpus,
    decode,
    demo,
    devices,
    devinfo,
    doctor,
    events,
    nicd,
    pingpong,
    python,
    pyverbs_path,
    rdma_core_tests,
    run,
    stats,
)
from pyroce.cli.errors import CliError
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.wire import WireError

_TOOLS = (demo, decode, capture, stats, doctor, events, pingpong.RC_PINGPONG, pingpong.UC_PINGPONG, pingpong.SRQ_PINGPONG,
          pingpong.UD_PINGPONG, devices, devinfo, python, pyverbs_path, run, nicd, rdma_core_tests, corpus)  # fmt: skip

ENVIRONMENT = """\
environment:
  PYROCE_ADDR=IP           the device's address (an IPv4 or IPv6 address of this host); unset: each process
                           takes its own loopback address, 127.64.0.0/10 plus its pid
  PYROCE_PROGRESS=MODE     inline (default: the caller's thread also runs the engine), thread
                           (only the engine thread) or host (no thread: NicDevice.step)
  PYROCE_VERIFY_ICRC=0|1   check the ICRC of every received packet (default 1)
  PYROCE_GSO=0|1           UDP GSO and GRO (default 1); 0 sends one datagram per packet, for captures
  PYROCE_FAULTS=SPEC       injected faults, e.g. loss=0.05,reorder=0.05,duplicate=0.01,corrupt=0.01,seed=7
  PYROCE_STATS_DIR=DIR     where devices publish counters for `pyroce stats` (default /tmp/pyroce-UID)
  PYROCE_PRINT_STATS=0|1   a device prints its packet counters on stderr when it closes (C programs)
  PYROCE_NICD_IDLE=S       seconds the shared NIC runs without a program before it stops (default 60)
  PYROCE_NIC=own|shared    a Python program's NIC: its own (default) or the address's shared one
  PYROCE_VERBOSE=0|1       C programs: every refused verb says why on stderr (default 0: only opening)

docs/cli.md describes every command, its exit codes and JSON output."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line (no usage block), as every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pyroce", description="pyroce: a software RoCEv2 RDMA stack in Python.",
                           epilog=ENVIRONMENT, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--version", action="version", version=f"pyroce {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for tool in _TOOLS:
        tool_parser = tool.add_parser(subparsers)
        tool_parser.set_defaults(prefix=tool_parser.prog)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run a sub-command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return int(args.run(args, out or sys.stdout))
    except BrokenPipeError:  # output piped into head(1) and the like: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CliError, PyverbsError, PollTimeout, WireError, OSError) as exc:
        print(f"{args.prefix}: error: {describe(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def describe(exc: BaseException) -> str:
    """One line for an exception: an OSError's text without ``[Errno n]``, with its file."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)
