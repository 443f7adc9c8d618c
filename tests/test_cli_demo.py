"""``pyroce demo``, the README's first command: two processes, real RoCEv2 over UDP, every byte
checked; and the same between two network namespaces joined by a veth pair."""

from __future__ import annotations

import json
import os
import pty
import random
import re
import subprocess

import pytest

from tests.cli import assert_one_line_error, background, cli_env, command, pyroce
from tests.netns import two_hosts  # noqa: F401 - a fixture (ruff: F811 below is its use)

VERIFIED = re.compile(r"^verified: (\d+) operations, (\d+) bytes, 0 errors$")
PACKETS = re.compile(r"^packets: (\d+) sent, (\d+) received, (\d+) with a bad ICRC$", re.MULTILINE)


def check_report(stdout: str) -> int:
    """Check the demo's report; returns how many packets had a bad ICRC."""
    lines = stdout.strip().splitlines()
    match = VERIFIED.match(lines[-1])
    assert match, stdout
    assert int(match.group(1)) > 300 and int(match.group(2)) > 20 << 20
    packets = PACKETS.search(stdout)
    assert packets, stdout
    operations = [line.split()[0] for line in lines[2:7]]
    assert operations == ["SEND/RECV", "RDMA_WRITE", "RDMA_READ", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"]
    return int(packets.group(3))


@pytest.mark.parametrize("progress", ["inline", "thread"])
def test_demo_between_two_processes(progress: str) -> None:
    result = pyroce("demo", env={"PYROCE_PROGRESS": progress})
    assert result.returncode == 0, result.stderr
    assert check_report(result.stdout) == 0
    pids = re.findall(r"\(pid (\d+)\)", result.stdout)
    assert len(set(pids)) == 2  # two processes, each with its own device and address


def test_demo_json_report() -> None:
    result = pyroce("demo", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [row["operation"] for row in report["operations"]] == [
        "SEND/RECV", "RDMA_WRITE", "RDMA_READ", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"]  # fmt: skip
    assert report["verified"]["errors"] == 0 and report["verified"]["operations"] > 300
    assert report["verified"]["bytes"] == sum(row["bytes"] for row in report["operations"])
    assert report["client"]["pid"] != report["server"]["pid"] and report["path_mtu"] == 4096
    assert report["counters"]["sent_pkts"] > 0 and report["counters"].get("icrc_errors", 0) == 0
    assert report["mismatches"] == [] and report["faults_injected"] == {}


def test_demo_with_pyroce_addr_exported() -> None:
    """One address cannot hold two devices: the spawned server takes its own loopback address."""
    address = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.1"
    result = pyroce("demo", env={"PYROCE_ADDR": address})
    assert result.returncode == 0, result.stderr
    assert check_report(result.stdout) == 0
    client, server = re.findall(r"([\d.]+) \(pid \d+\)", result.stdout.splitlines()[0])
    assert client == address and server != address


def test_serve_with_a_bad_pyroce_addr_says_so_at_start() -> None:
    """The device opens before the server listens: the error comes at once, not when a client arrives."""
    result = pyroce("demo", "--serve", "127.0.0.1:0", "--timeout", "60", env={"PYROCE_ADDR": "192.0.2.1"}, timeout=30)
    assert_one_line_error(result, "192.0.2.1 is not an address of this host")
    assert result.stdout == ""  # never said it listens


@pytest.mark.parametrize("as_json", [False, True])
def test_serve_on_any_port_says_where_and_reports(as_json: bool) -> None:
    flags = ["--json"] if as_json else []
    server = background("demo", "--serve", "127.0.0.1:0", "--timeout", "60", *flags)
    try:
        assert server.stdout is not None
        listening = server.stdout.readline()
        if as_json:
            port = json.loads(listening)["listening"]["port"]
        else:
            port = int(re.fullmatch(r"pyroce demo: listening on 127\.0\.0\.1:(\d+) for 60 s\n", listening).group(1))
        assert port != 0
        client = pyroce("demo", "--connect", f"127.0.0.1:{port}", *flags)
        assert client.returncode == 0, client.stderr
        verified = json.loads(client.stdout)["verified"] if as_json else client.stdout.splitlines()[-1]
    finally:
        served, errors = server.communicate(timeout=60)
    assert server.returncode == 0, errors
    if as_json:
        assert json.loads(served)["verified"] == verified
    else:
        assert re.fullmatch(r"pyroce demo: served 127\.0\.0\.1:\d+, (.*)\n", served).group(1) == verified


def test_progress_shows_on_a_terminal_only() -> None:
    """stderr on a pseudo-terminal: progress lines, erased before the report ends on stdout."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(command("demo"), env=cli_env(), stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        shown = b""
        while True:  # the pty is read as the demo writes, so its buffer never fills
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every writer closed it
                break
            if not chunk:
                break
            shown += chunk
        stdout, _ = proc.communicate(timeout=120)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert shown.startswith(b"\rSEND/RECV: message 1 of ") and shown.count(b" of ") >= 2  # at most 10 a second
    assert shown.endswith(b"\r\x1b[K")  # the last progress line erased
    assert check_report(stdout.decode()) == 0 and b"message 1 of" not in stdout


def test_demo_across_two_network_namespaces(two_hosts: tuple[str, str]) -> None:  # noqa: F811
    a, b = two_hosts
    server = background("demo", "--serve", "10.199.0.1:18515", netns=a, env={"PYROCE_ADDR": "10.199.0.1"})
    try:
        client = pyroce("demo", "--connect", "10.199.0.1:18515", netns=b, env={"PYROCE_ADDR": "10.199.0.2"})
        assert client.returncode == 0, client.stderr
        assert check_report(client.stdout) == 0  # every IPv4 ICRC checked: the IPv4 trap is handled
        assert "10.199.0.2" in client.stdout and "10.199.0.1" in client.stdout
        assert "path MTU 1024 B" in client.stdout  # a 1500-byte veth gives the 1024 active MTU
    finally:
        served, _ = server.communicate(timeout=60)
    assert server.returncode == 0 and "served 10.199.0.2:" in served and served.endswith(" 0 errors\n")


@pytest.mark.embedded_nic  # PYROCE_FAULTS: link faults of a program's own NIC
@pytest.mark.parametrize("progress", ["inline", "thread"])
def test_demo_through_injected_faults_still_verifies(progress: str) -> None:
    result = pyroce("demo", "--loss", "0.05", "--reorder", "0.05", "--duplicate", "0.01", "--corrupt", "0.01",
                    "--seed", "7", env={"PYROCE_PROGRESS": progress})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # a long run, but piped: no progress line
    bad_icrc = check_report(result.stdout)
    faults = re.search(r"^faults injected: corrupt (\d+), delay (\d+), drop (\d+), duplicate (\d+); "
                       r"retransmitted (\d+) packets", result.stdout, re.MULTILINE)  # fmt: skip
    assert faults, result.stdout
    corrupt, delay, drop, duplicate, retransmitted = map(int, faults.groups())
    assert min(corrupt, delay, drop, duplicate) > 0 and retransmitted > 0
    # Every corrupted packet that arrives is caught by its ICRC, except a flip in BTH byte 4
    # (FECN, BECN and reserved bits, which the ICRC masks and the receiver ignores): 1 byte in
    # 20 of an ACK. Some never arrive: with one datagram per packet (faults turn GSO off) the
    # loopback socket buffers overflow now and then (1-4% of packets, 20% seen on a loaded 2-core
    # machine), as a congested wire. With ICRC checking broken, bad_icrc would be near 0.
    assert 0.5 * corrupt <= bad_icrc <= corrupt
