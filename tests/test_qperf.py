"""qperf (Debian's 0.4.11) unmodified through ``pyroce run``: its RC tests between a server and
a client on one shared NIC, connected by rdma_cm (``-cm1``); without ``-cm1`` qperf connects as
on InfiniBand (LIDs, no GRH), which no RoCE device takes: its modify to RTR fails with EINVAL,
as on Linux rxe (and mlx5's RoCE ports). Skipped only where qperf, cc or libibverbs-dev are not
installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import command, free_port
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture
from tests.test_rdmacm_programs import nic  # noqa: F401 - a fixture (ruff: F811 below is its use)

ABSENT = MISSING + ([] if shutil.which("qperf") else ["qperf"])
pytestmark = pytest.mark.skipif(bool(ABSENT), reason=f"not installed: {', '.join(ABSENT)}")
TIMEOUT = 60
# qperf's result line: "    bw  =  112 MB/sec", "    latency  =  847 us"
RESULT = re.compile(r"^\s+(bw|latency)\s+=\s+[\d.]+ (KB|MB|GB)?(/sec|us|ms|sec)$", re.MULTILINE)


@pytest.fixture(scope="module")
def server(nic: tuple[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
           ) -> Iterator[tuple[str, str, dict[str, str], Path]]:  # fmt: skip
    """A qperf server on the module's shared NIC, serving each test in turn: its address, its
    listen port, the environment of ``pyroce run`` and its output's file."""
    address, env = nic
    port = str(free_port(1))
    log = tmp_path_factory.mktemp("qperf") / "server.out"
    with log.open("w") as out:
        process = subprocess.Popen(command("run", "--", "qperf", "-lp", port), env=env, stdout=out,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield address, port, env, log
    finally:
        process.kill()
        process.wait()


def qperf(server: tuple[str, str, dict[str, str], Path], test: str,
          *options: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The client (it waits for its server to listen): one test of one second."""
    address, port, env, _ = server
    return subprocess.run(command("run", "--", "qperf", "-lp", port, "-t", "1", *options, address, test), env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT,
                          check=False)  # fmt: skip


@pytest.mark.parametrize("test", ["rc_bw", "rc_lat", "rc_rdma_read_bw", "rc_rdma_write_lat"])
def test_qperf_rc_tests_over_rdma_cm(server: tuple[str, str, dict[str, str], Path], test: str) -> None:
    done = qperf(server, test, "-cm1")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"{test}:\n") and len(RESULT.findall(done.stdout)) == 1, done.stdout


def test_qperf_without_rdma_cm_is_refused_as_on_every_roce_device(
    server: tuple[str, str, dict[str, str], Path],
) -> None:
    """qperf's own exchange gives the QP the peer's LID only (0 on RoCE) and no GRH: the modify
    to RTR is EINVAL, qperf's words as on rxe (the client's, or the server's if it came first);
    the server serves the next client all the same."""
    refused = qperf(server, "rc_lat")
    said = refused.stdout + server[3].read_text()
    assert refused.returncode != 0 and "failed to modify QP to RTR: Invalid argument" in said, (refused, said)
    assert qperf(server, "rc_lat", "-cm1").returncode == 0
