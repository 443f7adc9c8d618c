"""The shared NIC's place computed by the C library (``driver/c/nic_place.c``) is the one
``pyroce.nicd.place`` computes, so a C program finds the NIC a Python one started and the other
way round: the same socket name, folder and address for the stats folder, the temporary folder
(``TMPDIR`` made absolute and normal, or unusable and passed over) and addresses in every form."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import ROOT

SOURCES = ROOT / "src" / "pyroce" / "driver" / "c"
PYTHON_PLACE = """
from pyroce.nicd.place import nic_place
try:
    place = nic_place()
except OSError as exc:
    print("error", exc.errno, exc.strerror)
else:
    print("name", place.socket_name[1:])
    print("folder", place.folder)
    print("address", place.address)
"""


@pytest.fixture(scope="module")
def c_place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("cc"):
        pytest.skip("no C compiler (cc)")
    program = tmp_path_factory.mktemp("place") / "place_name"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", f"-I{SOURCES}", "-o", str(program),
                    str(ROOT / "tests" / "c" / "place_name.c"), str(SOURCES / "nic_place.c")],
                   check=True, capture_output=True)  # fmt: skip
    return program


def places(c_place: Path, env: dict[str, str], cwd: Path) -> tuple[str, str]:
    """(C's answer, Python's) with ``env`` in ``cwd``."""
    full = {name: value for name, value in os.environ.items()
            if name not in ("PYROCE_ADDR", "PYROCE_STATS_DIR", "TMPDIR", "TEMP", "TMP")}  # fmt: skip
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH"))))
    c = subprocess.run([str(c_place)], env=full, cwd=cwd, capture_output=True, text=True, check=True).stdout
    python = subprocess.run([sys.executable, "-c", PYTHON_PLACE], env=full, cwd=cwd, capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    return c, python


@pytest.mark.parametrize("address", ["", "10.1.2.3", "127.200.9.9", "2001:DB8:0:0:1:0:0:1", "2001:0db8::0001", "::1",
                                     "1:0:0:0:0:0:0:0", "::ffff:1.2.3.4", "::1.2.3.4", "fd00:0:0:1::", "1:0:0:1:0:0:0:1",
                                     "fe80::1", "169.254.1.1", "not-an-address", "1.2.3", "01.2.3.4", "::ffff:0:0"])  # fmt: skip
def test_addresses_read_alike(c_place: Path, tmp_path: Path, address: str) -> None:
    c, python = places(c_place, {"PYROCE_STATS_DIR": str(tmp_path / "stats"), "PYROCE_ADDR": address}, tmp_path)
    assert c == python


@pytest.mark.parametrize("folder", ["stats", "with space/ünï", "trailing/", "a/./b/../c"])
def test_stats_folders_hash_alike(c_place: Path, tmp_path: Path, folder: str) -> None:
    c, python = places(c_place, {"PYROCE_STATS_DIR": f"{tmp_path}/{folder}"}, tmp_path)
    assert c == python
    assert f"name pyroce-nicd/{os.getuid()}/" in c and "pyroce0@127.0.0.1" in c


@pytest.mark.parametrize("variable", ["TMPDIR", "TEMP", "TMP"])
@pytest.mark.parametrize("value", ["tmp", "./x/../tmp//", "{root}/tmp/", "{root}/missing", ""])
def test_the_temporary_folder_is_pythons(c_place: Path, tmp_path: Path, variable: str, value: str) -> None:
    """No PYROCE_STATS_DIR: tempfile.gettempdir()'s folder (a relative one made absolute, a
    missing one passed over for /tmp) + pyroce-<uid>, made if missing."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "x").mkdir()
    c, python = places(c_place, {variable: value.format(root=tmp_path)}, tmp_path)
    assert c == python
    if value and "missing" not in value:
        assert f"folder {tmp_path}/tmp/pyroce-{os.getuid()}\n" in c
        assert (tmp_path / "tmp" / f"pyroce-{os.getuid()}").is_dir()
