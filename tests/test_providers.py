"""pyroce's provider libraries and libibverbs carry what programs built against rdma-core bind
to: every (symbol, version) of the system's installed libmlx5.so.1, libefa.so.1 and libibverbs
(its public nodes and ``ibv_query_gid_type`` at its private one), read from their ELF tables as
the build reads them; rdma-core 65's newer versions; each stub answering "not this device" as
the real library does; UCX's and libfabric's provider-linked libraries load with every symbol
bound at once; and the newer verbs pyroce does (``ibv_reg_mr_ex``, ``ibv_query_port_speed``).
Skipped only where the C compiler, libibverbs-dev or ibverbs-utils are not installed."""

from __future__ import annotations

import ctypes
import errno
import subprocess
from pathlib import Path

import pytest

from pyroce.driver.elf import version_nodes
from pyroce.driver.providers import PROVIDERS, system_library
from tests.cli import ROOT, command
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")
LINKED = ("ucx/libuct_ib.so.0", "libfabric.so.1")  # what links libmlx5 (UCX) and libefa (libfabric)


def built(env: dict[str, str], name: str) -> Path:
    return Path(env["LD_LIBRARY_PATH"].split(":")[0]) / name


def defined(path: Path, *, older: bool = True) -> set[tuple[str, str]]:
    """(version, symbol) of each symbol ``path`` defines; ``older=False``: default versions only."""
    return {(node.name, symbol) for node in version_nodes(path) for symbol in node.symbols
            if older or symbol not in node.hidden}  # fmt: skip


@pytest.mark.parametrize("name", [provider.library for provider in PROVIDERS] + ["libibverbs.so.1"])
def test_every_symbol_version_of_the_systems_library_is_there(driver_env: dict[str, str], name: str) -> None:  # noqa: F811
    system = system_library(name)
    if system is None:
        pytest.skip(f"no system {name}")
    ours = defined(built(driver_env, name))
    verbs = name == "libibverbs.so.1"  # not its libibverbs 1.0 compatibility functions, nor providers' private ones
    wanted = {(node, symbol) for node, symbol in defined(system, older=not verbs)
              if not verbs or not node.startswith("IBVERBS_PRIVATE") or symbol == "ibv_query_gid_type"}
    assert wanted - ours == set()


def test_rdma_core_65s_newer_versions_are_there(driver_env: dict[str, str]) -> None:  # noqa: F811
    """What rdma-core 65's pyverbs and providers' users need beyond rdma-core 44."""
    mlx5, efa = defined(built(driver_env, "libmlx5.so.1")), defined(built(driver_env, "libefa.so.1"))
    verbs = defined(built(driver_env, "libibverbs.so.1"))
    assert {("MLX5_1.11", "mlx5dv_devx_get_event"), ("MLX5_1.25", "mlx5dv_reg_dmabuf_mr"),
            ("MLX5_1.27", "mlx5dv_devx_obj_import"), ("MLX5_1.0", "mlx5dv_init_obj"), ("MLX5_1.2", "mlx5dv_init_obj")} <= mlx5
    assert {("EFA_1.3", "efadv_query_mr"), ("EFA_1.6", "efadv_qp_from_ibv_qp_ex"),
            ("EFA_1.7", "efadv_create_comp_cntr")} <= efa  # fmt: skip
    assert {("IBVERBS_1.15", "ibv_reg_mr_ex"), ("IBVERBS_1.16", "ibv_query_port_speed"),
            ("IBVERBS_1.17", "ibv_alloc_buf"), ("IBVERBS_1.18", "ibv_create_comp_cntr"),
            ("IBVERBS_PRIVATE_65", "ibv_query_gid_type")} <= verbs  # fmt: skip


def test_the_stubs_answer_as_for_a_device_not_their_own(driver_env: dict[str, str]) -> None:  # noqa: F811
    mlx5 = ctypes.CDLL(str(built(driver_env, "libmlx5.so.1")), use_errno=True)
    efa = ctypes.CDLL(str(built(driver_env, "libefa.so.1")), use_errno=True)
    mlx5.mlx5dv_is_supported.restype = ctypes.c_bool
    assert mlx5.mlx5dv_is_supported(None) is False
    mlx5.mlx5dv_open_device.restype = ctypes.c_void_p
    assert mlx5.mlx5dv_open_device(None, None) is None and ctypes.get_errno() == errno.EOPNOTSUPP
    assert mlx5.mlx5dv_query_device(None, None) == errno.EOPNOTSUPP
    assert efa.efadv_get_max_sq_depth(None, None, 0) == -errno.EOPNOTSUPP


@pytest.mark.parametrize("library", LINKED)
def test_libraries_linked_against_the_providers_load_with_every_symbol_bound(driver_env: dict[str, str],  # noqa: F811
                                                                             library: str) -> None:  # fmt: skip
    path = next((folder / library for folder in (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib"))
                 if (folder / library).is_file()), None)  # fmt: skip
    if path is None:
        pytest.skip(f"{library} not installed")
    code = f"import ctypes, os; ctypes.CDLL({str(path)!r}, os.RTLD_NOW); print('loaded')"
    done = subprocess.run(command("run", "--", "python3", "-c", code), env={**driver_env, "LD_BIND_NOW": "1"},
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.stdout.strip() == "loaded", done.stderr


def test_reg_mr_ex_and_query_port_speed(driver_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    """tests/c/newer_verbs.c, built against the system's header, binding the verbs by version."""
    program = tmp_path / "newer_verbs"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", f"-I{ROOT / 'tests' / 'c'}", "-o", str(program),
                    str(ROOT / "tests" / "c" / "newer_verbs.c"), "-libverbs", "-ldl"], check=True)  # fmt: skip
    done = subprocess.run(command("run", "--", str(program)), env=driver_env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for line in ("reg_mr_ex 0", "mr addr_ok 1 length 4096 rkey_ok 1", "dereg_mr 0", f"reg_mr_ex_fd {errno.EOPNOTSUPP}",
                 f"reg_mr_ex_no_addr {errno.EINVAL}", "query_port_speed 0", f"create_comp_cntr {errno.EOPNOTSUPP}"):
        assert line in lines, done.stdout
    speed, width, lane = (int(word) for word in next(line for line in lines if line.startswith("speed ")).split()[1::2])
    lanes = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
    mbps = {1: 2500, 2: 5000, 4: 10000, 8: 10000, 16: 14000, 32: 25000, 64: 50000, 128: 100000}[lane]
    assert speed == lanes * mbps // 100 > 0
