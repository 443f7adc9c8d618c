"""qperf through pyroce, for ``run.py``: Debian's qperf 0.4.11, unmodified, its ``rc_lat`` (2-byte
SENDs) and ``rc_bw`` (64 KiB SENDs) over rdma_cm (``-cm1``), server and client on this host on a
shared NIC of their own, beside perftest's rows. The figures are qperf's own: its latency is the
mean half round trip (qperf gives no percentile), its bandwidth in decimal MB/s. Without qperf, a
C compiler or libibverbs-dev the rows are skipped with a note, never an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

from perftest_rows import rows_on_a_shared_nic

RESULT = re.compile(r"^\s+(?:bw|latency)\s+=\s+([\d.]+) (\S+)$", re.MULTILINE)
SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6, "KB/sec": 1e-3, "MB/sec": 1.0, "GB/sec": 1e3}  # to us, MB/s


def qperf_rows(quick: bool, port: int) -> tuple[list[dict[str, Any]], str | None]:
    """run.py's rows for qperf's ``rc_lat`` and ``rc_bw``, or none and the reason they were skipped."""
    return rows_on_a_shared_nic(("qperf",), "qperf", lambda env: shared_nic_rows(quick, env, port))


def shared_nic_rows(quick: bool, env: dict[str, str], port: int) -> list[dict[str, Any]]:
    seconds = "1" if quick else "5"
    server = subprocess.Popen(["qperf", "-lp", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        lat = measure(["-lp", str(port), "-t", seconds, "-cm1", "-m", "2", env["PYROCE_ADDR"], "rc_lat"], env)
        bw = measure(["-lp", str(port), "-t", seconds, "-cm1", "-m", "65536", env["PYROCE_ADDR"], "rc_bw"], env)
    finally:
        server.kill()
        server.wait()
    return [
        {"op": "send", "metric": "bw", "series": "qperf", "size": 65536, "qps": 1, "MBps": bw,
         "msgs_per_s": bw * 1e6 / 65536},
        {"op": "send", "metric": "lat", "series": "qperf", "size": 2, "qps": 1, "lat_us_p50": lat},
    ]  # fmt: skip


def measure(options: list[str], env: dict[str, str]) -> float:
    """One qperf client run (it waits for its server): its figure in us or MB/s."""
    done = subprocess.run(["qperf", *options], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=120, check=False)  # fmt: skip
    found = RESULT.search(done.stdout)
    if done.returncode != 0 or found is None or found.group(2) not in SCALE:
        raise RuntimeError(f"qperf {options[-1]} failed: {done.stdout.strip().splitlines()[-3:]}")
    return float(found.group(1)) * SCALE[found.group(2)]


if __name__ == "__main__":
    rows, note = qperf_rows(quick="--quick" in sys.argv, port=20000 + os.getpid() % 20000)
    print(note or "\n".join(map(str, rows)))
