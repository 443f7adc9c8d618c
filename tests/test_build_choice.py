"""Which code runs (``pyroce/__init__.py``): the modules compiled with mypyc only when they were
built from the sources beside them, every module's .py otherwise, with ``PYROCE_PURE=1``, and
with one warning line when a source changed since the build. Each case runs in a fresh Python,
on this tree's sources or on a copy of them."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pyroce
from tests import cli

PACKAGE = Path(pyroce.__file__).parent
HOT = ("pyroce.wire.packet", "pyroce.transport.requester", "pyroce.nic.engine")  # compiled where the build compiles
# Imports the hot modules and says which files every pyroce module came from.
REPORT = f"""
import importlib, json, sys, pyroce
for name in {HOT!r}:
    importlib.import_module(name)
files = {{name: module.__file__ for name, module in sys.modules.items()
         if name.startswith("pyroce") and getattr(module, "__file__", None)}}
print(json.dumps({{"compiled": pyroce.COMPILED, "build": pyroce.BUILD, "files": files}}))
"""
needs_compiled = pytest.mark.skipif(not (PACKAGE / "compiled.sha256").is_file() or not pyroce.COMPILED,
                                    reason="this install is pure (no mypyc build), or PYROCE_PURE=1")  # fmt: skip


def report(env: dict[str, str] | None = None, path: Path | None = None) -> tuple[dict, str]:
    """(what the fresh Python says, its stderr); ``path`` first on PYTHONPATH instead of this tree's src."""
    full = cli.cli_env(env, drop=() if env and "PYROCE_PURE" in env else ("PYROCE_PURE",))
    if path is not None:
        full["PYTHONPATH"] = str(path)
    done = subprocess.run([sys.executable, "-c", REPORT], env=full, capture_output=True, text=True, timeout=60,
                          check=True)  # fmt: skip
    return json.loads(done.stdout), done.stderr


def all_pure(files: dict[str, str]) -> bool:
    return all(file.endswith(".py") for file in files.values())


def copy_of_install(tmp_path: Path) -> Path:
    """This install's pyroce (sources, compiled modules, manifest) and mypyc's shared library beside it."""
    shutil.copytree(PACKAGE, tmp_path / "pyroce", ignore=shutil.ignore_patterns("__pycache__"))
    for library in PACKAGE.parent.glob("pyroce__mypyc*"):
        shutil.copy2(library, tmp_path)
    return tmp_path / "pyroce"


def test_pyroce_pure_loads_every_module_from_its_py() -> None:
    found, stderr = report({"PYROCE_PURE": "1"})
    assert not found["compiled"] and found["build"] == "PYROCE_PURE=1" and stderr == ""
    assert set(HOT) <= set(found["files"]) and all_pure(found["files"])


def test_doctor_says_which_runs_and_why() -> None:
    result = cli.pyroce("doctor", "--json", env={"PYROCE_PURE": "1"}, timeout=60)
    build = {check["name"]: check for check in json.loads(result.stdout)["checks"]}["build"]
    assert build["ok"] and build["value"] == "pure Python" and build["why"] == "PYROCE_PURE=1"


@needs_compiled
def test_the_compiled_build_runs_when_built_from_these_sources() -> None:
    found, stderr = report()
    assert found["compiled"] and "modules built from these sources" in found["build"] and stderr == ""
    assert all(not found["files"][name].endswith(".py") for name in HOT)


@needs_compiled
def test_an_edited_source_runs_every_module_pure_with_one_warning(tmp_path: Path) -> None:
    package = copy_of_install(tmp_path)
    source = package / "transport" / "requester.py"
    source.write_text(source.read_text() + "\nEDITED = True\n")
    found, stderr = report(path=tmp_path)
    assert stderr.count("\n") == 1 and "pyroce/transport/requester.py changed since the compiled build" in stderr
    assert not found["compiled"] and all_pure(found["files"])
    assert all(file.startswith(str(package)) for file in found["files"].values())


def test_a_manifest_that_does_not_match_runs_every_module_pure(tmp_path: Path) -> None:
    """The same rule without a compiler at hand: a manifest naming a source with another digest,
    and one naming a source whose compiled module is absent."""
    package = copy_of_install(tmp_path)
    bth = package / "wire" / "bth.py"
    for digest, words in (("0" * 64, "pyroce/wire/bth.py changed since the compiled build"),
                          (hashlib.sha256(bth.read_bytes()).hexdigest(), "pyroce/wire/bth.py has no compiled module")):  # fmt: skip
        for library in bth.parent.glob("bth.*.so"):
            library.unlink()
        (package / "compiled.sha256").write_text(f"{digest}  wire/bth.py\n")
        found, stderr = report(path=tmp_path)
        assert not found["compiled"] and found["build"] == words and all_pure(found["files"])
        assert stderr == f"pyroce: {words}: every module runs from its .py (reinstall to compile again)\n"
