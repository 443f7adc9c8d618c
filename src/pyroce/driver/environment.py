"""The environment a program needs to run on the C driver, with or without ``pyroce run``.

``LD_LIBRARY_PATH`` puts pyroce's ``libibverbs.so.1`` before the system's,
``PYROCE_PYTHONPATH`` tells the library's interpreter where pyroce and its dependencies are
(this Python's ``sys.path``: a venv's site-packages is not where a bare interpreter looks), and
``PYROCE_PYTHON`` which Python starts the shared NIC when none runs.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

import pyroce


def search_path() -> list[str]:
    """pyroce's own import root first, then the folders of this interpreter's ``sys.path`` but
    its standard library: the interpreter the library starts has it already, and a Python
    program (pyverbs on Debian's python3) must keep its own."""
    root = str(Path(pyroce.__file__).resolve().parent.parent)
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib")}
    stdlib |= {os.path.join(folder, "lib-dynload") for folder in stdlib}
    folders = [root] + [entry for entry in sys.path if entry and os.path.isdir(entry)
                        and os.path.realpath(entry) not in stdlib]  # fmt: skip
    return list(dict.fromkeys(folders))


def driver_environment(library_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with what the C driver needs: its folder first on ``LD_LIBRARY_PATH``, and
    ``PYROCE_PYTHONPATH``."""
    library_path = os.pathsep.join(filter(None, (str(library_dir), env.get("LD_LIBRARY_PATH"))))
    return {**env, "LD_LIBRARY_PATH": library_path, "PYROCE_PYTHONPATH": os.pathsep.join(search_path()),
            "PYROCE_PYTHON": sys.executable}  # fmt: skip
