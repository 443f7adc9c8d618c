"""``pyroce pyverbs-path``: the folder to put on ``PYTHONPATH`` so that ``import pyverbs``
finds pyroce's (``pyroce.pyverbs_path``), for runners ``pyroce python`` does not start."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pyroce.pyverbs_path import DIRECTORY

DESCRIPTION = """Print the folder that holds pyroce's pyverbs package (rdma-core's module names
over pyroce.verbs), for PYTHONPATH: PYTHONPATH=$(pyroce pyverbs-path) pytest ... Whatever
that runs imports pyroce's pyverbs, even where a real pyverbs is installed."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("pyverbs-path", help="the folder of pyroce's pyverbs package, for PYTHONPATH",
                                   description=DESCRIPTION)  # fmt: skip
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    print(DIRECTORY, file=out)
    return 0
