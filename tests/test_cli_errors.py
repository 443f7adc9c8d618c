"""Every bad input a new user can give ``pyroce demo``: one line on stderr naming what is wrong,
a non-zero exit, no traceback, within a time limit."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.cli import assert_one_line_error, background, pyroce


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["demo", "--serve", "99999"], ["argument --serve", "port 99999 is not 0..65535"]),
        (["demo", "--serve", "65536"], ["argument --serve", "65536"]),
        (["demo", "--serve", "-1"], ["argument --serve", "port -1"]),
        (["demo", "--serve", "notaport"], ["argument --serve", "'notaport' is not a port number"]),
        (["demo", "--connect", "nohost"], ["argument --connect", "'nohost' is not HOST:PORT"]),
        (["demo", "--connect", "nohost.invalid:18515"], ["argument --connect", "cannot resolve host"]),
        (["demo", "--connect", "127.0.0.1:70000"], ["argument --connect", "port 70000"]),
        (["demo", "--connect", "127.0.0.1:0"], ["argument --connect", "port 0"]),
        (["demo", "--connect", "256.0.0.1:18515"], ["argument --connect", "256.0.0.1"]),
        (["demo", "--loss", "2"], ["argument --loss", "between 0 and 1"]),
        (["demo", "--corrupt", "x"], ["argument --corrupt", "'x' is not a number"]),
        (["demo", "--timeout", "0"], ["argument --timeout", "positive"]),
        (["demo", "--timeout", "nan"], ["argument --timeout", "positive"]),
        (["demo", "--seed", "x"], ["argument --seed"]),
        (["nosuchtool"], ["pyroce: error: argument COMMAND: invalid choice"]),
        (["decode"], ["pyroce decode: error:", "file"]),
    ],
)
def test_bad_arguments(args: list[str], words: list[str]) -> None:
    result = pyroce(*args, timeout=30)
    assert_one_line_error(result, *words)
    assert result.returncode == 2 and result.stdout == ""


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def test_nothing_listening_names_the_peer() -> None:
    port = free_port()
    result = pyroce("demo", "--connect", f"127.0.0.1:{port}", "--timeout", "1", timeout=30)
    assert_one_line_error(result, f"cannot connect to 127.0.0.1:{port}: connection refused")


@pytest.fixture
def foreign_server(request: pytest.FixtureRequest) -> Iterator[int]:
    """A TCP server that is not a pyroce demo: it greets with ``request.param`` (None: silent)."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            if request.param is not None:
                conn.sendall(request.param)
            done.wait(30)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(30)
        listener.close()


@pytest.mark.parametrize("foreign_server", [b"SSH-2.0-OpenSSH_9.6\r\n"], indirect=True)
def test_a_peer_speaking_something_else_fails_fast(foreign_server: int) -> None:
    start = time.monotonic()
    result = pyroce("demo", "--connect", f"127.0.0.1:{foreign_server}", timeout=30)
    assert_one_line_error(result, f"127.0.0.1:{foreign_server} is not a pyroce demo", "SSH-2.0")
    assert time.monotonic() - start < 5  # not the 60 s timeout


@pytest.mark.parametrize("foreign_server", [None], indirect=True)
def test_a_silent_peer_is_named(foreign_server: int) -> None:
    result = pyroce("demo", "--connect", f"127.0.0.1:{foreign_server}", "--timeout", "1", timeout=30)
    assert_one_line_error(result, f"127.0.0.1:{foreign_server}: no pyroce demo greeting within 1 s")


def test_serve_says_its_port_and_times_out() -> None:
    server = background("demo", "--serve", "127.0.0.1:0", "--timeout", "0.5")
    out, err = server.communicate(timeout=30)
    port = int(out.split("listening on 127.0.0.1:")[1].split()[0])
    assert port != 0
    assert server.returncode == 1
    assert err == f"pyroce demo: error: no client connected to 127.0.0.1:{port} within 0.5 s\n"


def test_serve_on_a_busy_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = pyroce("demo", "--serve", f"127.0.0.1:{port}", timeout=30)
    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{port}: Address already in use")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"PYROCE_PROGRESS": "bogus"}, ["PYROCE_PROGRESS='bogus' is not one of inline, thread, host"]),
        ({"PYROCE_GSO": "2"}, ["PYROCE_GSO='2' is not 0 or 1"]),
        ({"PYROCE_PRINT_STATS": "yes"}, ["PYROCE_PRINT_STATS='yes' is not 0 or 1"]),
        ({"PYROCE_FAULTS": "loss=x"}, ["PYROCE_FAULTS"]),
        ({"PYROCE_ADDR": "nonsense"}, ["PYROCE_ADDR='nonsense' is not an IPv4 or IPv6 address"]),
        ({"PYROCE_ADDR": "192.0.2.1"}, ["192.0.2.1 is not an address of this host"]),  # TEST-NET-1
    ],
)
@pytest.mark.embedded_nic  # the settings of a program's own NIC
def test_device_errors_show_once(env: dict[str, str], words: list[str]) -> None:
    result = pyroce("demo", env=env, timeout=60)
    assert_one_line_error(result, "pyroce demo: error: Failed to open device pyroce0", *words)
    assert result.returncode == 1


@pytest.mark.embedded_nic  # --loss: link faults of the demo's own NICs
def test_a_failed_completion_shows_its_status_and_reason() -> None:
    result = pyroce("demo", "--loss", "1", "--timeout", "20", timeout=60)
    assert_one_line_error(result, "SEND of 0 B failed with IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)",
                          "no ACK for PSN", "after 7 retries")  # fmt: skip
    assert result.returncode == 1


def test_help_lists_the_environment() -> None:
    result = pyroce("--help", timeout=30)
    assert result.returncode == 0
    environment = result.stdout.split("environment:\n")[1]
    for name in ("PYROCE_ADDR", "PYROCE_PROGRESS", "PYROCE_VERIFY_ICRC", "PYROCE_GSO", "PYROCE_FAULTS",
                 "PYROCE_STATS_DIR"):  # fmt: skip
        assert f"  {name}=" in environment
    assert "inline" in environment and "thread" in environment and "host" in environment
