"""One ABI at the ring boundary: what the C driver takes from ``<infiniband/mlx5dv.h>`` and from
the ``pyroce_abi.h`` the build renders (``pyroce.driver.abi``) is what the Python side states.

A C program compiled against both headers prints every constant, every struct's size and every
member's offset and size; each is compared with the Python value or struct format it stands
for, read from its module when the test runs. So a Python value changed without the C side
following fails here: an mlx5 one (``WqeOpcode.SEND``, ``INLINE_FLAG``, a format in
``nic/wqe.py``) against mlx5dv.h, and one of pyroce's own against a header rendered before the
change (``test_a_python_change_the_c_side_does_not_follow_is_caught``); the build renders the
header again for a changed value (``test_the_build_renders_the_header_and_rebuilds_on_a_change``).

Skipped where the C compiler or libibverbs-dev (mlx5dv.h) is not installed."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from pyroce.driver import abi, build
from pyroce.nic import engine, wqe

INCLUDE = os.environ.get("PYROCE_VERBS_INCLUDE") or build.DEFAULT_INCLUDE
MISSING = [what for what, present in (("a C compiler (cc)", shutil.which(os.environ.get("CC") or "cc")),
                                      ("libibverbs-dev", Path(INCLUDE, "infiniband", "mlx5dv.h").is_file()))
           if not present]  # fmt: skip
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")
CONSTANTS = {constant.name: constant for constant in (*abi.OWN, *abi.MLX5)}


def check_program() -> str:
    """C that prints ``NAME<tab>VALUE`` for each constant, ``sizeof(TYPE)<tab>N`` for each struct
    and ``TYPE.MEMBER<tab>OFFSET SIZE`` for each member the Python formats lay out."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "", "#include <infiniband/mlx5dv.h>", "",
             '#include "pyroce_abi.h"', "", "int main(void)", "{"]  # fmt: skip
    for name in CONSTANTS:
        lines.append(f'\tprintf("%s\\t%lld\\n", "{name}", (long long)({name}));')
    for layout in abi.LAYOUTS:
        c_type = layout.c_type
        lines.append(f'\tprintf("%s\\t%zu\\n", "sizeof({c_type})", sizeof({c_type}));')
        for member in layout.members:
            lines.append(f'\tprintf("%s\\t%zu %zu\\n", "{c_type}.{member}", offsetof({c_type}, {member}), '
                         f"sizeof((({c_type} *)0)->{member}));")  # fmt: skip
    return "\n".join([*lines, "\treturn 0;", "}", ""])


def compile_and_run(folder: Path) -> dict[str, tuple[int, ...]]:
    """Build the check program against mlx5dv.h and the ``pyroce_abi.h`` in ``folder``; what it printed."""
    source = folder / "check_abi.c"
    source.write_text(check_program())
    binary = folder / "check_abi"
    done = subprocess.run([build.compiler(), "-Wall", "-Werror", f"-I{folder}", f"-I{INCLUDE}", str(source), "-o",
                           str(binary)], capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, f"the check program does not compile against mlx5dv.h:\n{done.stderr}"
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    return {name: tuple(map(int, values.split())) for name, values in (line.split("\t") for line in out.splitlines())}


def expected() -> dict[str, tuple[int, ...]]:
    """What Python says each printed line should be, from the modules as they are now."""
    want: dict[str, tuple[int, ...]] = {name: (constant.value,) for name, constant in CONSTANTS.items()}
    for layout in abi.LAYOUTS:
        size = layout.expected_size()
        if size is not None:
            want[f"sizeof({layout.c_type})"] = (size,)
        for member, offset, length in layout.fields():
            want[f"{layout.c_type}.{member}"] = (offset, length)
    return want


def mismatches(printed: dict[str, tuple[int, ...]]) -> list[str]:
    return [f"{name}: C {printed.get(name)}, Python {value}" for name, value in expected().items()
            if printed.get(name) != value]  # fmt: skip


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, ...]]:
    """The check program's output, with the header the build renders now."""
    folder = tmp_path_factory.mktemp("abi")
    (folder / abi.HEADER).write_text(abi.render())
    return compile_and_run(folder)


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_constant(printed: dict[str, tuple[int, ...]], name: str) -> None:
    constant = CONSTANTS[name]
    assert printed[name] == (constant.value,), f"{name} is {printed[name][0]:#x} in C, {constant.value:#x} in " \
                                               f"{constant.source}"  # fmt: skip


@pytest.mark.parametrize("layout", abi.LAYOUTS, ids=lambda layout: f"{layout.c_type} {layout.source}")
def test_layout(printed: dict[str, tuple[int, ...]], layout: abi.Layout) -> None:
    size = layout.expected_size()
    if size is not None:
        assert printed[f"sizeof({layout.c_type})"] == (size,), f"sizeof({layout.c_type}) vs {layout.source}"
    for member, offset, length in layout.fields():
        assert printed[f"{layout.c_type}.{member}"] == (offset, length), \
            f"{layout.c_type}.{member} (offset, size) vs {layout.source} {layout.get().format!r}"  # fmt: skip


