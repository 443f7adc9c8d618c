"""``pyroce rc_pingpong`` between two processes, as ``ibv_rc_pingpong`` runs: the server waits
on a TCP port, the client connects, both print their addresses and the rate lines."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli import ROOT, assert_one_line_error, cli_env, pyroce
from tests.pingpong_pair import ADDRESS, BYTES, ITERS, free_port, run_pair


def pingpong(port: int, *options: str) -> tuple[str, str]:
    """Run a server and a client with ``options``; both outputs."""
    server_out, _, client_out, _, _ = run_pair("rc_pingpong", port, *options)
    return server_out, client_out


@pytest.mark.parametrize(("size", "offset"), [(4096, 0), (1, 1)])
def test_server_and_client_print_ibv_rc_pingpong_lines(size, offset):
    outputs = pingpong(free_port(offset), "-n", "50", "-s", str(size))
    for out in outputs:
        lines = out.splitlines()
        assert ADDRESS.match(lines[0]) and lines[0].startswith("  local address:  "), out
        assert ADDRESS.match(lines[1]) and lines[1].startswith("  remote address: "), out
        assert int(BYTES.search(out)[1]) == 2 * 50 * size, out
        assert int(ITERS.search(out)[1]) == 50, out
    server_lines, client_lines = (out.splitlines() for out in outputs)
    assert server_lines[0][len("  local address:  ") :] == client_lines[1][len("  remote address: ") :]


def test_check_finds_the_clients_pattern_on_both_sides():
    for out in pingpong(free_port(2), "-n", "20", "-s", "10000", "-c"):
        assert "invalid data" not in out, out
        assert ITERS.search(out), out


@pytest.mark.parametrize(("option", "words"), [(("-m", "100"), ("--mtu", "100")), (("-r", "0"), ("--rx-depth",)),
                                               (("-p", "70000"), ("--port",))])  # fmt: skip
def test_bad_options_are_one_line(option, words):
    assert_one_line_error(pyroce("rc_pingpong", *option, timeout=30), *words)


def test_a_missing_gid_index_is_named():
    result = pyroce("rc_pingpong", "-g", "16", "127.0.0.1", timeout=30)
    assert_one_line_error(result, "can't read sgid of index 16")


def test_tools_wrapper_runs_the_packaged_tool():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "rc_pingpong.py"), "-m", "7"], env=cli_env(),
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 2 and "mtu 7 is not one of" in done.stderr, done
