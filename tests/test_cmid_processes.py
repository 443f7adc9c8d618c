"""rdma_cm between two processes, each a pyverbs program with its own NIC on its own loopback
address (``PYROCE_ADDR``): the client names only the server's address and port; the CM MADs,
then the data, cross the UDP link between the two NICs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroce.pyverbs_path import DIRECTORY
from tests.shared_nic import private_address, shared_nic
from tests.waiting import readable

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(__file__).resolve().parent / "cm_peer.py"
DEADLINE_S = 60
MESSAGE = "a message between two NICs"  # cm_peer.py's


def peer_env(address: str, nic: str) -> dict[str, str]:
    paths = [str(DIRECTORY), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYROCE_ADDR=address, PYROCE_NIC=nic, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@contextmanager
def peer(role: str, own: str, *arguments: str, nic: str = "own") -> Iterator[subprocess.Popen[str]]:
    """``cm_peer.py role *arguments`` on a NIC of address ``own`` (its own, or the shared NIC
    there), stopped (by pid) at the end."""
    process = subprocess.Popen([sys.executable, str(PEER), role, *arguments], env=peer_env(own, nic), text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def line_of(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    assert readable(process.stdout.fileno(), DEADLINE_S), f"{process.args[2]} said nothing in {DEADLINE_S} s"
    return process.stdout.readline().strip()


def finish(process: subprocess.Popen[str]) -> list[str]:
    """The rest of the peer's lines, after it exited 0."""
    try:
        out, _ = process.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"{process.args[2]} did not finish: {out}") from None
    assert process.returncode == 0, f"{process.args[2]} failed: {out}"
    return out.splitlines()


def test_connect_exchange_disconnect_between_two_nics() -> None:
    server_address, client_address = private_address(), private_address()
    with peer("server", server_address, server_address, "7471", "accept") as server:
        assert line_of(server) == "listening"
        with peer("client", client_address, server_address, "7471") as client:
            assert finish(client) == ["established", f"echoed {MESSAGE[::-1]}", "disconnected"]
        assert finish(server) == ["established", f"received {MESSAGE}", "disconnected"]


def test_reject_with_private_data_between_two_nics() -> None:
    server_address, client_address = private_address(), private_address()
    with peer("server", server_address, server_address, "7472", "reject") as server:
        assert line_of(server) == "listening"
        with peer("rejected", client_address, server_address, "7472") as client:
            assert finish(client) == ["rejected connection rejected"]
        assert finish(server) == ["rejected"]


def test_a_server_and_a_client_on_one_address_through_the_shared_nic(tmp_path: Path, monkeypatch) -> None:
    """As on a real host: both programs on the host's one address, the server listening on a
    port of it, the client naming it; the one shared NIC's CM serves both."""
    with shared_nic(tmp_path) as (place, env, _process):
        monkeypatch.setenv("PYROCE_STATS_DIR", env["PYROCE_STATS_DIR"])
        on_one_nic(place.address)


def on_one_nic(address: str) -> None:
    with peer("server", address, address, "7473", "accept", nic="shared") as server:
        assert line_of(server) == "listening"
        with peer("client", address, address, "7473", nic="shared") as client:
            assert finish(client) == ["established", f"echoed {MESSAGE[::-1]}", "disconnected"]
        assert finish(server) == ["established", f"received {MESSAGE}", "disconnected"]


def test_a_program_killed_while_connected_is_disconnected_from_its_peer(tmp_path: Path, monkeypatch) -> None:
    """The kernel's part for a dead process: its ids are destroyed, a connected one sends its
    DREQ, so the peer gets DISCONNECTED (here both on one shared NIC, the client SIGKILLed)."""
    with shared_nic(tmp_path) as (place, env, _process):
        monkeypatch.setenv("PYROCE_STATS_DIR", env["PYROCE_STATS_DIR"])
        with peer("watch", place.address, place.address, "7474", nic="shared") as server:
            assert line_of(server) == "listening"
            with peer("hold", place.address, place.address, "7474", nic="shared") as client:
                assert line_of(client) == "established"
                assert line_of(server) == "RDMA_CM_EVENT_ESTABLISHED"
                client.kill()
                client.wait(10)
            assert line_of(server) == "RDMA_CM_EVENT_DISCONNECTED"
            assert finish(server) == []


def test_a_program_that_ends_while_connected_is_disconnected_from_its_peer() -> None:
    """A program that returns without disconnecting, each on a NIC of its own: its NIC sends the
    DREQ as the program ends (as the kernel does for a closing process), so the peer gets
    DISCONNECTED instead of a connection that looks alive forever."""
    server_address, client_address = private_address(), private_address()
    with peer("watch", server_address, server_address, "7475") as server:
        assert line_of(server) == "listening"
        with peer("hold", client_address, server_address, "7475") as client:
            assert line_of(client) == "established"
            assert line_of(server) == "RDMA_CM_EVENT_ESTABLISHED"
            assert finish(client) == []  # stdin closed: the program returns, still connected
        assert line_of(server) == "RDMA_CM_EVENT_DISCONNECTED"
        assert finish(server) == []
