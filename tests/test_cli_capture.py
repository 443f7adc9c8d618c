"""``pyroce capture``: another process's device records its traffic into a pcap file, every
ICRC verifying; one-line errors; the device stops when the tool is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import ROOT, assert_one_line_error, background, cli_env, pyroce
from tests.pingpong_pair import free_port, wait_listening
from tests.test_cli_stats import dead_pid

pytestmark = pytest.mark.embedded_nic  # a capture is of one process's own NIC


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """A running program moving data (``tests.busy_device``) and the environment to reach it."""
    env = {"PYROCE_STATS_DIR": str(tmp_path / "stats")}
    program = subprocess.Popen([sys.executable, "-m", "tests.busy_device"], cwd=ROOT, env=cli_env(env), text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert program.stdout is not None and program.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while not list((tmp_path / "stats").glob(f"{program.pid}-pyroce0.json")):  # published once a second
            assert time.monotonic() < deadline, "the device published no stats file"
            time.sleep(0.05)
        yield program, env
    finally:
        assert program.stdin is not None
        program.stdin.close()
        program.wait(timeout=60)


def decoded(path: Path, env: dict[str, str]) -> list[dict[str, object]]:
    result = pyroce("decode", "--json", str(path), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_capture_count_frames_of_another_process(busy, tmp_path: Path) -> None:
    program, env = busy
    pcap = tmp_path / "busy.pcap"
    result = pyroce("capture", "--pid", str(program.pid), "-w", str(pcap), "--count", "20", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"20 frames written to {pcap}" in result.stdout
    documents = decoded(pcap, env)
    packets = [document for document in documents if document["type"] == "packet"]
    assert len(packets) == 20 and all(packet["icrc_ok"] for packet in packets), documents
    assert documents[-1] == {"type": "summary", "frames": 20, "roce": 20, "icrc_bad": 0, "malformed": 0, "other": 0,
                             "gso_split": 0, "icrc_ok": 20}  # fmt: skip
    assert {packet["opcode"] for packet in packets} >= {"RC_RDMA_WRITE_MIDDLE", "RC_ACKNOWLEDGE"}
    assert not list((tmp_path / "stats").glob("*.capture*"))  # the request and the answer are gone


def test_capture_stops_when_the_tool_is_gone(busy, tmp_path: Path) -> None:
    program, env = busy
    pcap = tmp_path / "timed.pcap"
    result = pyroce("capture", "--pid", str(program.pid), "-w", str(pcap), "--timeout", "0.5", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    size = pcap.stat().st_size
    assert size > 24 and f"frames written to {pcap}" in result.stdout
    time.sleep(0.6)  # more than the device's CHECK_EVERY_S: it still moves data
    assert pcap.stat().st_size == size


def test_no_device_running(tmp_path: Path) -> None:
    env = {"PYROCE_STATS_DIR": str(tmp_path)}
    result = pyroce("capture", "-w", str(tmp_path / "x.pcap"), env=env, timeout=30)
    assert_one_line_error(result, "no pyroce0 is running", "pyroce stats")


def test_unknown_pid(tmp_path: Path) -> None:
    env = {"PYROCE_STATS_DIR": str(tmp_path)}
    result = pyroce("capture", "--pid", str(dead_pid()), "-w", str(tmp_path / "x.pcap"), env=env, timeout=30)
    assert_one_line_error(result, "runs no pyroce0", "pyroce stats")


def test_unwritable_path(busy, tmp_path: Path) -> None:
    program, env = busy
    result = pyroce("capture", "--pid", str(program.pid), "-w", str(tmp_path / "missing" / "x.pcap"), env=env,
                    timeout=30)  # fmt: skip
    assert_one_line_error(result, "No such file or directory")
    assert not os.path.exists(tmp_path / "stats" / f"{program.pid}-pyroce0.capture")


def test_tshark_dissects_the_capture_as_infiniband(busy, tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    program, env = busy
    pcap = tmp_path / "tshark.pcap"
    assert pyroce("capture", "--pid", str(program.pid), "-w", str(pcap), "--count", "10", env=env).returncode == 0
    shown = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols", "-e", "infiniband.bth.opcode"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    lines = shown.stdout.splitlines()
    assert len(lines) == 10 and all("infiniband" in line for line in lines), shown.stdout


def test_a_capture_during_ud_pingpong_opens_in_tshark_as_infiniband(tmp_path: Path) -> None:
    """``pyroce capture`` of the ud_pingpong server while the client plays: every frame is a UD
    SEND that tshark dissects as InfiniBand (BTH and DETH), and every ICRC verifies."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (CI installs it)")
    env = {"PYROCE_STATS_DIR": str(tmp_path / "stats")}
    port = free_port(30)
    server = background("ud_pingpong", "-p", str(port), "-n", "100000", env=env)
    client = None
    try:
        wait_listening(port, server)
        client = background("ud_pingpong", "-p", str(port), "-n", "100000", "127.0.0.1", env=env)
        deadline = time.monotonic() + 10
        while not list((tmp_path / "stats").glob(f"{server.pid}-pyroce0.json")):
            assert time.monotonic() < deadline, "the server's device published no stats file"
            time.sleep(0.05)
        pcap = tmp_path / "ud.pcap"
        result = pyroce("capture", "--pid", str(server.pid), "-w", str(pcap), "--count", "20", env=env, timeout=60)
        assert result.returncode == 0, result.stderr
    finally:
        for process in (client, server):
            if process is not None:
                process.kill()
                process.communicate()
    shown = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols", "-e",
                            "infiniband.bth.opcode", "-e", "infiniband.deth.q_key"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    lines = [line.split("\t") for line in shown.stdout.splitlines()]
    assert len(lines) == 20, shown.stdout
    assert all("infiniband" in protocols and opcode == "100" and int(qkey, 16) == 0x11111111
               for protocols, opcode, qkey in lines), shown.stdout  # fmt: skip
    documents = decoded(pcap, env)
    assert documents[-1]["icrc_ok"] == 20 and documents[-1]["icrc_bad"] == 0, documents[-1]
