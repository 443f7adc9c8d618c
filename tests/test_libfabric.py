"""libfabric's verbs provider (Debian's libfabric-bin 1.17) unmodified through ``pyroce run``:
``fi_info`` lists pyroce0 for its msg, rdm (the ofi_rxm utility provider over msg) and dgram
endpoints, and ``fi_pingpong`` runs msg and rdm endpoints between two processes on one shared
NIC, the data checked (``-c``).

The verbs provider offers msg (and so rdm) endpoints only on a device with an address on an
interface that is not loopback (``vrb_getifaddrs`` skips ``IFF_LOOPBACK``, on Linux rxe alike), so
both programs run in a network namespace whose veth holds the NIC's address (root and iproute2;
skipped without them, or without libfabric-bin, cc or libibverbs-dev)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import command, free_port
from tests.netns import two_hosts  # noqa: F401 - a fixture (ruff: F811 below is its use)
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture
from tests.test_rdmacm_programs import connect

ABSENT = MISSING + [f"libfabric-bin ({tool})" for tool in ("fi_info", "fi_pingpong") if not shutil.which(tool)]
pytestmark = pytest.mark.skipif(bool(ABSENT), reason=f"not installed: {', '.join(ABSENT)}")
ADDRESS = "10.199.0.1"  # the first namespace's veth (tests/netns.py)
TIMEOUT = 120
ITERATIONS = 10
# fi_pingpong's table: one row per size, 64 B to 1 MiB, each message sent and acknowledged
ROW = re.compile(rf"^(64|256|1k|4k|64k|1m)\s+{ITERATIONS}\s+={ITERATIONS}\s", re.MULTILINE)
SIZES = ["64", "256", "1k", "4k", "64k", "1m"]


@pytest.fixture
def fabric(two_hosts: tuple[str, str], driver_env: dict[str, str],  # noqa: F811
           tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:  # fmt: skip
    """The namespace and the environment of ``pyroce run`` there, its NIC on the veth's address
    (started by the first program; stopped at the end)."""
    namespace = two_hosts[0]
    env = {**driver_env, "PYROCE_ADDR": ADDRESS, "PYROCE_STATS_DIR": str(tmp_path)}
    yield namespace, env
    subprocess.run(command("nicd", "--stop", netns=namespace), env=env, capture_output=True, timeout=30, check=False)


def run(namespace: str, *argv: str) -> list[str]:
    return command("run", "--", *argv, netns=namespace)


def test_fi_info_lists_pyroce0_for_msg_rdm_and_dgram(fabric: tuple[str, dict[str, str]]) -> None:
    namespace, env = fabric
    done = subprocess.run(run(namespace, "fi_info", "-p", "verbs"), env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)  # fmt: skip
    assert done.returncode == 0, done
    found = set(re.findall(r"^provider: (\S+)\n(?:    .*\n)*?    domain: (\S+)\n(?:    .*\n)*?    type: (\S+)$",
                           done.stdout, re.MULTILINE))  # fmt: skip
    assert {("verbs", "pyroce0", "FI_EP_MSG"), ("verbs;ofi_rxm", "pyroce0", "FI_EP_RDM"),
            ("verbs", "pyroce0-dgram", "FI_EP_DGRAM")} <= found, done.stdout  # fmt: skip


@pytest.mark.parametrize("endpoint", ["msg", "rdm"])
def test_fi_pingpong_between_two_processes(fabric: tuple[str, dict[str, str]], endpoint: str) -> None:
    """A connected msg endpoint (rdma_cm: the REQ's retry counts clamped, as rdma_cm does) and
    ofi_rxm's rdm endpoint over msg ones (its one CQ for all connections: 262144 entries): every
    size from 64 B to 1 MiB, ten times each way, checked on arrival."""
    namespace, env = fabric
    port = str(free_port(0))
    options = ("fi_pingpong", "-p", "verbs", "-e", endpoint, "-I", str(ITERATIONS), "-c")
    server = subprocess.Popen(run(namespace, *options, "-B", port), env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)  # fmt: skip
    try:
        client = connect(run(namespace, *options, "-P", port, ADDRESS), env, server)
        server_out = server.communicate(timeout=TIMEOUT)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0 and server.returncode == 0, (server_out, client.stdout)
    for out in (server_out, client.stdout):
        assert ROW.findall(out) == SIZES, out
