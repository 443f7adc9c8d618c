"""The environment a program needs to run on the C driver, with or without ``pyroce run``.

``LD_LIBRARY_PATH`` puts pyroce's ``libibverbs.so.1`` before the system's, ``LD_PRELOAD`` adds
``libpyroce_rdmacm.so`` (the kernel's rdma_cm file, for the system's librdmacm); the library runs no
Python itself, but starts the shared NIC (``pyroce nicd``) when none serves: ``PYROCE_PYTHON`` is
the Python it starts, ``PYROCE_PYTHONPATH`` where that Python finds pyroce and its dependencies
(this Python's ``sys.path``: a venv's site-packages is not where a bare interpreter looks).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

import pyroce
from pyroce.driver.build import RDMA_CM_LIBRARY
from pyroce.driver.sysfs import write_sysfs
from pyroce.host.registry import SHARED_NIC_ADDRESS


def search_path() -> list[str]:
    """pyroce's own import root first, then the folders of this interpreter's ``sys.path`` but
    its standard library, which the NIC's Python (this one) has already."""
    root = str(Path(pyroce.__file__).resolve().parent.parent)
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib")}
    stdlib |= {os.path.join(folder, "lib-dynload") for folder in stdlib}
    folders = [root] + [entry for entry in sys.path if entry and os.path.isdir(entry)
                        and os.path.realpath(entry) not in stdlib]  # fmt: skip
    return list(dict.fromkeys(folders))


def preload(library_dir: Path, current: str | None) -> str:
    """``LD_PRELOAD`` with ``libpyroce_rdmacm.so`` after the program's own preloads (theirs
    come first, as the program asked), once."""
    shim = str(library_dir / RDMA_CM_LIBRARY)
    entries = (current or "").replace(" ", ":").split(":")
    return ":".join([entry for entry in entries if entry and entry != shim] + [shim])


def driver_environment(library_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with what the C driver needs: its folder first on ``LD_LIBRARY_PATH``,
    ``libpyroce_rdmacm.so`` on ``LD_PRELOAD`` (the rdma_cm file, for librdmacm, and sysfs's RDMA
    folders from ``PYROCE_SYSFS``, written here for the NIC's address), and ``PYROCE_PYTHONPATH``."""
    library_path = os.pathsep.join(filter(None, (str(library_dir), env.get("LD_LIBRARY_PATH"))))
    sysfs = write_sysfs(library_dir.parent, env.get("PYROCE_ADDR") or SHARED_NIC_ADDRESS)
    return {**env, "LD_LIBRARY_PATH": library_path, "LD_PRELOAD": preload(library_dir, env.get("LD_PRELOAD")),
            "PYROCE_PYTHONPATH": os.pathsep.join(search_path()), "PYROCE_PYTHON": sys.executable,
            "PYROCE_SYSFS": str(sysfs)}  # fmt: skip
