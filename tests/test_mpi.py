"""Open MPI over UCX (Debian's openmpi-bin and libopenmpi-dev, unmodified; pml ucx) on pyroce: an
MPI program built here with ``mpicc`` (tests/c/mpi_pingpong.c: a checked ping-pong and an
MPI_Allreduce) run by ``mpirun`` on one host, its ranks on pyroce's shared NICs through
``pyroce run``, UCX's RC transport on pyroce0 between them (the lanes UCX chose are checked in
its log, the packets in each NIC's counters).

Two placements: every rank on one shared NIC (2 and 4 ranks), and two NICs of two addresses
with two ranks on each, so ranks talk both within a NIC and across the (loopback) wire.
Skipped only where Open MPI, the C compiler or libibverbs-dev are not installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import ROOT, command
from tests.shared_nic import shared_nic
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture

ABSENT = MISSING + [f"Open MPI ({tool})" for tool in ("mpicc", "mpirun") if not shutil.which(tool)]
pytestmark = pytest.mark.skipif(bool(ABSENT), reason=f"not installed: {', '.join(ABSENT)}")
TIMEOUT = 180
# pml ucx, no other byte transfer layer than self: every message between ranks goes through UCX;
# UCX_TLS "rc": rc_verbs (and ud_verbs, which connects it), so nothing but pyroce0 carries them
MPIRUN = ("mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ucx", "--mca", "btl", "self",
          "-x", "UCX_TLS=rc,self", "-x", "UCX_LOG_LEVEL=info")  # fmt: skip
Nic = tuple[str, dict[str, str]]  # a shared NIC's address, and the environment of ``pyroce run`` on it


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/c/mpi_pingpong.c built with mpicc."""
    built = tmp_path_factory.mktemp("mpi") / "mpi_pingpong"
    subprocess.run(["mpicc", "-O2", "-Wall", "-Werror", "-o", str(built), str(ROOT / "tests" / "c" / "mpi_pingpong.c")],
                   check=True, timeout=TIMEOUT)  # fmt: skip
    return built


@pytest.fixture(scope="module")
def nics(tmp_path_factory: pytest.TempPathFactory, driver_env: dict[str, str]) -> Iterator[list[Nic]]:  # noqa: F811
    """Two shared NICs of the module's own, on two addresses."""
    with ExitStack() as stack:
        found = []
        for _ in range(2):
            place, env, _ = stack.enter_context(shared_nic(tmp_path_factory.mktemp("stats")))
            found.append((place.address, {**driver_env, "PYROCE_STATS_DIR": env["PYROCE_STATS_DIR"],
                                          "PYROCE_ADDR": place.address}))  # fmt: skip
        yield found


def sent_packets(nic: Nic) -> int:
    """The NIC's ``sent_pkts`` counter (``pyroce stats``)."""
    done = subprocess.run(command("stats"), env=nic[1], capture_output=True, text=True, timeout=60, check=True)
    found = re.search(r"^\s*sent_pkts\s+(\d+)$", done.stdout, re.MULTILINE)
    return int(found.group(1)) if found else 0


def sent_more(nic: Nic, before: int, within_s: float = 5) -> bool:
    """Whether the NIC's ``sent_pkts`` grows past ``before`` within ``within_s``: its stats file
    is published about once a second, so a run that just ended may not be in it yet."""
    deadline = time.monotonic() + within_s
    while sent_packets(nic) <= before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def check_ranks(done: subprocess.CompletedProcess[str], ranks: int) -> None:
    """mpirun exited 0; every rank printed its checked line; every tag lane was rc_verbs on pyroce0."""
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for rank in range(ranks):
        assert f"rank {rank} of {ranks}: 100 rounds, allreduce {ranks * (ranks + 1) // 2}" in done.stdout, out
    lanes = re.findall(r"ep_cfg\[\d+\]: tag\((.*)\)", out)
    assert lanes and all("rc_verbs/pyroce0:1" in lane for lane in lanes), out


@pytest.mark.parametrize("ranks", [2, 4])
def test_mpirun_on_one_shared_nic(program: Path, nics: list[Nic], ranks: int) -> None:
    """``pyroce run -- mpirun -np N``: every rank on the one NIC of ``pyroce run``'s address."""
    before = sent_packets(nics[0])
    done = subprocess.run(command("run", "--", *MPIRUN, "-np", str(ranks), str(program)), env=nics[0][1],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    check_ranks(done, ranks)
    assert sent_more(nics[0], before)


def test_mpirun_with_two_ranks_on_each_of_two_nics(program: Path, nics: list[Nic]) -> None:
    """Two application contexts of one ``mpirun``, each rank started by ``pyroce run`` on its
    context's address: ranks 0 and 1 share one NIC, 2 and 3 the other."""
    before = [sent_packets(nic) for nic in nics]
    contexts: list[str] = []
    for address, nic_env in nics:  # a NIC's place: its address and its stats folder
        place = (f"PYROCE_ADDR={address}", f"PYROCE_STATS_DIR={nic_env['PYROCE_STATS_DIR']}")
        contexts += [":"] * bool(contexts) + ["-np", "2", "env", *place, *command("run", "--"), str(program)]
    env = nics[0][1]
    done = subprocess.run([*MPIRUN, *contexts], env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    check_ranks(done, 4)
    assert all(sent_more(nic, sent) for nic, sent in zip(nics, before, strict=True))
