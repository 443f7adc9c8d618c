"""pyroce: a software RoCEv2 RDMA stack in Python.

Which code runs. The .py files are the reference and the only source; a build with a C compiler
also compiles the hot modules from them with mypyc (setup.py), and those run when they are
built from the sources beside them. Every pyroce module loads from its .py instead (this
module's finder, before any other of pyroce is imported) when ``PYROCE_PURE=1``, when the build
was pure, or when a compiled module's source changed since the build (an edited editable
install: one warning line). All or none: the compiled modules of one mypyc group cannot run
beside pure copies of each other. ``COMPILED`` and ``BUILD`` say which runs and why
(``pyroce doctor``). This file is never compiled.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from importlib.util import spec_from_file_location
from types import ModuleType

__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(_HERE, "compiled.sha256")  # written at build by setup.py


def _choose() -> tuple[bool, str]:
    """Whether the compiled modules run, and why, from ``PYROCE_PURE`` and the build's manifest."""
    if os.environ.get("PYROCE_PURE") == "1":
        return False, "PYROCE_PURE=1"
    try:
        with open(MANIFEST, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        return False, "built without mypyc (setup.py compiles where mypy and a C compiler are)"
    if not lines or lines[0].startswith("# pure: "):
        return False, "built without mypyc: " + (lines[0][len("# pure: ") :] if lines else "no modules")
    for line in lines:
        digest, _, path = line.partition("  ")
        source = os.path.join(_HERE, path)
        try:
            with open(source, "rb") as file:
                same = hashlib.sha256(file.read()).hexdigest() == digest
        except FileNotFoundError:
            same = False
        stem = source[: -len(".py")]
        built = any(os.path.exists(stem + suffix) for suffix in EXTENSION_SUFFIXES)
        if not (same and built):
            why = f"pyroce/{path} {'has no compiled module' if same else 'changed since the compiled build'}"
            print(f"pyroce: {why}: every module runs from its .py (reinstall to compile again)", file=sys.stderr)
            return False, why
    return True, f"{len(lines)} modules built from these sources (PYROCE_PURE=1 runs every module from its .py)"


class _PureFinder(MetaPathFinder):
    """Finds every ``pyroce.*`` module's .py (or package's ``__init__.py``) before the path
    finder, which would take a compiled module beside it first."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("pyroce.") or path is None:
            return None
        name = fullname.rpartition(".")[2]
        for folder in path:
            package = os.path.join(folder, name, "__init__.py")
            if os.path.isfile(package):
                return spec_from_file_location(fullname, package, submodule_search_locations=[os.path.dirname(package)])
            module = os.path.join(folder, name + ".py")
            if os.path.isfile(module):
                return spec_from_file_location(fullname, module)
        return None  # a namespace package (pyroce.cm): the path finder's


COMPILED, BUILD = _choose()
if not COMPILED:
    sys.meta_path.insert(0, _PureFinder())
