"""The C driver against the Python API: rdma-core's ``ibv_rc_pingpong`` through pyroce's
``libibverbs.so.1`` and ``pyroce rc_pingpong``, both sides on this host, each size run
``--runs`` times; the tools' own figures (usec/iter, Mbit/sec), median and range. ``--json
FILE`` writes every run.

    python benchmarks/rc_pingpong.py [--sizes 1,4096,65536] [--iters 1000] [--runs 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from pyroce.driver.build import library_dir
from pyroce.driver.environment import driver_environment

RATE = re.compile(r"= ([\d.]+) Mbit/sec")
LATENCY = re.compile(r"= ([\d.]+) usec/iter")
PYTHON_TOOL = [sys.executable, "-m", "pyroce", "rc_pingpong"]
# name: (command, PYROCE_PROGRESS); the C driver runs the engine thread only (``thread``), as
# the Python tool's second row does, so that row separates the C data path from the progress model
TOOLS = {"C ibv_rc_pingpong": (["ibv_rc_pingpong", "-d", "pyroce0"], None),
         "Python, inline progress": (PYTHON_TOOL, "inline"),
         "Python, thread progress": (PYTHON_TOOL, "thread")}  # fmt: skip


def one_run(tool: list[str], env: dict[str, str], size: int, iters: int, port: int) -> tuple[float, float]:
    """One server and one client: the client's usec/iter and Mbit/sec."""
    argv = ["-g", "0", "-p", str(port), "-s", str(size), "-n", str(iters)]
    server = subprocess.Popen([*tool, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # the server listens (a probe would be taken for its client)
        out = subprocess.run([*tool, *argv, "127.0.0.1"], env=env, capture_output=True, text=True, timeout=600,
                             check=True).stdout  # fmt: skip
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    latency, rate = LATENCY.search(out), RATE.search(out)
    if latency is None or rate is None:
        raise RuntimeError(f"no figures in {out!r}")
    return float(latency.group(1)), float(rate.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4096,65536")
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if shutil.which("ibv_rc_pingpong") is None:
        sys.exit("rc_pingpong.py: ibv_rc_pingpong not found: install ibverbs-utils")
    env = driver_environment(library_dir(), os.environ)
    for name in ("PYROCE_ADDR", "PYROCE_PROGRESS"):  # each process its own loopback address; modes per row
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (env["PYROCE_PYTHONPATH"], env.get("PYTHONPATH"))))
    port = 20000 + os.getpid() % 20000
    results = []
    print(f"{'tool':<24} {'size':>6}  {'usec/iter: median (range)':<26} Mbit/sec: median (range)")
    for size in (int(text) for text in args.sizes.split(",")):
        for name, (tool, progress) in TOOLS.items():
            runs = []
            for _ in range(args.runs):
                port += 1
                run_env = {**env, "PYROCE_PROGRESS": progress} if progress else env
                runs.append(one_run(tool, run_env, size, args.iters, port))
            latencies, rates = [run[0] for run in runs], [run[1] for run in runs]
            results.append({"tool": name, "size": size, "iters": args.iters, "usec_per_iter": latencies,
                            "mbit_per_s": rates})  # fmt: skip
            latency = f"{statistics.median(latencies):.0f} ({min(latencies):.0f}-{max(latencies):.0f})"
            rate = f"{statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f})"
            print(f"{name:<24} {size:>6}  {latency:<26} {rate}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
