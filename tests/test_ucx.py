"""UCX (Debian's ucx-utils and libucx0, unmodified) on pyroce through ``pyroce run``: its IB
transports over plain verbs find pyroce0 (``ucx_info -d``), and ``ucx_perftest`` runs its tag
matching and RMA tests between two processes, server and client on one shared NIC of the test's
own address, each to its final line.

What UCX needed of the device, each checked here through UCX itself: its ``libuct_ib.so`` links
``libmlx5.so.1`` (every symbol version of the real one: driver/providers.py); it lists a device
only when ``/dev/infiniband/<dev_name>`` is a character device it may open (rdma_cm_sysfs.c);
its UD transport finds a packet's destination address by the RoCE packet type that a ConnectX
writes in the CQE's ``sl`` (nic/cqe.py). Skipped only where UCX, the C compiler or
libibverbs-dev are not installed. Figures are asserted present, never compared (timing belongs
to benchmarks/run.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import zlib
from collections.abc import Iterator

import pytest

from tests.cli import command, free_port, listening
from tests.shared_nic import shared_nic
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture

ABSENT = MISSING + [f"ucx-utils ({tool})" for tool in ("ucx_info", "ucx_perftest") if not shutil.which(tool)]
pytestmark = pytest.mark.skipif(bool(ABSENT), reason=f"not installed: {', '.join(ABSENT)}")
TIMEOUT = 120
RC = "rc_verbs,ud_verbs,self"  # rc_verbs connects through ud_verbs (UCX's auxiliary transport)


@pytest.fixture(scope="module")
def nic(tmp_path_factory: pytest.TempPathFactory, driver_env: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:  # noqa: F811
    """A shared NIC of the module's own: its address, and the environment of ``pyroce run``."""
    folder = tmp_path_factory.mktemp("stats")
    with shared_nic(folder) as (place, env, _):
        yield place.address, {**driver_env, "PYROCE_STATS_DIR": env["PYROCE_STATS_DIR"], "PYROCE_ADDR": place.address}


def ucx_env(env: dict[str, str], **ucx: str) -> dict[str, str]:
    """``env`` without the caller's UCX settings, with ``ucx`` (``TLS="..."``: ``UCX_TLS``)."""
    clean = {name: value for name, value in env.items() if not name.startswith("UCX_")}
    return {**clean, **{f"UCX_{name}": value for name, value in ucx.items()}}


def perftest_pair(env: dict[str, str], address: str, port: int, *options: str) -> tuple[int, str, int, str]:
    """``ucx_perftest`` server and client (``options`` each) to their ends: each one's exit
    status and output (stdout and stderr). The client starts once the server listens."""
    argv = command("run", "--", "ucx_perftest", "-p", str(port), *options)
    server = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            assert server.poll() is None and time.monotonic() < deadline, f"no server: {server.communicate()[0]}"
            time.sleep(0.05)
        client = subprocess.run([*argv, address], env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False)  # fmt: skip
        server_out = server.communicate(timeout=TIMEOUT)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    return server.returncode, server_out, client.returncode, client.stdout


def final(out: str) -> list[float]:
    """The numbers of ucx_perftest's ``Final:`` line (iterations, latencies, bandwidths, rates)."""
    found = re.search(r"^Final:\s+(.*)$", out, re.MULTILINE)
    assert found, out
    return [float(field) for field in found.group(1).split()]


def test_ucx_info_lists_pyroce0_with_rc_verbs_and_ud_verbs(nic: tuple[str, dict[str, str]]) -> None:
    """``ucx_info -d``: pyroce0 is a memory domain of UCX's ib component, with rc_verbs and
    ud_verbs on its port 1."""
    _, env = nic
    done = subprocess.run(command("run", "--", "ucx_info", "-d"), env=ucx_env(env), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)  # fmt: skip
    assert done.returncode == 0, done
    domain = done.stdout.split("# Memory domain: pyroce0\n", 1)
    assert len(domain) == 2, done.stdout
    ours = domain[1].split("# Memory domain:", 1)[0]
    assert "Component: ib" in ours, ours
    for transport in ("rc_verbs", "ud_verbs"):
        assert re.search(rf"Transport: {transport}\n#\s+Device: pyroce0:1\n", ours), ours


@pytest.mark.parametrize(("test", "tls", "size"), [
    ("tag_lat", RC, "8"), ("tag_bw", RC, "65536"), ("tag_lat", "ud_verbs,self", "1024"),
    ("ucp_put_lat", RC, "8"), ("ucp_put_bw", RC, "65536"), ("ucp_get", RC, "65536"),
])  # fmt: skip
def test_ucx_perftest_runs_between_two_processes(nic: tuple[str, dict[str, str]], test: str, tls: str,
                                                 size: str) -> None:  # fmt: skip
    """Each test to its ``Final:`` line on both sides, on pyroce0's transports only (``tls``)."""
    address, env = nic
    server_rc, server_out, client_rc, client_out = perftest_pair(
        ucx_env(env, TLS=tls, NET_DEVICES="pyroce0:1"), address, free_port(zlib.crc32(f"{test} {tls}".encode()) % 31),
        "-t", test, "-s", size, "-n", "200")  # fmt: skip
    assert server_rc == 0 and client_rc == 0, (server_out, client_out)
    iterations, *figures = final(client_out)
    assert iterations == 200 and all(figure > 0 for figure in figures), client_out
    assert "ERROR" not in server_out + client_out, (server_out, client_out)


def test_ucx_picks_pyroce0_by_default(nic: tuple[str, dict[str, str]]) -> None:
    """With no UCX setting at all, the tag lane between the two processes goes over rc_verbs on
    pyroce0 (beside shared memory): the only RDMA device, taken as a real one is."""
    address, env = nic
    server_rc, server_out, client_rc, client_out = perftest_pair(
        ucx_env(env, LOG_LEVEL="info"), address, free_port(31), "-t", "tag_lat", "-n", "100")  # fmt: skip
    assert server_rc == 0 and client_rc == 0, (server_out, client_out)
    lanes = re.findall(r"ep_cfg\[\d+\]: tag\((.*)\)", client_out)
    assert lanes and all("rc_verbs/pyroce0:1" in lane for lane in lanes), client_out
