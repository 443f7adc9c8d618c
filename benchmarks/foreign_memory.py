"""What reaching another process's memory costs the shared NIC: a pull and a push of a
``ForeignMemory`` (``pyroce.nicd.process_memory``: ``preadv``/``pwrite`` of the program's
``/proc/<pid>/mem``, as the NIC calls them) against an in-process copy (a memoryview slice assignment, what the transport does with local memory), at
64 B, 4 KiB, 64 KiB and 1 MiB; and 64 KiB RDMA WRITEs on one pyroce0 (two Contexts, RC, MTU
4096, 16 outstanding) into a foreign MR (a child process's memory) against a local MR.

    python benchmarks/foreign_memory.py [--seconds S] [--rounds N] [--json FILE]

Times are CPU time (this thread's for a copy; this process's, engine thread included, for the
WRITEs): what each costs, not what a shared machine's other load makes it wait. A copy's figure
is the median of ``--rounds`` rounds; the WRITEs run in ``--rounds`` short runs of each kind,
local and foreign alternating (which goes first alternates too), and both the fastest run
(the least disturbed) and the median are given, with the median wall-clock rate.
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from pyroce.apps.rc_endpoint import ALL_ACCESS, RcEndpoint
from pyroce.nicd.process_memory import ForeignMemory
from pyroce.verbs.enums import ibv_mtu, ibv_wr_opcode
from pyroce.verbs.mr import MR
from pyroce.verbs.wr import SGE, SendWR

SIZES = (64, 4096, 64 << 10, 1 << 20)
REGION = 2 << 20
WRITE_SIZE = 64 << 10
QUEUE_DEPTH = 16
CHILD = """
import ctypes, mmap, os, sys
area = mmap.mmap(-1, int(sys.argv[1]))
area[:] = b"\\x5a" * len(area)
print(os.getpid(), ctypes.addressof(ctypes.c_char.from_buffer(area)), flush=True)
sys.stdin.read()
"""


def per_op(action: Callable[[], object], seconds: float, rounds: int) -> float:
    """CPU seconds of this thread per call of ``action``: the median of ``rounds`` rounds of
    about ``seconds / rounds`` each."""
    results = []
    for _ in range(rounds):
        count, batch = 0, 1
        start = time.thread_time()
        while True:
            for _ in range(batch):
                action()
            count += batch
            elapsed = time.thread_time() - start
            if elapsed >= seconds / rounds:
                break
            batch = min(batch * 2, 10000)
        results.append(elapsed / count)
    return statistics.median(results)


def copies(pid: int, remote: int, seconds: float, rounds: int) -> list[dict[str, float]]:
    local = mmap.mmap(-1, REGION)
    source = mmap.mmap(-1, REGION)
    local_view, source_view = memoryview(local), memoryview(source)
    foreign = ForeignMemory(pid, remote, REGION)
    rows = []
    for size in SIZES:

        def in_process(size: int = size) -> None:
            local_view[:size] = source_view[:size]

        row = {
            "bytes": size,
            "copy_us": per_op(in_process, seconds, rounds) * 1e6,
            "pull_us": per_op(lambda size=size: foreign.pull(0, size), seconds, rounds) * 1e6,
            "push_us": per_op(lambda size=size: foreign.push(0, size), seconds, rounds) * 1e6,
        }
        for kind in ("copy", "pull", "push"):
            row[f"{kind}_GBps"] = size / row[f"{kind}_us"] / 1e3
        rows.append(row)
    foreign.close()
    local_view.release()
    source_view.release()
    return rows


def write_rate(a: RcEndpoint, rkey: int, raddr: int, seconds: float) -> tuple[int, float, float]:
    """64 KiB RDMA WRITEs from ``a`` to ``raddr``, ``QUEUE_DEPTH`` outstanding, for ``seconds``:
    how many, the wall seconds and the CPU seconds of this process (the engine thread's too)."""
    wr = SendWR(wr_id=3, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, WRITE_SIZE, a.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    done = outstanding = 0
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        while outstanding < QUEUE_DEPTH:
            a.qp.post_send(wr)
            outstanding += 1
        for wc in a.poll(1):
            if wc.status:
                raise SystemExit(f"foreign_memory.py: a WRITE failed: {wc}")
            outstanding -= 1
            done += 1
    a.poll(outstanding)
    done += outstanding
    return done, time.perf_counter() - start, time.process_time() - cpu


def end_to_end(pid: int, remote: int, seconds: float, rounds: int) -> dict[str, dict[str, float]]:
    """Local and foreign runs alternating, ``rounds`` of each."""
    a, b = RcEndpoint.open(REGION, max_wr=64), RcEndpoint.open(REGION, max_wr=64)
    try:
        a.connect(b.info(), path_mtu=ibv_mtu.IBV_MTU_4096)
        b.connect(a.info(), path_mtu=ibv_mtu.IBV_MTU_4096)
        foreign = MR(b.pd, REGION, ALL_ACCESS, address=ForeignMemory(pid, remote, REGION))
        targets = [("local_mr", b.mr.rkey, b.mr.buf), ("foreign_mr", foreign.rkey, foreign.buf)]
        write_rate(a, b.mr.rkey, b.mr.buf, 0.2)  # warm up
        samples: dict[str, list[tuple[int, float, float]]] = {name: [] for name, _, _ in targets}
        for round_ in range(rounds):
            for name, rkey, raddr in targets[:: 1 if round_ % 2 else -1]:
                samples[name].append(write_rate(a, rkey, raddr, seconds / rounds))
        results = {}
        for name, runs in samples.items():
            cpu = [used / done * 1e6 for done, _, used in runs]
            wall = statistics.median(elapsed / done for done, elapsed, _ in runs)
            results[name] = {"cpu_us_min": min(cpu), "cpu_us_median": statistics.median(cpu),
                             "wall_us_median": wall * 1e6, "writes_per_s": 1 / wall,
                             "MBps": WRITE_SIZE / wall / 1e6}  # fmt: skip
        results["foreign_mr"]["dma_errors"] = b.ctx.device.stats().get("dma_errors", 0)
        foreign.close()
        return results
    finally:
        a.close()
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per end-to-end kind (each copy: a tenth)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(REGION)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        pid, remote = map(int, child.stdout.readline().split())  # type: ignore[union-attr]
        rows = copies(pid, remote, args.seconds / 10, args.rounds)
        rates = end_to_end(pid, remote, args.seconds, args.rounds)
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait()
    print(f"{'bytes':>8}{'copy us':>10}{'pull us':>10}{'push us':>10}{'copy GB/s':>11}{'pull GB/s':>11}"
          f"{'push GB/s':>11}")  # fmt: skip
    for row in rows:
        print(f"{row['bytes']:>8}{row['copy_us']:>10.2f}{row['pull_us']:>10.2f}{row['push_us']:>10.2f}"
              f"{row['copy_GBps']:>11.2f}{row['pull_GBps']:>11.2f}{row['push_GBps']:>11.2f}")  # fmt: skip
    print()
    print(f"{'64 KiB RDMA WRITE into':<24}{'CPU us min':>12}{'CPU us median':>15}{'wall us median':>16}"
          f"{'writes/s':>10}{'MB/s':>8}")  # fmt: skip
    for name, figures in rates.items():
        print(f"{name:<24}{figures['cpu_us_min']:>12.1f}{figures['cpu_us_median']:>15.1f}"
              f"{figures['wall_us_median']:>16.1f}{figures['writes_per_s']:>10.0f}{figures['MBps']:>8.0f}")  # fmt: skip
    local, foreign = rates["local_mr"], rates["foreign_mr"]
    added = {kind: foreign[f"cpu_us_{kind}"] - local[f"cpu_us_{kind}"] for kind in ("min", "median")}
    print(f"a foreign MR adds {added['min']:.0f} us CPU per WRITE (fastest runs), {added['median']:.0f} us (medians)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"copies": rows, "write_64k": rates, "foreign_adds_cpu_us": added}, handle, indent=1)


if __name__ == "__main__":
    main()
