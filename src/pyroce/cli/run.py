"""``pyroce run [--print-env] -- PROGRAM [ARGS...]``: run an unmodified libibverbs program on
pyroce, through the C driver (``pyroce.driver``), built on first use."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
from typing import Any, TextIO

from pyroce.cli.errors import CliError
from pyroce.driver.build import BuildError, library_dir
from pyroce.driver.environment import driver_environment
from pyroce.host.registry import LinkError, configured_address, device_settings

DESCRIPTION = """Run PROGRAM (ibv_devinfo, ibv_rc_pingpong -d pyroce0 -g 3, ...) with pyroce's
libibverbs.so.1 in place of the system's: it sees the device pyroce0, and its verbs run on the
shared NIC of its address (PYROCE_ADDR, default 127.0.0.1: `pyroce nicd`, started by the first
program that finds none; programs on one address share it). librdmacm programs (rping, ucmatose,
ib_send_bw -R, ...) run too: libpyroce_rdmacm.so, preloaded, serves the kernel's rdma_cm file
from the shared NIC's connection manager. No Python runs in the program. The
library is compiled on first use with the system's cc and libibverbs-dev's headers, and cached
(PYROCE_CACHE_DIR, default ~/.cache/pyroce).
--print-env prints the environment instead, as shell lines, for a harness that starts the
program itself. A program linked statically, or setuid, ignores LD_LIBRARY_PATH."""
VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYROCE_PYTHONPATH", "PYROCE_PYTHON")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("run", help="run a libibverbs program on pyroce (C driver)", description=DESCRIPTION)
    parser.add_argument("--print-env", action="store_true", help="print the environment the program needs and exit")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="PROGRAM [ARGS...] (after --)")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program and not args.print_env:
        raise CliError("nothing to run: pyroce run -- PROGRAM [ARGS...]")
    if program and shutil.which(program[0]) is None:
        raise CliError(_not_runnable(program[0]))
    try:  # a bad PYROCE_* value said now, not as "Failed to open device" (or not at all: a running NIC's)
        configured_address()
        device_settings()
    except LinkError as exc:
        raise CliError(exc.strerror or str(exc)) from None
    try:
        env = driver_environment(library_dir(), os.environ)
    except BuildError as exc:
        raise CliError(str(exc)) from None
    if args.print_env:
        print("\n".join(f"export {name}={shlex.quote(env[name])}" for name in VARIABLES), file=out)
        return 0
    out.flush()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; the program must not inherit that
    os.execvpe(program[0], program, env)


def _not_runnable(name: str) -> str:
    """Why ``name`` cannot run, as a shell says it: a path that exists but is not an executable
    file is not "not found"."""
    if "/" in name and os.path.exists(name):
        return f"{name}: {'Is a directory' if os.path.isdir(name) else 'Permission denied (not executable: chmod +x)'}"
    return f"{name}: command not found"
