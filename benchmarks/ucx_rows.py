"""UCX through pyroce, for ``run.py``: Debian's ``ucx_perftest`` (ucx-utils 1.13), unmodified, its
tag-matching latency (``tag_lat``, 8 bytes), tag-matching bandwidth (``tag_bw``) and RDMA WRITE
bandwidth (``ucp_put_bw``), 64 KiB each (200 messages, for the run's time), server and client on
this host on a shared NIC of their
own, on pyroce0's transports only (``UCX_TLS=rc_verbs,ud_verbs,self``: rc_verbs carries the data,
ud_verbs its connection), beside perftest's rows. The figures are ucx_perftest's ``Final:`` line:
latency its 50th percentile of half round trips, bandwidth its overall average (UCX's MB is
2^20 bytes, converted here to run.py's 10^6) and message rate. Without ucx_perftest, a C compiler
or libibverbs-dev the rows are skipped with a note, never an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

from perftest_rows import MIB, client_run, rows_on_a_shared_nic

NOT_LISTENING = "connect() failed: Connection refused"  # ucx_perftest's client came before its server
TRANSPORTS = {"UCX_TLS": "rc_verbs,ud_verbs,self", "UCX_NET_DEVICES": "pyroce0:1"}


def ucx_rows(quick: bool, port: int) -> tuple[list[dict[str, Any]], str | None]:
    """run.py's rows for ucx_perftest's ``tag_lat``, ``tag_bw`` and ``ucp_put_bw``, or none and the
    reason they were skipped."""
    return rows_on_a_shared_nic(("ucx_perftest",), "ucx-utils", lambda env: shared_nic_rows(quick, env, port))


def shared_nic_rows(quick: bool, env: dict[str, str], port: int) -> list[dict[str, Any]]:
    env = {**{name: value for name, value in env.items() if not name.startswith("UCX_")}, **TRANSPORTS}
    lat = final(run_pair(["-t", "tag_lat", "-s", "8", "-n", "100" if quick else "2000"], env, port))
    rows = [{"op": "tag", "metric": "lat", "series": "ucx", "size": 8, "qps": 1, "lat_us_p50": lat["p50"]}]
    for test, op in (("tag_bw", "tag"), ("ucp_put_bw", "put")):
        bw = final(run_pair(["-t", test, "-s", "65536", "-n", "50" if quick else "200"], env, port))
        rows.append({"op": op, "metric": "bw", "series": "ucx", "size": 65536, "qps": 1,
                     "MBps": bw["MBps"] * MIB / 1e6, "msgs_per_s": bw["msgs_per_s"]})  # fmt: skip
    return rows


def run_pair(options: list[str], env: dict[str, str], port: int) -> str:
    """A ucx_perftest server on ``port`` and a client with ``options``: the client's output."""
    server = subprocess.Popen(["ucx_perftest", "-p", str(port)], env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)  # fmt: skip
    try:
        client = client_run(["ucx_perftest", "-p", str(port), *options, env["PYROCE_ADDR"]], env, NOT_LISTENING)
        server_out = server.communicate(timeout=300)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    if client.returncode != 0 or server.returncode != 0:
        lines = (client.stdout + server_out).strip().splitlines()
        said = [line for line in lines if "Fatal" in line or "ERROR" in line] or lines[-3:]  # not UCX's backtrace
        raise RuntimeError(f"ucx_perftest {options[1]} failed: {said[:3]}")
    return client.stdout


def final(out: str) -> dict[str, float]:
    """ucx_perftest's ``Final:`` line: iterations, latency (50th percentile, average, overall; us),
    bandwidth (average, overall; MB of 2^20 bytes/s), message rate (average, overall)."""
    found = re.search(r"^Final:\s+(.*)$", out, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"ucx_perftest printed no Final: line: {out.strip().splitlines()[-3:]}")
    _, p50, _, _, _, mbps, _, rate = (float(field) for field in found.group(1).split())
    return {"p50": p50, "MBps": mbps, "msgs_per_s": rate}


if __name__ == "__main__":
    rows, note = ucx_rows(quick="--quick" in sys.argv, port=20000 + os.getpid() % 20000)
    print(note or "\n".join(map(str, rows)))
