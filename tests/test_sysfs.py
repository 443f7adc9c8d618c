"""sysfs as a program under ``pyroce run`` reads it for pyroce0: what Linux would show for rxe
on the NIC's address (its netdev, GID, GUID, the ABI versions), served from pyroce's own tree
(nothing is written under /sys), and every other path untouched."""

from __future__ import annotations

import os
import shutil

import pytest

from pyroce.ib.addressing import link_local_gid, roce_gid
from tests.cli import SHARED_NIC_ADDRESS, pyroce

pytestmark = pytest.mark.skipif(not shutil.which("cc"), reason="the C driver needs a C compiler")


def run_shell(script: str) -> str:
    done = pyroce("run", "--", "sh", "-c", script, env={"PYROCE_ADDR": SHARED_NIC_ADDRESS})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_program_finds_the_device_its_netdev_and_gid_in_sysfs() -> None:
    """The GID table as the kernel shows a RoCE port's: index 3 the address's RoCE v2 GID, 0 the
    link-local RoCE v1 one, an empty entry zero."""
    port = "/sys/class/infiniband/pyroce0/ports/1"
    out = run_shell(f"ls /sys/class/infiniband; ls /sys/class/infiniband/pyroce0/device/net; cat {port}/gids/3 "
                    f"{port}/gid_attrs/types/3 {port}/gid_attrs/ndevs/3 {port}/gids/0 {port}/gid_attrs/types/0 "
                    f"{port}/gids/4 /sys/class/misc/rdma_cm/abi_version /sys/class/infiniband_verbs/uverbs0/ibdev")  # fmt: skip
    gid, link_local = (g.hex() for g in (roce_gid(SHARED_NIC_ADDRESS), link_local_gid(SHARED_NIC_ADDRESS)))
    assert out.splitlines() == ["pyroce0", "lo", ":".join(gid[i : i + 4] for i in range(0, 32, 4)), "RoCE v2", "lo",
                                ":".join(link_local[i : i + 4] for i in range(0, 32, 4)), "IB/RoCE v1",
                                ":".join(["0000"] * 8), "4", "pyroce0"]  # fmt: skip


def test_python_sees_the_same_tree_and_nothing_else_changes() -> None:
    script = ("import os; print(os.path.isdir('/sys/class/infiniband/pyroce0/device/net/lo'), "
              "os.path.exists('/sys/class/net/lo'), os.path.exists('/sys/class/infiniband/rxe0'))")  # fmt: skip
    done = pyroce("run", "--", "python3", "-c", script, env={"PYROCE_ADDR": SHARED_NIC_ADDRESS})
    assert done.stdout.split() == ["True", str(os.path.exists("/sys/class/net/lo")), "False"], done.stderr
