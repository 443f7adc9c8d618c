#!/usr/bin/env python3
"""rc_pingpong.py, uc_pingpong.py, srq_pingpong.py, ud_pingpong.py (links to this file): ``pyroce
rc_pingpong``, ``uc_pingpong``, ``srq_pingpong`` and ``ud_pingpong`` (rdma-core's ``ibv_*_pingpong``
on pyroce), the one named
like the file it was run as, for scripts that call them by path, such as ``tools/rxe_interop.sh``;
the tools themselves are ``pyroce.cli.pingpong``. Runs from an installed pyroce or else from this
checkout."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import pyroce  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pyroce.cli import main

if __name__ == "__main__":
    sys.exit(main([Path(__file__).stem, *sys.argv[1:]]))
