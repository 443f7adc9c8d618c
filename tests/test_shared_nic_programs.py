"""Unmodified C programs on the shared NIC (``pyroce run``'s default): several on one address,
a forked child that uses RDMA, a killed program cleaned up while others run on, a peer's write
into unmapped memory answered instead of crashing the program, and the program's locale and
signal dispositions left as they were."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import ROOT, free_port, listening
from tests.netns import two_hosts  # noqa: F401 - a fixture
from tests.shared_nic import shared_nic
from tests.test_c_driver import C_TOOL, ITERS, driver_env, needs_tools  # noqa: F401 - driver_env: a fixture
from tests.waiting import spin_until

PERFTEST_FAILED = re.compile(r"Completion with error|Failed status|failed", re.IGNORECASE)


@pytest.fixture
def nic(tmp_path: Path, driver_env: dict[str, str]):  # noqa: F811
    """A shared NIC of the test's own, and the environment of programs that use it."""
    with shared_nic(tmp_path / "stats") as (place, env, process):
        yield place, {**driver_env, "PYROCE_STATS_DIR": env["PYROCE_STATS_DIR"], "PYROCE_ADDR": place.address}, process


def status(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "pyroce", "nicd", "--status", "--json"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout)


def compiled(name: str, tmp_path: Path) -> str:
    program = tmp_path / name
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(program), str(ROOT / "tests" / "c" / f"{name}.c"),
                    "-libverbs"], check=True, capture_output=True)  # fmt: skip
    return str(program)


def results(out: str) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if re.match(r"^\w+ -?\d+$", line)}


