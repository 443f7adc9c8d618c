"""``pyroce demo``, the README's first command: two processes, real RoCEv2 over UDP, every byte
checked; and the same between two network namespaces joined by a veth pair."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

VERIFIED = re.compile(r"^verified: (\d+) operations, (\d+) bytes, 0 errors$")
PACKETS = re.compile(r"^packets: (\d+) sent, (\d+) received, 0 with a bad ICRC$", re.MULTILINE)


def pyroce(*args: str, netns: str | None = None, env: dict[str, str] | None = None,
           background: bool = False) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:  # fmt: skip
    command = [sys.executable, "-m", "pyroce", *args]
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]
    full_env = {**os.environ, **(env or {})}
    if background:
        return subprocess.Popen(command, env=full_env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(command, env=full_env, text=True, capture_output=True, timeout=300, check=False)


def check_report(stdout: str) -> None:
    lines = stdout.strip().splitlines()
    match = VERIFIED.match(lines[-1])
    assert match, stdout
    assert int(match.group(1)) > 300 and int(match.group(2)) > 20 << 20
    assert PACKETS.search(stdout), stdout
    operations = [line.split()[0] for line in lines[2:7]]
    assert operations == ["SEND/RECV", "RDMA_WRITE", "RDMA_READ", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"]


def test_demo_between_two_processes() -> None:
    result = pyroce("demo")
    assert result.returncode == 0, result.stderr
    check_report(result.stdout)
    pids = re.findall(r"\(pid (\d+)\)", result.stdout)
    assert len(set(pids)) == 2  # two processes, each with its own device and address


def test_demo_connect_error_is_one_line() -> None:
    result = pyroce("demo", "--connect", "256.0.0.1:18515")  # not an address: fails at once
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def _netns_available() -> bool:
    if shutil.which("ip") is None or os.geteuid() != 0:
        return False
    probe = f"pyroce-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False).returncode:
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return True


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str]]:
    """Two network namespaces joined by a veth pair: 10.199.0.1 and 10.199.0.2 (MTU 1500)."""
    if not _netns_available():
        pytest.skip("needs root and network namespaces (ip netns)")
    tag = os.getpid() % 100000
    a, b = f"pyroce-a{tag}", f"pyroce-b{tag}"
    steps = [
        ["ip", "netns", "add", a],
        ["ip", "netns", "add", b],
        ["ip", "link", "add", f"pra{tag}", "netns", a, "type", "veth", "peer", "name", f"prb{tag}", "netns", b],
        ["ip", "-n", a, "addr", "add", "10.199.0.1/24", "dev", f"pra{tag}"],
        ["ip", "-n", b, "addr", "add", "10.199.0.2/24", "dev", f"prb{tag}"],
        ["ip", "-n", a, "link", "set", f"pra{tag}", "up"],
        ["ip", "-n", b, "link", "set", f"prb{tag}", "up"],
        ["ip", "-n", a, "link", "set", "lo", "up"],
        ["ip", "-n", b, "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_demo_across_two_network_namespaces(two_hosts: tuple[str, str]) -> None:
    a, b = two_hosts
    server = pyroce("demo", "--serve", "10.199.0.1:18515", netns=a, env={"PYROCE_ADDR": "10.199.0.1"},
                    background=True)  # fmt: skip
    try:
        client = pyroce("demo", "--connect", "10.199.0.1:18515", netns=b, env={"PYROCE_ADDR": "10.199.0.2"})
        assert client.returncode == 0, client.stderr
        check_report(client.stdout)
        assert "10.199.0.2" in client.stdout and "10.199.0.1" in client.stdout
        assert "path MTU 1024 B" in client.stdout  # a 1500-byte veth gives the 1024 active MTU
    finally:
        assert isinstance(server, subprocess.Popen)
        server.wait(timeout=60)
