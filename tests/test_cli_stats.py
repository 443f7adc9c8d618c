"""``pyroce stats``: the counters of the running devices; files of dead processes removed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyroce.host.stats_file import PUBLISH_EVERY_S, PUBLISH_SHARE, StatsFile
from tests.cli import ROOT, cli_env, pyroce


def device_counters(stats: str) -> dict[str, int]:
    """The device counters of ``pyroce stats`` output (``  name  value`` lines, not the QPs')."""
    lines = [line for line in stats.splitlines() if line.startswith("  ") and line[2] != " "]
    return {name: int(value) for name, value in (line.split() for line in lines if not line.startswith("  qp"))}


@pytest.mark.embedded_nic  # each program's own NIC is a row of its own
def test_stats_shows_running_devices(tmp_path: Path) -> None:
    env = {"PYROCE_STATS_DIR": str(tmp_path)}
    program = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r});"
        "from tests.rc_pair import connected_pair;"
        "from pyroce.verbs.wr import SGE, SendWR, RecvWR;"
        "a, b = connected_pair();"
        "b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 100, b.mr.lkey)]));"
        "a.qp.post_send(SendWR(wr_id=2, sg=[SGE(a.mr.buf, 100, a.mr.lkey)]));"
        "a.poll(); b.poll(); print('ready', flush=True); sys.stdin.readline()"
    )
    holder = subprocess.Popen([sys.executable, "-c", program], env=cli_env(env), text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while True:  # the engine publishes its counters once a second
            result = pyroce("stats", "--qp", env=env)
            counters = device_counters(result.stdout)
            if min(counters.get("sent_pkts", 0), counters.get("rcvd_pkts", 0)) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert result.returncode == 0
        assert f"pyroce0 pid {holder.pid}" in result.stdout
        assert counters["sent_pkts"] >= 2 and counters["rcvd_pkts"] >= 2, result.stdout
        assert "  qp 0x" in result.stdout
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert pyroce("stats", env=env).stdout.strip() == "no pyroce device is running"


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=30)  # fmt: skip
    return int(proc.stdout)


def test_files_of_ended_processes_are_removed(tmp_path: Path) -> None:
    pid = dead_pid()
    stale = tmp_path / f"{pid}-pyroce0.json"
    stale.write_text(json.dumps({"device": "pyroce0", "pid": pid, "address": "127.64.0.1", "counters": {}, "qps": {}}))
    partial = tmp_path / f"{pid}-pyroce0.json.tmp"
    partial.write_text("{")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("kept")
    result = pyroce("stats", "--json", env={"PYROCE_STATS_DIR": str(tmp_path)}, timeout=30)
    assert result.returncode == 0 and json.loads(result.stdout) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]


def test_a_costly_counters_file_is_written_less_often(tmp_path: Path) -> None:
    """A write that takes longer (many QPs' counters) pushes the next one out, so that the file
    costs the engine thread at most PUBLISH_SHARE of its time; what it wrote is whole."""
    stats_file = StatsFile(str(tmp_path), "pyroce9")
    slow = 0.02  # at least this long: the next write is due no sooner than slow / PUBLISH_SHARE

    def document() -> dict[str, object]:
        time.sleep(slow)
        return {"device": "pyroce9", "counters": {"sent_pkts": 7}}

    assert stats_file.due(100.0)
    stats_file.write(document, 100.0)
    assert stats_file.path is not None
    assert json.loads(Path(stats_file.path).read_text())["counters"] == {"sent_pkts": 7}
    assert stats_file.interval >= slow / PUBLISH_SHARE > PUBLISH_EVERY_S
    assert not stats_file.due(100.0 + PUBLISH_EVERY_S)  # once a second would have written again
    assert stats_file.due(100.0 + stats_file.interval)
