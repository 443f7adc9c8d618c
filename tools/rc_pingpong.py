#!/usr/bin/env python3
"""rc_pingpong.py: ``pyroce rc_pingpong`` (rdma-core's ``ibv_rc_pingpong`` on pyroce) for
scripts that call it by path, such as ``tools/rxe_interop.sh``; the tool itself is
``pyroce.cli.rc_pingpong``. Runs from an installed pyroce or else from this checkout."""

from __future__ import annotations

import sys

try:
    import pyroce  # noqa: F401
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pyroce.cli import main

if __name__ == "__main__":
    sys.exit(main(["rc_pingpong", *sys.argv[1:]]))
