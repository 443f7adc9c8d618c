"""perftest (Debian's perftest 4.5 binaries, unmodified) on pyroce: ``pyroce run -- ib_*``
pyroce to pyroce on loopback, each tool run to its final table; a peer killed mid-transfer
leaves the other with perftest's own error, no hang.

Skipped only where perftest (apt-get install perftest), the C compiler or libibverbs-dev are
not installed. Sizes and iteration counts are small: the figures are asserted positive, never
compared (timing belongs to benchmarks/run.py)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pyroce.driver.build import STUB_LIBRARIES, library_dir
from tests.cli import SHARED_NIC_ADDRESS, cli_env, command, free_port, listening

TOOLS = ("ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw",
         "ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_atomic_lat")  # fmt: skip
MISSING = [what for what, present in (("a C compiler (cc)", shutil.which("cc")),
                                      ("libibverbs-dev", Path("/usr/include/infiniband/verbs.h").is_file()),
                                      ("perftest", all(shutil.which(tool) for tool in TOOLS)))
           if not present]  # fmt: skip
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")
# perftest's clock calibration (get_cpu_mhz) gives up when the CPU was taken from it while it
# sampled; on a shared 2-core machine that happens now and then, and is no part of pyroce
CALIBRATION = "Correlation coefficient r^2"
ATTEMPTS = 3
PROVIDERS = {"MLX5": "libmlx5.so.1", "EFA": "libefa.so.1"}  # a symbol version's prefix: its library
TIMEOUT = 120


@dataclass(frozen=True)
class Table:
    """A perftest final table: its column header and its rows of numbers."""

    header: str
    rows: list[list[float]]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of ``pyroce run``, the C driver and its stub providers built into this
    run's own cache; both sides on the run's shared NIC."""
    cache = tmp_path_factory.mktemp("cache")
    environment = cli_env({"PYROCE_CACHE_DIR": str(cache), "PYROCE_ADDR": SHARED_NIC_ADDRESS},
                          drop=("PYROCE_PROGRESS", "PYROCE_FAULTS"))  # fmt: skip
    old = os.environ.get("PYROCE_CACHE_DIR")
    os.environ["PYROCE_CACHE_DIR"] = str(cache)
    try:
        library_dir()
    finally:
        if old is None:
            del os.environ["PYROCE_CACHE_DIR"]
        else:
            os.environ["PYROCE_CACHE_DIR"] = old
    return environment


def final_table(out: str) -> Table:
    """The last table perftest printed: the ``#bytes`` header and the numeric rows under it."""
    lines = out.splitlines()
    start = max(index for index, line in enumerate(lines) if line.lstrip().startswith("#bytes"))
    rows = []
    for line in lines[start + 1 :]:
        if not re.match(r"^\s*\d", line):
            break
        rows.append([float(field) for field in line.split()])
    return Table(lines[start], rows)


def perftest(tool: str, env: dict[str, str], port: int, *options: str) -> tuple[subprocess.Popen[str], list[str]]:
    """A perftest server started through ``pyroce run`` and listening; the client's command."""
    argv = command("run", "--", tool, "-d", "pyroce0", "-p", str(port), *options)
    server = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not listening(port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"{tool} server did not listen: {server.communicate()[0]}")
        time.sleep(0.02)
    return server, [*argv, "127.0.0.1"]


def run_pair(tool: str, env: dict[str, str], port: int, *options: str) -> tuple[int, str, int, str]:
    """Server and client to their ends: each one's exit status and output (stdout and stderr).
    Run again when perftest's clock calibration gave up (``CALIBRATION``)."""
    for _ in range(ATTEMPTS):
        server, client_argv = perftest(tool, env, port, *options)
        try:
            client = subprocess.run(client_argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    timeout=TIMEOUT, check=False)  # fmt: skip
            server_out = server.communicate(timeout=TIMEOUT)[0]
        finally:
            if server.poll() is None:
                server.kill()
                server.communicate()
        if CALIBRATION not in server_out + client.stdout:
            break
    return server.returncode, server_out, client.returncode, client.stdout


