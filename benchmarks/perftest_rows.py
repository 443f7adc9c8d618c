"""perftest through pyroce, for ``run.py``: Debian's ``ib_write_bw`` (64 KiB, and 2 bytes for the
message rate) and ``ib_send_lat`` (2 bytes), unmodified, on the C driver, server and client on
this host, both on the shared NIC (``pyroce nicd``, one of the run's own on an address of its
own, stopped after; with its default engines, one per two cores up to 4),
beside ``run.py``'s rows of pyroce's Python verbs, whose NIC is in each program; then the two
``ib_write_bw`` rows again with each program on a shared NIC of its own address (the
``perftest-own`` rows: two NICs, as the Python rows have), which tells what sharing one
address's NIC costs against a NIC each. The figures are perftest's own:
BW average (perftest's MB is 2^20 bytes, converted here to run.py's 10^6), MsgRate, and for
latency t_typical (its median) and the 99% percentile of half round trips. Without perftest, a C
compiler or libibverbs-dev the rows are skipped with a note, never an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pyroce.driver.build import BuildError, library_dir
from pyroce.driver.environment import driver_environment

CALIBRATION = "Correlation coefficient r^2"  # perftest's clock calibration gave up: the CPU was busy
NOT_LISTENING = "Couldn't connect to"  # the client came before the server's listen
ATTEMPTS = 3
MIB = 1 << 20


def perftest_rows(quick: bool, port: int) -> tuple[list[dict[str, Any]], str | None]:
    """run.py's rows for ``ib_write_bw -s 65536``, ``ib_write_bw -s 2`` and ``ib_send_lat -s 2``
    on each NIC, or none and the reason they were skipped."""
    return rows_on_a_shared_nic(
        ("ib_write_bw", "ib_send_lat"), "perftest", lambda env: shared_nic_rows(quick, env, port)
    )


def rows_on_a_shared_nic(tools: tuple[str, ...], package: str,
                         rows: Callable[[dict[str, str]], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], str | None]:  # fmt: skip
    """``rows`` of programs run through ``pyroce run`` on a shared NIC of their own (an address
    of this run's, stopped after), given that NIC's environment; or none and the reason they were
    skipped (``tools`` not installed, or the C driver not built)."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return [], f"{package} rows skipped: {', '.join(missing)} not found (apt-get install {package})"
    try:
        folder = library_dir()
    except BuildError as exc:
        return [], f"{package} rows skipped: {exc}"
    env = {name: value for name, value in driver_environment(folder, os.environ).items()
           if name not in ("PYROCE_ADDR", "PYROCE_PROGRESS")}  # fmt: skip
    with tempfile.TemporaryDirectory() as stats:
        nic_env = {**env, "PYROCE_STATS_DIR": stats, "PYROCE_ADDR": f"127.201.{os.getpid() % 250}.1"}
        try:
            return rows(nic_env), None
        finally:
            stop_nic(nic_env)


def stop_nic(env: dict[str, str]) -> None:
    """Stop the shared NIC at ``env``'s ``PYROCE_ADDR`` (nothing if none runs there)."""
    subprocess.run([sys.executable, "-m", "pyroce", "nicd", "--stop"], env=env, capture_output=True, check=False)


def shared_nic_rows(quick: bool, env: dict[str, str], port: int) -> list[dict[str, Any]]:
    series = "perftest"
    bw = table(run_pair(["ib_write_bw", "-s", "65536", "-n", "1000" if quick else "5000"], env, port))
    rate = table(run_pair(["ib_write_bw", "-s", "2", "-n", "5000" if quick else "50000"], env, port + 1))
    lat = table(run_pair(["ib_send_lat", "-s", "2", "-n", "200" if quick else "2000"], env, port + 2))
    client_env = {**env, "PYROCE_ADDR": env["PYROCE_ADDR"].rsplit(".", 1)[0] + ".2"}  # the client's own NIC
    try:
        bw_own = table(run_pair(["ib_write_bw", "-s", "65536", "-n", "1000" if quick else "5000"], env, port + 3,
                                client_env))  # fmt: skip
        rate_own = table(run_pair(["ib_write_bw", "-s", "2", "-n", "5000" if quick else "50000"], env, port + 4,
                                  client_env))  # fmt: skip
    finally:
        stop_nic(client_env)
    return [
        bw_row(bw, series, 65536, "bw"), bw_row(rate, series, 2, "rate"),
        {"op": "send", "metric": "lat", "series": series, "size": 2, "qps": 1,
         "lat_us_p50": lat["t_typical[usec]"], "lat_us_p99": lat["99% percentile[usec]"]},
        bw_row(bw_own, "perftest-own", 65536, "bw"), bw_row(rate_own, "perftest-own", 2, "rate"),
    ]  # fmt: skip


def bw_row(figures: dict[str, float], series: str, size: int, metric: str) -> dict[str, Any]:
    """run.py's row of an ``ib_write_bw`` run's table."""
    return {"op": "write", "metric": metric, "series": series, "size": size, "qps": 1,
            "MBps": figures["BW average[MB/sec]"] * MIB / 1e6, "msgs_per_s": figures["MsgRate[Mpps]"] * 1e6}  # fmt: skip


def run_pair(argv: list[str], env: dict[str, str], port: int, client_env: dict[str, str] | None = None) -> str:
    """A server (with ``env``) and a client (with ``client_env``, else ``env``) of ``argv`` on
    ``port``: the client's output. Tried again when the client came too early or perftest's
    clock calibration gave up."""
    command = [*argv, "-d", "pyroce0", "-p", str(port)]
    for _ in range(ATTEMPTS):
        server = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            client = client_run([*command, "127.0.0.1"], client_env or env)
            server_out = server.communicate(timeout=300)[0]
        finally:
            if server.poll() is None:
                server.kill()
                server.communicate()
        if client.returncode == 0 and server.returncode == 0:
            return client.stdout
        if CALIBRATION not in client.stdout + server_out:
            break
    raise RuntimeError(f"{argv[0]} failed: {(client.stdout + server_out).strip().splitlines()[-3:]}")


def client_run(
    command: list[str], env: dict[str, str], not_listening: str = NOT_LISTENING
) -> subprocess.CompletedProcess[str]:
    """The client, started again while the server is not listening yet (its output says
    ``not_listening``: perftest and ucx_perftest try once)."""
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=300, check=False)  # fmt: skip
        if not_listening not in done.stdout or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


def table(out: str) -> dict[str, float]:
    """The first row of perftest's final table, by column name (``BW average[MB/sec]``, ...)."""
    lines = out.splitlines()
    start = max(index for index, line in enumerate(lines) if line.lstrip().startswith("#bytes"))
    names = re.findall(r"#?[\w%.]+(?: [\w%.]+)?\[[^\]]+\]|#\w+", lines[start])
    return dict(zip(names, (float(field) for field in lines[start + 1].split())))


if __name__ == "__main__":
    rows, note = perftest_rows(quick="--quick" in sys.argv, port=20000 + os.getpid() % 20000)
    print(note or "\n".join(map(str, rows)))
