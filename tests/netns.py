"""Two hosts for a test: network namespaces joined by a veth pair (root and iproute2 needed;
the test is skipped without them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest


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