def test_the_stub_providers_export_every_symbol_perftest_imports_from_them(env: dict[str, str]) -> None:
    """Each stub library defines every (symbol, version) a perftest binary needs of libmlx5 and
    libefa, and every binary loads with all its symbols bound at once (LD_BIND_NOW), the
    system's librdmacm and libibumad included."""
    folder = library_dir_of(env)
    exported = {name: symbols(folder / name, defined=True) for name in STUB_LIBRARIES}
    assert set(exported) == set(PROVIDERS.values())
    for tool in TOOLS:
        for version, symbol in symbols(Path(shutil.which(tool) or tool), defined=False):
            library = PROVIDERS.get(version.split("_")[0])
            if library is not None:
                assert (version, symbol) in exported[library], (tool, version, symbol)
        done = subprocess.run(command("run", "--", tool, "-h"), env={**env, "LD_BIND_NOW": "1"}, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert "Usage:" in done.stdout and "error" not in done.stderr, done.stderr


def library_dir_of(env: dict[str, str]) -> Path:
    return next(Path(env["PYROCE_CACHE_DIR"]).glob("driver-*"))


def symbols(path: Path, *, defined: bool) -> set[tuple[str, str]]:
    """(version, name) of each dynamic symbol ``path`` defines, or imports."""
    table = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 3 and ("*UND*" not in fields) == defined and fields[-2].strip("()").isupper():
            found.add((fields[-2].strip("()"), fields[-1]))
    return found


@pytest.mark.parametrize(("tool", "options", "size", "iterations"), [
    ("ib_send_bw", ("-s", "4096", "-n", "40", "-q", "2", "--report_gbits"), 4096, 80),
    ("ib_write_bw", ("-s", "65536", "-n", "40"), 65536, 40),
    ("ib_read_bw", ("-s", "1000", "-n", "30", "-q", "3"), 1000, 90),
    ("ib_atomic_bw", ("-n", "100", "-q", "2"), 8, 200),
    ("ib_send_lat", ("-s", "2", "-n", "50"), 2, 50),
    ("ib_write_lat", ("-s", "64", "-n", "50"), 64, 50),
    ("ib_read_lat", ("-s", "4096", "-n", "50"), 4096, 50),
    ("ib_atomic_lat", ("-n", "50", "-A", "CMP_AND_SWAP"), 8, 50),
])  # fmt: skip
def test_each_tool_runs_rc_to_its_final_table(env: dict[str, str], tool: str, options: tuple[str, ...], size: int,
                                              iterations: int) -> None:  # fmt: skip
    """RC, pyroce to pyroce: both sides exit 0, the client's table has one row of the size and
    iterations asked (times the QPs), every figure positive. perftest takes its old post-send
    path by itself: pyroce0 is no device it knows to have ibv_wr_*."""
    server_rc, server_out, client_rc, client_out = run_pair(tool, env, free_port(25), *options)
    assert (server_rc, client_rc) == (0, 0), server_out + client_out
    assert re.search(r"ibv_wr\* API\s+: OFF", client_out), client_out
    table = final_table(client_out)
    assert ("Gb/sec" if "--report_gbits" in options else "#bytes") in table.header
    assert len(table.rows) == 1, client_out
    assert table.rows[0][:2] == [size, iterations], client_out
    assert all(value > 0 for value in table.rows[0][2:]), client_out


def test_all_sizes_give_a_row_each(env: dict[str, str]) -> None:
    """``-a``: sizes 2 B to 8 MiB, one row each."""
    _, _, client_rc, client_out = run_pair("ib_write_bw", env, free_port(26), "-a", "-n", "5")
    assert client_rc == 0, client_out
    table = final_table(client_out)
    assert [row[0] for row in table.rows] == [2**power for power in range(1, 24)], client_out
    # MB/s has two decimals: 5 messages of 2 B may print 0.00; the message rate (Mpps, six) may not
    assert all(row[1] == 5 and row[4] > 0 for row in table.rows), client_out
    assert all(min(row[2:4]) > 0 for row in table.rows if row[0] >= 4096), client_out


@pytest.mark.parametrize(("tool", "options"), [("ib_send_bw", ("-s", "10000", "-n", "30")),
                                               ("ib_write_lat", ("-s", "100", "-n", "30"))])  # fmt: skip
def test_uc_runs_to_its_final_table(env: dict[str, str], tool: str, options: tuple[str, ...]) -> None:
    server_rc, server_out, client_rc, client_out = run_pair(tool, env, free_port(27), "-c", "UC", *options)
    assert (server_rc, client_rc) == (0, 0), server_out + client_out
    assert "Connection type : UC" in client_out
    assert len(final_table(client_out).rows) == 1, client_out


@pytest.mark.parametrize(("tool", "options"), [("ib_send_bw", ("-s", "2048", "-n", "50")),
                                               ("ib_send_lat", ("-s", "64", "-n", "50"))])  # fmt: skip
def test_ud_runs_to_its_final_table(env: dict[str, str], tool: str, options: tuple[str, ...]) -> None:
    """UD (perftest's SEND tools): one datagram per message, to an address handle."""
    server_rc, server_out, client_rc, client_out = run_pair(tool, env, free_port(28), "-c", "UD", *options)
    assert (server_rc, client_rc) == (0, 0), server_out + client_out
    assert "Connection type : UD" in client_out
    table = final_table(client_out)
    assert len(table.rows) == 1 and table.rows[0][:2] == [int(options[1]), 50], client_out


@pytest.mark.parametrize(("victim", "message"), [
    ("server", "Completion with error at client"),  # its WRITEs fail: see below
    ("client", "Couldn't read remote address"),  # its end-of-test exchange never comes
])  # fmt: skip
def test_a_peer_killed_mid_transfer_leaves_the_other_with_an_error(env: dict[str, str], victim: str,
                                                                   message: str) -> None:  # fmt: skip
    """``ib_write_bw -D 30``: once the client prints its table's header (the WRITEs flowing),
    one side is killed; the other exits non-zero with perftest's message, long before the 30 s."""
    server, client_argv = perftest("ib_write_bw", env, free_port(29), "-D", "30")
    # perftest's stdout is a pipe here, so fully buffered: the header would come at its end
    at = client_argv.index("--") + 1
    client_argv = [*client_argv[:at], "stdbuf", "-oL", *client_argv[at:]]
    client = subprocess.Popen(client_argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert client.stdout is not None
        seen = ""
        while "#bytes" not in seen:
            line = client.stdout.readline()
            assert line, seen
            seen += line
        killed, peer = (server, client) if victim == "server" else (client, server)
        os.kill(killed.pid, signal.SIGKILL)
        rest = peer.communicate(timeout=20)[0]
        out = (seen if peer is client else "") + rest
        assert peer.returncode != 0 and message in out, out
        if victim == "server":
            # IBV_WC_RETRY_EXC_ERR once the shared NIC has destroyed the dead program's QP; a
            # WRITE that came in the moment between its memory going and its connection's end
            # (the kernel releases a process's memory before its files) is IBV_WC_REM_ACCESS_ERR
            assert re.search(r"Failed status (12|10):", out), out
    finally:
        for process in (server, client):
            if process.poll() is None:
                process.kill()
            process.communicate()
