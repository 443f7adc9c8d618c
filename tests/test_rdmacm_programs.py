"""Unmodified librdmacm programs (Debian's rdmacm-utils and perftest's ``-R``) through ``pyroce
run``: the system's librdmacm on pyroce's rdma_cm file (``libpyroce_rdmacm.so``), served by the
shared NIC's connection manager. Both ends of each pair run on one shared NIC of the test's own
address, as two programs on one host share the kernel's rdma_cm.

A server listens only once it has started, and nothing outside it says when: its client is run
again while the NIC rejects it (no listener yet: REJECTED, the invalid service ID's REJ), as a
user would. Skipped only where rdmacm-utils, perftest, the C compiler or libibverbs-dev are not
installed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyroce.driver.build import RDMA_CM_LIBRARY
from pyroce.driver.environment import driver_environment
from tests.cli import command
from tests.shared_nic import shared_nic
from tests.test_c_driver import MISSING, driver_env  # noqa: F401 - driver_env: a fixture
from tests.test_perftest import ATTEMPTS, CALIBRATION

TOOLS = ("rping", "ucmatose", "udaddy", "rdma_server", "rdma_client", "rstream", "riostream", "cmtime", "mckey",
         "ib_send_bw", "ib_atomic_lat", "stdbuf")  # fmt: skip
ABSENT = MISSING + [f"rdmacm-utils or perftest ({tool})" for tool in TOOLS if not shutil.which(tool)]
pytestmark = pytest.mark.skipif(bool(ABSENT), reason=f"not installed: {', '.join(ABSENT)}")
TIMEOUT = 120
# a client's words for "nobody listens there (yet)": rdma_cm's event names, rsockets' errnos (a
# non-blocking connect that was refused is ENOTCONN at the next rpoll, or ECONNREFUSED; riostream,
# whose poll saw the refused connect's POLLERR before any call set errno, prints the EINPROGRESS
# its rconnect left), and perftest's for RDMA_CM_EVENT_REJECTED (8)
NOT_LISTENING = re.compile(r"REJECTED|Connection refused|Transport endpoint is not connected|UNREACHABLE"
                           r"|rpoll: Operation now in progress|Unexpected CM event bl blka 8", re.IGNORECASE)  # fmt: skip
# perftest -R connects twice: its exchange connection, then (after a handshake on it) its test QPs,
# to a listen the server makes after that handshake. A refusal of the first says the server is
# not listening yet; a refusal of the second (perftest 4.5-0.17 gives up at once, where later
# releases retry) leaves the server listening for test QPs, where a client run again would
# connect its exchange QP: the pair starts again instead.
PERFTEST_NOT_LISTENING = re.compile(r"Unexpected CM event bl blka 8")


@pytest.fixture(scope="module")
def nic(tmp_path_factory: pytest.TempPathFactory, driver_env: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:  # noqa: F811
    """A shared NIC of the module's own: its address, and the environment of ``pyroce run``."""
    folder = tmp_path_factory.mktemp("stats")
    with shared_nic(folder) as (place, env, _):
        yield place.address, {**driver_env, "PYROCE_STATS_DIR": env["PYROCE_STATS_DIR"], "PYROCE_ADDR": place.address}


def run(*argv: str) -> list[str]:
    return command("run", "--", *argv)


