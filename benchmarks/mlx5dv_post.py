"""Posting by hand through mlx5dv against ibv_post_send, on a shared NIC of this run's own
(``pyroce nicd`` on a private loopback address, stopped after), and what a direct QP costs an
idle NIC: ``benchmarks/mlx5dv_post.c`` (2-byte RDMA WRITEs between two QPs of the NIC) run under
``pyroce run`` for each mode, for each engine sleep bound asked (``host.progress.DIRECT_POLL_S``
after a pass that found work, backing off to ``DIRECT_IDLE_S``: MIN:MAX in microseconds).

    python benchmarks/mlx5dv_post.py [--seconds 2] [--periods 50:50,1000:1000,50:1000]

``mlx5dv_rows`` gives ``run.py`` the same program's rows at the NIC's default sleep bounds: the
lone WRITE's latency and the rate, posted by hand and through ``ibv_post_send``, side by side.

Rows: the lone WRITE's latency (posted after 1 ms of quiet, its CQE awaited; p50 and p99), the
message rate with 16 outstanding, and the NIC's CPU (user + system, % of one core) while the
program sleeps with a direct QP open, against a plain QP's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perftest_rows import rows_on_a_shared_nic

from pyroce.driver.build import library_dir
from pyroce.driver.environment import driver_environment

ROOT = Path(__file__).resolve().parent.parent
NICD = ("import sys; import pyroce.host.progress as p; p.DIRECT_POLL_S, p.DIRECT_IDLE_S = (int(us) / 1e6 for us in "
        "sys.argv[1].split(':')); from pyroce.cli import main; main(['nicd', '--idle', '0'])")


def cpu_s(pid: int) -> float:
    """User and system time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_period(program: Path, period: str, seconds: float, folder: Path) -> dict[str, str]:
    address = f"127.201.{os.getpid() >> 8 & 0xFF}.{os.getpid() & 0xFF or 1}"
    env = dict(os.environ, PYROCE_ADDR=address, PYROCE_STATS_DIR=str(folder))
    nicd = subprocess.Popen([sys.executable, "-c", NICD, period], env=env, stdin=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    row: dict[str, str] = {}
    try:
        time.sleep(1.5)  # serving
        driver = driver_environment(library_dir(), env)
        for mode in ("idle-verbs", "idle-direct"):
            with subprocess.Popen([str(program), mode, str(seconds)], env=driver, stdout=subprocess.PIPE, text=True) as idle:
                assert idle.stdout is not None and idle.stdout.readline().strip() == "ready"
                time.sleep(0.3)
                before, start = cpu_s(nicd.pid), time.monotonic()
                time.sleep(seconds - 0.6)
                row[mode] = f"{100 * (cpu_s(nicd.pid) - before) / (time.monotonic() - start):.0f}%"
        for mode in ("verbs", "direct"):
            figures = measure(program, mode, seconds, driver)
            row[mode] = f"{figures['lone_p50_us']:.0f}/{figures['lone_p99_us']:.0f} us, {figures['rate_msgs_s']:,.0f} msgs/s"
    finally:
        nicd.terminate()
        nicd.wait(10)
    return row


def build(folder: Path) -> Path:
    """The benchmark program, compiled in ``folder`` against the system's mlx5dv.h."""
    program = folder / "mlx5dv_post"
    subprocess.run(["cc", "-O2", "-Wall", "-I", str(ROOT / "tests" / "c"), "-o", str(program),
                    str(ROOT / "benchmarks" / "mlx5dv_post.c"), "-lmlx5", "-libverbs"], check=True)  # fmt: skip
    return program


def measure(program: Path, mode: str, seconds: float, env: dict[str, str]) -> dict[str, float]:
    """The program's figures in ``mode`` (verbs, direct): lone_p50_us, lone_p99_us, rate_msgs_s."""
    done = subprocess.run([str(program), mode, str(seconds)], env=env, capture_output=True, text=True, timeout=120,
                          check=True)  # fmt: skip
    words = done.stdout.split()
    return {name: float(value) for name, value in zip(words[::2], words[1::2])}


def mlx5dv_rows(quick: bool, port: int) -> tuple[list[dict[str, object]], str | None]:
    """``run.py``'s rows: a 2-byte WRITE's latency (lone) and rate (16 outstanding), posted by hand
    through mlx5dv (series ``mlx5dv``) and through ``ibv_post_send`` (``c-verbs``), one program on
    a shared NIC of the run's own; or none and why (no compiler, no mlx5dv.h). ``port`` unused:
    the program connects its own two QPs."""

    def rows(env: dict[str, str]) -> list[dict[str, object]]:
        with tempfile.TemporaryDirectory() as work:
            program = build(Path(work))
            result: list[dict[str, object]] = []
            for mode, series in (("verbs", "c-verbs"), ("direct", "mlx5dv")):
                figures = measure(program, mode, 0.5 if quick else 2.0, env)
                common = {"op": "write", "series": series, "size": 2, "qps": 1}
                result.append({**common, "metric": "lat", "lat_us_p50": figures["lone_p50_us"],
                               "lat_us_p99": figures["lone_p99_us"]})  # fmt: skip
                result.append({**common, "metric": "rate", "msgs_per_s": figures["rate_msgs_s"]})
            return result

    try:
        return rows_on_a_shared_nic(("cc",), "gcc", rows)
    except subprocess.CalledProcessError as exc:
        return [], f"mlx5dv rows skipped: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--periods", default="50:50,1000:1000,50:1000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        program = build(Path(work))
        print("| sleep bound, found work : idle (us) | ibv_post_send: lone WRITE p50/p99, rate | mlx5dv by hand: lone WRITE p50/p99, rate "
              "| idle NIC CPU, plain QP | with a direct QP |")
        print("|---|---|---|---|---|")
        for period in args.periods.split(","):
            row = run_period(program, period, args.seconds, Path(work))
            print(f"| {period} | {row['verbs']} | {row['direct']} | {row['idle-verbs']} "
                  f"| {row['idle-direct']} |", flush=True)


if __name__ == "__main__":
    main()
