"""RoCEv2 over IPv6: a device whose address is IPv6 sends and receives over an IPv6 socket,
its GID is the address itself, and what reaches an IPv4 link does not reach it (and back).
Between two processes this needs two IPv6 addresses of this host: the test adds two
unique-local ones to ``lo`` (root, as CI runs) and removes them after."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from pyroce.host.registry import configured_address
from pyroce.link.errors import LinkError
from pyroce.link.udp import UdpLink
from pyroce.wire import IPv4Header, IPv6Header
from pyroce.wire.errors import BuildError
from pyroce.wire.framing import ip_header
from tests.cli import background, pyroce
from tests.pingpong_pair import BYTES, free_port, wait_listening

PREFIX = "fd72:6f63:6500::"  # unique-local, only ever on this host's loopback


def test_ip_header_follows_the_family() -> None:
    assert isinstance(ip_header("10.0.0.1", "10.0.0.2", ident=3), IPv4Header)
    assert ip_header("10.0.0.1", "10.0.0.2", ident=3).ident == 3
    assert isinstance(ip_header("fd00::1", "fd00::2"), IPv6Header)
    with pytest.raises(BuildError):
        ip_header("10.0.0.1", "fd00::2")


def test_pyroce_addr_takes_ipv6_but_not_link_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYROCE_ADDR", "FD00:0::7")
    assert configured_address() == "fd00::7"
    monkeypatch.setenv("PYROCE_ADDR", "fe80::1")
    with pytest.raises(LinkError) as info:
        configured_address()
    assert info.value.errno == errno.EINVAL and "link-local" in str(info.value)


def test_an_ipv6_link_builds_ipv6_paths() -> None:
    link = UdpLink("::1", port=free_port(5))
    try:
        path = link.tx_path("::1")
        assert isinstance(path.ip, IPv6Header) and path.header_len == 48
    finally:
        link.close()


@pytest.fixture
def two_addresses() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("adding IPv6 addresses to lo needs root and iproute2 (CI has both)")
    base = os.getpid() % 0xFFF0
    addresses = (f"{PREFIX}{base:x}:1", f"{PREFIX}{base:x}:2")
    for address in addresses:
        subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo", "nodad"], check=True)
    try:
        yield addresses
    finally:
        for address in addresses:
            subprocess.run(["ip", "-6", "addr", "del", f"{address}/128", "dev", "lo"], check=False)


def test_rc_pingpong_between_two_processes_over_ipv6(two_addresses: tuple[str, str]) -> None:
    port = free_port(6)
    server_addr, client_addr = two_addresses
    server = background("rc_pingpong", "-p", str(port), "-n", "40", "-s", "5000", "--stats",
                        env={"PYROCE_ADDR": server_addr})  # fmt: skip
    try:
        wait_listening(port, server)
        client = pyroce("rc_pingpong", "-p", str(port), "-n", "40", "-s", "5000", "127.0.0.1",
                        env={"PYROCE_ADDR": client_addr}, timeout=120)  # fmt: skip
        server_out, server_err = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server_err
    gid = re.compile(r"GID ([0-9a-f:]+)")
    assert gid.findall(client.stdout)[:2] == [client_addr, server_addr]  # local, then remote: the IPv6 GIDs
    assert int(BYTES.search(client.stdout)[1]) == 2 * 40 * 5000  # type: ignore[index]
    assert "icrc_errors 0," in server_out + server_err  # every ICRC, over the IPv6 header, checked and right