def start_server(argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[str]:
    server = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not listening(port):
        assert server.poll() is None and time.monotonic() < deadline, server.communicate()
        time.sleep(0.02)
    return server


def nic_counters(env: dict[str, str], process: subprocess.Popen[str]) -> dict[str, int]:
    """The shared NIC's counters as its engine thread last published them (once a second)."""
    path = Path(env["PYROCE_STATS_DIR"]) / f"{process.pid}-pyroce0.json"
    return json.loads(path.read_text())["counters"] if path.exists() else {}


@needs_tools
def test_two_pingpong_programs_share_one_address(nic) -> None:
    """Two programs on one address; each one's polls sleep between completions and are woken
    by the CQE they wait for (``poller_wakeups``), not at the end of a timed nap."""
    place, env, process = nic
    port = free_port(40)
    argv = [*C_TOOL, "-g", "3", "-p", str(port), "-n", "300", "-s", "4096", "-c"]
    server = start_server(argv, env, port)
    try:
        client = subprocess.run([*argv, "127.0.0.1"], env=env, capture_output=True, text=True, timeout=300,
                                check=False)  # fmt: skip
        server_out = server.communicate(timeout=120)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    for out in (server_out, client.stdout):
        assert f"GID ::ffff:{place.address}" in out  # both ends: the one address
        assert ITERS.search(out).group(1) == "300", out  # type: ignore[union-attr]
        assert "invalid data" not in out
    assert client.returncode == 0 and server.returncode == 0
    spin_until(lambda: nic_counters(env, process).get("poller_wakeups", 0) > 0, "a poll woken by its CQE",
               lambda: time.sleep(0.05))


@needs_tools
def test_perftest_pair_on_one_address(nic) -> None:
    _, env, _ = nic
    port = free_port(41)
    argv = ["ib_write_bw", "-d", "pyroce0", "-p", str(port), "-s", "65536", "-n", "200"]
    server = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # perftest's client tries once: again while the server does not listen yet
            client = subprocess.run([*argv, "127.0.0.1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, timeout=300, check=False)  # fmt: skip
            if "Couldn't connect" not in client.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        server_out = server.communicate(timeout=120)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0 and server.returncode == 0, client.stdout + server_out
    assert re.search(r"^\s*65536\s+200\s+[\d.]+\s+[\d.]+", client.stdout, re.MULTILINE), client.stdout


@needs_tools
def test_a_killed_program_is_cleaned_up_while_others_run_on(nic) -> None:
    """The server of a streaming ib_write_bw is killed: its QP goes with it, so the client's
    WRITEs fail (retries exhausted, or refused while its memory is already gone) and the client
    ends with perftest's error; a pingpong pair on the same NIC runs to its end meanwhile."""
    _, env, _ = nic
    doomed_port, other_port = free_port(42), free_port(43)
    doomed = ["ib_write_bw", "-d", "pyroce0", "-p", str(doomed_port), "-s", "4096", "-D", "60"]
    other = [*C_TOOL, "-g", "0", "-p", str(other_port), "-n", "300", "-s", "4096", "-c"]
    doomed_server = start_server(doomed, env, doomed_port)
    doomed_client = subprocess.Popen([*doomed, "127.0.0.1"], env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)  # fmt: skip
    other_server = start_server(other, env, other_port)
    try:
        spin_until(lambda: len(status(env)["programs"]) == 3 and status(env)["qps"] == 3,
                   "both pingpong pairs' QPs on the NIC")  # fmt: skip
        doomed_server.send_signal(signal.SIGKILL)
        doomed_server.wait()
        client_out = doomed_client.communicate(timeout=120)[0]
        other_client = subprocess.run([*other, "127.0.0.1"], env=env, capture_output=True, text=True, timeout=300,
                                      check=False)  # fmt: skip
        other_out = other_server.communicate(timeout=120)[0]
    finally:
        for process in (doomed_server, doomed_client, other_server):
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert doomed_client.returncode != 0 and PERFTEST_FAILED.search(client_out), client_out
    assert other_client.returncode == 0 and other_server.returncode == 0, other_client.stdout + other_out
    assert ITERS.search(other_client.stdout).group(1) == "300"  # type: ignore[union-attr]
    spin_until(lambda: status(env)["qps"] == 0, "every QP destroyed once its program ended")


@needs_tools
def test_a_forked_child_uses_rdma_and_the_program_keeps_its_locale_and_signals(nic, tmp_path: Path) -> None:
    _, env, _ = nic
    done = subprocess.run([compiled("shared_nic", tmp_path)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = results(done.stdout)
    assert found.pop("child_posts_on_parents_qp") != 0  # the parent's QP is not the child's
    assert found == dict.fromkeys(
        ("parent_open", "locale_changed", "sigpipe_changed", "sigint_changed", "parent_send", "child_open",
         "child_send", "child_qp_distinct", "child_exit", "parent_send_after_fork", "parent_destroy_qp",
         "parent_destroy_cq", "parent_dealloc_pd", "parent_close"), 0), done.stdout  # fmt: skip


@needs_tools
def test_a_write_into_unmapped_memory_is_a_remote_access_error(nic, tmp_path: Path) -> None:
    """In the program's own process the NIC would take SIGSEGV writing there; the shared NIC
    reaches the program's memory through process_vm_writev, which answers EFAULT."""
    _, env, _ = nic
    done = subprocess.run([compiled("unmapped_write", tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert results(done.stdout) == {"setup": 0, "write_mapped": 0, "landed": 0, "write_unmapped": 10,
                                    "still_running": 0}  # fmt: skip  # 10: IBV_WC_REM_ACCESS_ERR


@needs_tools
def test_two_programs_on_each_of_two_hosts(two_hosts: tuple[str, str], driver_env: dict[str, str],  # noqa: F811
                                           tmp_path: Path) -> None:  # fmt: skip
    """Two network namespaces, each a host with one shared NIC on its address (started by the
    first program there): an ibv_rc_pingpong pair and an ib_write_bw pair run at once between
    them, so two programs share each address, over real RoCEv2/UDP on a veth link."""
    hosts = {name: (address, {**driver_env, "PYROCE_ADDR": address, "PYROCE_STATS_DIR": str(tmp_path / name)})
             for name, address in zip(two_hosts, ("10.199.0.1", "10.199.0.2"))}  # fmt: skip
    (server_ns, (server_ip, server_env)), (client_ns, (_, client_env)) = hosts.items()
    pingpong = [*C_TOOL, "-g", "3", "-p", "18520", "-n", "300", "-s", "4096", "-c"]
    bandwidth = ["ib_write_bw", "-d", "pyroce0", "-p", "18521", "-s", "65536", "-n", "500"]
    in_ns = ["ip", "netns", "exec"]
    servers = [subprocess.Popen([*in_ns, server_ns, *argv], env=server_env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT) for argv in (pingpong, bandwidth)]  # fmt: skip
    try:
        def listening() -> bytes:
            return subprocess.run([*in_ns, server_ns, "ss", "-ltn"], capture_output=True, check=False).stdout

        spin_until(lambda: b"18520" in listening() and b"18521" in listening(), "both servers listening")
        clients = [subprocess.Popen([*in_ns, client_ns, *argv, server_ip], env=client_env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                   for argv in (pingpong, bandwidth)]  # fmt: skip
        outs = [process.communicate(timeout=240)[0] for process in (*clients, *servers)]
    finally:
        for name, (_, env) in hosts.items():
            subprocess.run([*in_ns, name, sys.executable, "-m", "pyroce", "nicd", "--stop"], env=env,
                           capture_output=True, check=False)  # fmt: skip
        for process in servers:
            if process.poll() is None:
                process.kill()
                process.communicate()
    pingpong_client, bandwidth_client, pingpong_server, _ = outs
    assert all(process.returncode == 0 for process in (*clients, *servers)), outs
    for out in (pingpong_client, pingpong_server):
        assert ITERS.search(out).group(1) == "300", out  # type: ignore[union-attr]
        assert "GID ::ffff:10.199.0.1" in out and "GID ::ffff:10.199.0.2" in out
    assert re.search(r"^\s*65536\s+500\s+[\d.]+\s+[\d.]+", bandwidth_client, re.MULTILINE), bandwidth_client
