"""``pyroce python [--force] ARGS...``: Python with pyroce's ``pyverbs`` importable, so a
program written for rdma-core's pyverbs runs unchanged on pyroce."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, TextIO

import pyroce
from pyroce.cli.errors import CliError
from pyroce.pyverbs_path import DIRECTORY, real_pyverbs

DESCRIPTION = """Run Python (python ARGS: a script and its arguments, -m MODULE, -c CODE) with
pyroce's pyverbs package first on PYTHONPATH: `from pyverbs.device import Context` opens
pyroce0. Where a real pyverbs (rdma-core's) is importable, this refuses unless --force, so
nothing meant for a real device runs on pyroce by mistake. The program runs as `python` would
run it: its output, traceback and exit status are its own. Python's own options go after
--: pyroce python -- -m pytest tests/."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("python", help="run Python with pyroce's pyverbs importable",
                                   description=DESCRIPTION)  # fmt: skip
    parser.add_argument("--force", action="store_true", help="run even where a real pyverbs is importable")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="what python is given: SCRIPT [ARG...], -m MODULE ...")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> NoReturn:
    if args.args[:1] == ["--"]:  # `pyroce python -- -m pytest`: what follows is python's
        args.args = args.args[1:]
    if not args.args:
        raise CliError("nothing to run: give a script (pyroce python SCRIPT [ARG...]) or -m MODULE")
    real = real_pyverbs()
    if real is not None and not args.force:
        raise CliError(f"a real pyverbs is importable ({real}); --force runs on pyroce's instead")
    out.flush()
    os.execve(sys.executable, [sys.executable, *args.args], environment(os.environ))


def environment(env: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    """``env`` with the pyverbs folder, then the folder pyroce itself was imported from, at
    the front of PYTHONPATH (so the program runs this pyroce)."""
    front = (str(DIRECTORY), str(Path(pyroce.__file__).resolve().parent.parent))
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, (*front, env.get("PYTHONPATH"))))}