def test_everything_printed_is_checked(printed: dict[str, tuple[int, ...]]) -> None:
    assert mismatches(printed) == []
    assert set(printed) <= set(expected()) | {f"sizeof({layout.c_type})" for layout in abi.LAYOUTS}


def test_send_wqe_segments_are_whole_ds_units(printed: dict[str, tuple[int, ...]]) -> None:
    """The control segment's ds counts 16-byte units: each segment but the inline header is whole
    units (nic/wqe.py's AV_SEGS and BIND_SEGS divide by SEG)."""
    unit = printed["PYROCE_SEND_WQE_DS"][0]
    for c_type in ("struct mlx5_wqe_ctrl_seg", "struct mlx5_wqe_raddr_seg", "struct mlx5_wqe_atomic_seg",
                   "struct mlx5_wqe_data_seg", "struct mlx5_wqe_datagram_seg", "struct pyroce_bind_seg"):  # fmt: skip
        assert printed[f"sizeof({c_type})"][0] % unit == 0, c_type
    assert printed["sizeof(struct mlx5_wqe_data_seg)"] == (wqe.SEG,)
    assert printed["sizeof(struct mlx5_wqe_datagram_seg)"] == (wqe.AV_SEGS * wqe.SEG,)


def test_a_python_change_the_c_side_does_not_follow_is_caught(printed: dict[str, tuple[int, ...]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The C side built before a Python value changed: each kind of change shows as a mismatch."""
    assert mismatches(printed) == []
    monkeypatch.setattr(engine, "RECV_DOORBELL", 4 << 24)  # pyroce's own: the rendered header had 2 << 24
    monkeypatch.setattr(wqe, "INLINE_FLAG", 0x40000000)  # mlx5's: MLX5_INLINE_SEG stays 0x80000000
    monkeypatch.setattr(wqe, "_RADDR", struct.Struct(">QHxxI"))  # a layout: rkey is a __be32, not 16 bits
    monkeypatch.setattr(wqe, "BIND_SEGS", 3)  # the bind segment grows to 48 bytes
    found = {line.split(":")[0] for line in mismatches(printed)}
    assert found == {"PYROCE_RECV_DOORBELL", "MLX5_INLINE_SEG", "struct mlx5_wqe_raddr_seg.rkey",
                     "PYROCE_BIND_SEG_SIZE", "sizeof(struct pyroce_bind_seg)"}  # fmt: skip
    with pytest.raises(ValueError, match="4 fields for 3 members"):
        monkeypatch.setattr(wqe, "_RADDR", struct.Struct(">QIHH"))
        expected()


def test_an_mlx5_enum_value_is_checked_by_name() -> None:
    """Every WqeOpcode but pyroce's own BIND_MW is an MLX5_OPCODE_*, every CqeOpcode an
    MLX5_CQE_*, every CqeSyndrome an MLX5_CQE_SYNDROME_*: a new member needs mlx5dv.h's name."""
    names = {constant.name for constant in abi.MLX5}
    assert {f"MLX5_OPCODE_{op.name}" for op in wqe.WqeOpcode if op.name != "BIND_MW"} <= names
    assert "PYROCE_OPCODE_BIND_MW" in CONSTANTS and "MLX5_OPCODE_BIND_MW" not in names


def test_the_build_renders_the_header_and_rebuilds_on_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """library_dir writes abi.render() beside the library it builds, and a changed Python
    constant is a new cache key: a new build with a header that has the new value."""
    commands: list[list[str]] = []

    def fake_compile(command: list[str], work: Path, log: Path) -> None:  # no compiler run: the cache key is tested
        commands.append(command)
        Path(command[command.index("-o") + 1]).write_bytes(b"")

    monkeypatch.setenv("PYROCE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "compile_one", fake_compile)
    first = build.library_dir()
    assert (first / abi.HEADER).read_text() == abi.render()
    assert any(f"-I{first.parent}" in part for part in commands[0])  # the work folder, renamed to `first`
    assert build.library_dir() == first and len(commands) == len(build.STUB_LIBRARIES) + 2  # cached
    monkeypatch.setattr(engine, "SEND_DOORBELL", 4 << 24)
    second = build.library_dir()
    assert second != first
    assert "#define PYROCE_SEND_DOORBELL        0x4000000u /* nic/engine.py SEND_DOORBELL */" in \
        (second / abi.HEADER).read_text()  # fmt: skip


def test_every_rendered_constant_is_used_by_the_driver() -> None:
    """pyroce_abi.h holds what the C side uses, nothing more, and no C source defines one of its names."""
    sources = "\n".join(path.read_text() for path in sorted(build.SOURCES.glob("*.[ch]")))
    header = abi.render()
    for constant in abi.OWN:
        assert constant.name in sources or header.count(constant.name) > 1, f"{constant.name} is not used"
        assert f"#define {constant.name}" not in sources, f"{constant.name} restated in driver/c"
