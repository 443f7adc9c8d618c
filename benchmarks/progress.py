"""Which progress model: 2-byte SEND latency and 64 KiB RDMA WRITE bandwidth between two
processes on loopback, with the engine run inline by the caller (``PYROCE_PROGRESS=inline``)
or only by the engine thread (``thread``). Prints a table; ``--json FILE`` writes the figures.

    python benchmarks/progress.py [--iters N] [--seconds S] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from multiprocessing.connection import Connection

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_mtu, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.wr import SGE, RecvWR, SendWR

MR_SIZE = 1 << 20
WRITE_SIZE = 64 << 10
QUEUE_DEPTH = 16


def _recv(ep: RcEndpoint) -> None:
    ep.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(ep.mr.buf, 64, ep.mr.lkey)]))


def _send(ep: RcEndpoint) -> None:
    ep.qp.post_send(SendWR(wr_id=2, sg=[SGE(ep.mr.buf, 2, ep.mr.lkey)], send_flags=ibv_send_flags.IBV_SEND_SIGNALED))


def _open(conn: Connection) -> tuple[RcEndpoint, PeerInfo]:
    ep = RcEndpoint.open(MR_SIZE, max_wr=64)
    conn.send(tuple(ep.info()))
    peer = PeerInfo(*conn.recv())
    ep.connect(peer, path_mtu=ibv_mtu.IBV_MTU_4096)
    return ep, peer


def server(conn: Connection, mode: str, iters: int) -> None:
    os.environ["PYROCE_PROGRESS"] = mode
    ep, _ = _open(conn)
    for _ in range(2):
        _recv(ep)
    conn.send("ready")
    for _ in range(iters):
        ep.poll(1)  # the ping
        _recv(ep)
        _send(ep)
        ep.poll(1)  # our pong's completion
    conn.recv()  # the client has finished the bandwidth run
    ep.close()


def _check(wcs: list, mode: str) -> list:
    """The completions, or an error naming the failed one (status and reason)."""
    for wc in wcs:
        if wc.status != 0:
            raise SystemExit(f"progress.py ({mode}): a work request failed: {wc}")
    return wcs


def client(mode: str, iters: int, seconds: float) -> dict[str, float]:
    os.environ["PYROCE_PROGRESS"] = mode
    spawn = multiprocessing.get_context("spawn")
    conn, child = spawn.Pipe()
    peer = spawn.Process(target=server, args=(child, mode, iters), daemon=True)
    peer.start()
    ep, remote = _open(conn)
    conn.recv()
    _recv(ep)
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        _send(ep)
        wcs = ep.poll(2)  # our send's completion and the pong
        samples.append((time.perf_counter() - start) / 2)
        _check(wcs, mode)
        _recv(ep)
    sent = 0
    start = time.perf_counter()
    outstanding = 0
    while time.perf_counter() - start < seconds:
        while outstanding < QUEUE_DEPTH:
            wr = SendWR(wr_id=3, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, WRITE_SIZE, ep.mr.lkey)])
            wr.set_wr_rdma(remote.rkey, remote.addr)
            ep.qp.post_send(wr)
            outstanding += 1
        for wc in _check(ep.poll(1), mode):
            outstanding -= 1
            sent += WRITE_SIZE
    elapsed = time.perf_counter() - start
    ep.poll(outstanding)
    conn.send("done")
    peer.join(10)
    ep.close()
    samples.sort()
    return {
        "lat_us_p50": statistics.median(samples) * 1e6,
        "lat_us_p99": samples[int(len(samples) * 0.99)] * 1e6,
        "write_64k_MBps": sent / elapsed / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--modes", default="inline,thread", help="comma-separated progress modes (default: both)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    results = {mode: client(mode, args.iters, args.seconds) for mode in args.modes.split(",")}
    base = results.get("inline")
    print(
        f"{'progress':<10}{'SEND 2 B half-RTT p50 us':>26}{'p99 us':>10}{'x inline p50':>14}{'WRITE 64 KiB MB/s':>20}"
    )
    for mode, figures in results.items():
        if base is not None:
            figures["p50_vs_inline"] = figures["lat_us_p50"] / base["lat_us_p50"]
        ratio = f"{figures['p50_vs_inline']:.2f}" if base is not None else "-"
        print(f"{mode:<10}{figures['lat_us_p50']:>26.1f}{figures['lat_us_p99']:>10.1f}{ratio:>14}"
              f"{figures['write_64k_MBps']:>20.1f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