def connect(client_argv: list[str], env: dict[str, str], server: subprocess.Popen[str],
            not_listening: re.Pattern[str] = NOT_LISTENING) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The client run to its end, again while its server is not listening yet (the client's
    words for that: ``not_listening``); its output (stdout and stderr)."""
    deadline = time.monotonic() + 60
    while True:
        client = subprocess.run(client_argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=TIMEOUT, check=False)  # fmt: skip
        if client.returncode == 0 or not not_listening.search(client.stdout) or server.poll() is not None:
            return client
        assert time.monotonic() < deadline, f"the server never listened: {client.stdout}"
        time.sleep(0.2)


def pair(server_argv: list[str], client_argv: list[str], env: dict[str, str], again_when: str | None = None,
         not_listening: re.Pattern[str] = NOT_LISTENING) -> tuple[int, str, int, str]:  # fmt: skip
    """The server started, its client run (again while the server is not listening yet: the
    client's words ``not_listening``), both to their ends: each one's exit status and output
    (stdout and stderr). ``again_when``: words of either program's output that say the run
    proves nothing (perftest's clock calibration gave up): the pair runs again, ``ATTEMPTS``
    times at most, without waiting for a server whose client gave up. So does a pair whose
    client was refused (``NOT_LISTENING``) in other words than ``not_listening`` (perftest's
    test QPs) or while the server ended: a client of several connections (ucmatose ``-c 2``)
    whose first request came before the listen and its second after leaves, and the server's
    accepted connection is rejected by the departed client's side (the server ends with
    REJECTED). A client still running after ``TIMEOUT`` is stopped, and its server's words
    decide: a server whose clock calibration gave up has ended and left its client waiting, so
    the pair runs again; otherwise the failure shows both programs' output."""
    for attempt in range(ATTEMPTS):
        last = attempt == ATTEMPTS - 1
        server = subprocess.Popen(server_argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            try:
                client = connect(client_argv, env, server, not_listening)
            except subprocess.TimeoutExpired as stuck:  # subprocess.run has killed the client
                server.kill()
                server_out = server.communicate()[0]
                if again_when and again_when in server_out and not last:
                    continue
                said = stuck.output.decode(errors="replace") if isinstance(stuck.output, bytes) else stuck.output
                raise AssertionError(f"the client did not end in {TIMEOUT} s: {said}\nits server: {server_out}") from None
            if again_when and again_when in client.stdout and not last:
                continue  # its server waits for a client that has gone: stopped below
            if client.returncode != 0 and NOT_LISTENING.search(client.stdout) and not last:
                continue  # the start race above: the server, ended or waiting, is stopped below
            try:
                server_out = server.communicate(timeout=TIMEOUT)[0]
            except subprocess.TimeoutExpired:
                server.kill()
                raise AssertionError(f"the server did not end: {server.communicate()[0]}\nits client: {client}") from None
        finally:
            if server.poll() is None:
                server.kill()
                server.communicate()
        if not again_when or again_when not in server_out or last:
            break
    return server.returncode, server_out, client.returncode, client.stdout


def test_rping_verifies_its_pings(nic: tuple[str, dict[str, str]]) -> None:
    """rping: RC SEND and RDMA READ/WRITE through a CM connection, the data checked (-V) and
    shown (-v) on both sides, ten times; both disconnect and exit 0."""
    address, env = nic
    options = ("-a", address, "-p", "7171", "-C", "10", "-v", "-V")
    server_rc, server_out, client_rc, client_out = pair(run("rping", "-s", *options), run("rping", "-c", *options),
                                                        env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    assert len(re.findall(r"^ping data: rdma-ping-\d+: ", client_out, re.MULTILINE)) == 10, client_out
    assert len(re.findall(r"^server ping data: rdma-ping-\d+: ", server_out, re.MULTILINE)) == 10, server_out
    assert "error" not in (server_out + client_out).lower()


def test_rping_quiet_with_a_size_of_its_own(nic: tuple[str, dict[str, str]]) -> None:
    """rping -S (a 1000-byte ping buffer) -q (quiet) -V (verify): twenty verified pings and no ping
    lines printed; both exit 0."""
    address, env = nic
    options = ("-a", address, "-p", "7179", "-C", "20", "-S", "1000", "-q", "-V")
    server_rc, server_out, client_rc, client_out = pair(run("rping", "-s", *options), run("rping", "-c", *options),
                                                        env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    assert "ping data" not in server_out + client_out
    assert "error" not in (server_out + client_out).lower(), (server_out, client_out)


def test_rping_to_a_port_nobody_listens_on_is_rejected(nic: tuple[str, dict[str, str]]) -> None:
    """The NIC answers a REQ for a service nobody listens on with a REJ (invalid service ID, 8):
    rping says REJECTED and exits non-zero, at once."""
    address, env = nic
    started = time.monotonic()
    done = subprocess.run(run("rping", "-c", "-a", address, "-p", "7172", "-C", "1", "-v"), env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert done.returncode != 0, done
    assert "RDMA_CM_EVENT_REJECTED, error 8" in done.stdout + done.stderr, done
    assert time.monotonic() - started < 30


def test_ucmatose_connects_and_exchanges(nic: tuple[str, dict[str, str]]) -> None:
    """ucmatose: two connections on one listener, 10 messages each way on each, disconnected."""
    address, env = nic
    server_rc, server_out, client_rc, client_out = pair(
        run("ucmatose", "-b", address, "-p", "7173", "-c", "2", "-C", "10"),
        run("ucmatose", "-s", address, "-p", "7173", "-c", "2", "-C", "10"), env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    for out in (server_out, client_out):
        assert "test complete" in out and "error" not in out.lower(), out


def test_udaddy_resolves_its_peer_through_sidr(nic: tuple[str, dict[str, str]]) -> None:
    """udaddy: UD ids (the UDP port space): SIDR finds the server's QPN and Q_Key, and
    datagrams go both ways to the address handle the CM's event described."""
    address, env = nic
    server_rc, server_out, client_rc, client_out = pair(run("udaddy", "-b", address, "-C", "10"),
                                                        run("udaddy", "-s", address, "-C", "10"), env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    for out in (server_out, client_out):
        assert "test complete" in out and "error" not in out.lower(), out


@pytest.mark.parametrize("sender_flags", [(), ("-o",)], ids=["full-member", "send-only"])
def test_mckey_sends_to_the_group_its_receiver_joined(nic: tuple[str, dict[str, str]],
                                                      sender_flags: tuple[str, ...]) -> None:  # fmt: skip
    """mckey: the receiver joins 239.1.2.3 (rdma_join_multicast_ex: librdmacm attaches its QP on
    MULTICAST_JOIN) and takes all ten datagrams the sender sends to the group's AH and QPN
    0xFFFFFF; a send-only sender attaches nothing. Both leave and exit 0. The receiver's
    output is line-buffered (stdbuf), so the sender starts once it has joined."""
    address, env = nic
    options = ("-m", "239.1.2.3", "-b", address, "-C", "10")
    receiver = subprocess.Popen(run("stdbuf", "-oL", "mckey", *options), env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        lines = []
        while not lines or "joined dgid" not in lines[-1]:
            line = receiver.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the receiver ended before it joined: {''.join(lines)}"
            lines.append(line)
        assert lines[-1].startswith("mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0"), lines
        sender = subprocess.run(run("mckey", *options, "-s", *sender_flags), env=env, text=True, timeout=TIMEOUT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)  # fmt: skip
        received = "".join(lines) + receiver.communicate(timeout=60)[0]
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.communicate()
    assert sender.returncode == 0 and receiver.returncode == 0, (sender.stdout, received)
    for out in (sender.stdout, received):
        assert "data transfers complete" in out and "test complete" in out and "failure" not in out, out
    assert "receiving data transfers" in received and "initiating data transfers" in sender.stdout


def test_rdma_server_and_client(nic: tuple[str, dict[str, str]]) -> None:
    """rdma_server/rdma_client: librdmacm's synchronous ids (rdma_create_ep, rdma_get_request,
    each id's own event channel) and rdma_verbs.h's SEND/RECV helpers."""
    address, env = nic
    server_rc, server_out, client_rc, client_out = pair(run("rdma_server", "-s", address, "-p", "7174"),
                                                        run("rdma_client", "-s", address, "-p", "7174"), env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    for out in (server_out, client_out):
        assert "rdma_" in out and "error" not in out.lower(), out  # both print their steps and end


PERFTEST_TOOLS = ("ib_send_bw", "ib_send_lat", "ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_read_lat",
                  "ib_atomic_bw", "ib_atomic_lat")


@pytest.mark.parametrize("tool", PERFTEST_TOOLS)
def test_perftest_connects_through_rdma_cm(nic: tuple[str, dict[str, str]], tool: str) -> None:
    """perftest's ``-R``, each of its eight tools: server and client meet through rdma_cm instead of
    its TCP exchange, and the run ends with its final table (a line for the size and iterations)."""
    address, env = nic
    size = "8" if "atomic" in tool else "4096"
    port = str(7180 + PERFTEST_TOOLS.index(tool))
    options = ("-d", "pyroce0", "-R", "-p", port, "-s", size, "-n", "100")
    server_rc, server_out, client_rc, client_out = pair(run(tool, *options), run(tool, *options, address), env,
                                                        CALIBRATION, PERFTEST_NOT_LISTENING)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    assert re.search(rf"^\s*{size}\s+100\s", client_out, re.MULTILINE), client_out


@pytest.mark.parametrize("tool", ["rstream", "riostream"])
def test_rsockets_stream(nic: tuple[str, dict[str, str]], tool: str) -> None:
    """rsockets (librdmacm's sockets over RC, nonblocking channel fds in poll): a verified
    transfer of 100 messages of 4 KiB."""
    address, env = nic
    options = ("-p", "7176" if tool == "rstream" else "7177", "-S", "4096", "-C", "100", "-T", "v")
    server_rc, server_out, client_rc, client_out = pair(run(tool, "-b", address, *options),
                                                        run(tool, "-s", address, *options), env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)
    assert re.search(r"^custom\s+4k\s+100\s+1\s+800k\s", client_out, re.MULTILINE), client_out


def test_the_rdma_cm_file_is_a_character_device_readable_by_events(tmp_path: Path,
                                                                   nic: tuple[str, dict[str, str]]) -> None:  # fmt: skip
    """A program of its own that writes ucma commands as librdmacm does (tests/c/rdma_cm_file.c):
    the file's fstat, short writes, unknown commands, read, and an event seen with poll."""
    address, env = nic
    program = tmp_path / "rdma_cm_file"
    source = Path(__file__).resolve().parent / "c" / "rdma_cm_file.c"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(program), str(source)], check=True)
    done = subprocess.run(run(str(program), address), env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == [
        "fstat: character device",
        "short write: Invalid argument",
        "unknown command: Invalid argument",
        "get_option: Function not implemented",
        "read: Invalid argument",
        "create_id: id 0",
        "af_ib bind: Address family not supported by protocol",
        "no room for the answer: No space left on device",
        "nonblocking get_event: Resource temporarily unavailable",
        "resolve_ip: ok",
        "poll: readable",
        "get_event: ADDR_RESOLVED status 0 uid 42 id 0",
        "destroy_id: 1 events reported",
        "destroy_id again: No such file or directory",
    ], done


def test_a_killed_servers_port_is_free_again(nic: tuple[str, dict[str, str]]) -> None:
    """A program killed while its id listens: the NIC closes its rdma_cm file with its
    connection, so the port, refused to a second server while the first listened, is free for
    the next one, which a client then reaches."""
    address, env = nic
    options = ("-a", address, "-p", "7178", "-C", "2")
    victim = subprocess.Popen(run("rping", "-s", "-P", *options), env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)  # fmt: skip
    try:
        first = connect(run("rping", "-c", *options), env, victim)  # the persistent server serves it and goes on
        assert first.returncode == 0, first.stdout
        second = subprocess.run(run("rping", "-s", *options), env=env, capture_output=True, text=True, timeout=TIMEOUT,
                                check=False)  # fmt: skip
        assert second.returncode != 0 and "rdma_bind_addr: Address already in use" in second.stderr, second
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.communicate()
    server_rc, server_out, client_rc, client_out = pair(run("rping", "-s", *options), run("rping", "-c", *options),
                                                        env)  # fmt: skip
    assert client_rc == 0 and server_rc == 0, (server_out, client_out)


def test_the_shim_is_preloaded_after_the_programs_own_preloads(driver_env: dict[str, str]) -> None:  # noqa: F811
    """``pyroce run`` appends libpyroce_rdmacm.so to LD_PRELOAD, once: the program's own come
    first, as it asked."""
    folder = Path(driver_env["LD_LIBRARY_PATH"].split(os.pathsep)[0])
    shim = str(folder / RDMA_CM_LIBRARY)
    assert driver_env["LD_PRELOAD"].split(":")[-1] == shim and Path(shim).is_file()
    again = driver_environment(folder, {"LD_PRELOAD": f"/opt/librspreload.so {shim}"})
    assert again["LD_PRELOAD"] == f"/opt/librspreload.so:{shim}"


def test_cmtime_times_each_step_of_many_connections(nic: tuple[str, dict[str, str]]) -> None:
    """cmtime: 20 connections made and ended at once through one listener, each step timed (the
    server serves until it is stopped)."""
    address, env = nic
    server = subprocess.Popen(run("cmtime", "-b", address, "-p", "7178"), env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 60
    try:
        while True:  # cmtime exits 0 even when refused: again while its server is not listening yet
            client = connect(run("cmtime", "-s", address, "-p", "7178", "-c", "20"), env, server)
            if not NOT_LISTENING.search(client.stdout) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        server.kill()
        server.communicate()
    assert client.returncode == 0, client.stdout
    steps = re.findall(r"^(\w[\w ]*?)\s*:\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", client.stdout, re.MULTILINE)
    assert steps == ["create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"], (
        client.stdout
    )
