"""pyroce's benchmark: the ceilings of this machine and pyroce between two processes, in one run.

    python benchmarks/run.py [--quick] [--json FILE]

First the ceilings (``udp_ceiling.py``: plain Python UDP latency and bandwidth, and the bare
Python RoCEv2 pipeline, the best of three runs), then pyroce over real RoCEv2/UDP on loopback between this process
and a server process: RC WRITE/READ/SEND bandwidth, 2-byte message rate, 2-byte latency
(perftest-style: half the round trip for SEND/WRITE, the full one for READ/atomics; as many
READs in flight as the device allows, as ``ib_read_bw`` keeps),
bandwidth against message size, against the number of QPs and with many registered MRs, and
CPU seconds per GB; the same Python verbs with both processes on one shared NIC
(``PYROCE_NIC=shared``: latency, 64 KiB WRITE, message rates); with a compiled build (mypyc),
the same rows in pure Python (``PYROCE_PURE=1`` in both processes); then perftest's ``ib_write_bw`` (64 KiB and 2-byte messages) and
``ib_send_lat`` (2 bytes) through pyroce's C driver, both programs on one shared NIC
(``perftest_rows.py``), and qperf's ``rc_lat`` and ``rc_bw`` over rdma_cm the same way
(``qperf_rows.py``), and ucx_perftest's ``tag_lat``, ``tag_bw`` and ``ucp_put_bw`` over
pyroce0's rc_verbs the same way (``ucx_rows.py``), and a C program's 2-byte WRITEs posted by hand
through mlx5 direct verbs beside the same program's ``ibv_post_send`` (``mlx5dv_post.py``); each skipped with a note where its program, a C
compiler or libibverbs-dev is missing. Each figure is printed beside its ceiling as a ratio;
last, the Python calls a 2-byte SEND costs on each hop (``calls_per_msg.py``, counted).
Every run checks the bytes it moved at the end (exit 1 if any differ). ``--quick`` finishes in
under a minute.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import udp_ceiling
from calls_per_msg import calls_per_msg
from mlx5dv_post import mlx5dv_rows
from perftest_rows import perftest_rows
from qperf_rows import qperf_rows
from ucx_rows import ucx_rows

import pyroce
from pyroce.apps.rc_endpoint import ALL_ACCESS, PeerInfo, RcEndpoint
from pyroce.nicd.client import ask
from pyroce.nicd.place import nic_place
from pyroce.verbs.enums import ibv_mtu, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.mr import MR
from pyroce.verbs.qp import QP, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

REGION = 16 << 20  # each side's memory region; messages wrap around inside it
DEPTH = 128  # work requests in flight per QP for bandwidth and rate: perftest's default tx depth
POST_LIST = 32  # WRs a post of the rate/list row chains, its last alone signaled
EXTRA_QP_DEPTH = 16  # send queue depth of the QPs of the many-QP runs
TOTAL_IN_FLIGHT = 256  # across all QPs: what the CQ (4 x 256 entries) can always hold
WR_SLOTS = 2 * TOTAL_IN_FLIGHT  # WRs a bandwidth row posts again in turn, each at an offset of its own
# The bandwidth ceiling is the best of this many runs: one run of it on a 2-vCPU VM moved
# 1 068-1 891 MB/s within minutes, and a ceiling that came out low made every ratio look better
CEILING_RUNS = 3
SEND_PROBE = 64  # SENDs of a SEND row's first timing run, which sets how many the row sends
WR = ibv_wr_opcode


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


# --- the server process ---------------------------------------------------------------


class Server:
    """The passive side: WRITE/READ target, SEND receiver, latency reflector."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ep = RcEndpoint.open(REGION, max_wr=256)
        self.extra: list[QP] = []
        self.mrs: list[MR] = []
        self.ep.mr.write(os.urandom(REGION), REGION)

    def run(self) -> None:
        while True:
            request, *args = self.conn.recv()
            if request == "quit":
                self.ep.close()
                return
            self.conn.send(getattr(self, request)(*args))

    def info(self) -> tuple[Any, ...]:
        return tuple(self.ep.info())

    def connect(self, peer: tuple[Any, ...], mtu: int) -> None:
        self.ep.connect(PeerInfo(*peer), path_mtu=mtu, rd_atomic=outstanding_reads(self.ep))

    def more_qps(self, peers: list[tuple[Any, ...]], mtu: int) -> list[int]:
        """QPs beyond the first, connected to the client's (same CQ, PD and MR)."""
        ep = self.ep
        qpns = []
        for peer in peers:
            qp = QP(
                ep.pd, QPInitAttr(qp_type=2, scq=ep.cq, rcq=ep.cq, cap=QPCap(max_send_wr=EXTRA_QP_DEPTH, max_recv_wr=4))
            )
            attr_ep = RcEndpoint(ep.ctx, ep.pd, ep.cq, qp, ep.mr, ep.psn)
            attr_ep.connect(PeerInfo(*peer), path_mtu=mtu, rd_atomic=outstanding_reads(ep))
            self.extra.append(qp)
            qpns.append(qp.qp_num)
        return qpns

    def drop_qps(self) -> None:
        for qp in self.extra:
            qp.close()
        self.extra.clear()

    def register_mrs(self, count: int) -> int:
        """``count`` more MRs (64 bytes each, in one buffer), to show they cost nothing per packet."""
        memory = bytearray(64 * count)
        view = memoryview(memory)
        self.mrs = [MR(self.ep.pd, 64, ALL_ACCESS, address=view[64 * i : 64 * (i + 1)]) for i in range(count)]
        return len(self.ep.ctx.device.mrs)

    def drop_mrs(self) -> None:
        for mr in self.mrs:
            mr.close()
        self.mrs.clear()

    def region_digest(self, offset: int, length: int) -> str:
        return digest(self.ep.mr.read(length, offset))

    def receive(self, count: int, size: int) -> tuple[int, str]:
        """Take ``count`` SENDs of ``size`` bytes, keeping the receive queue full; returns how many
        arrived intact and the digest of the last one."""
        ep = self.ep
        receive = RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, size, ep.mr.lkey)])  # posted again and again, as perftest's
        posted = done = 0
        while posted < min(count, 200):
            ep.qp.post_recv(receive)
            posted += 1
        self.conn.send("ready")
        good = 0
        deadline = time.monotonic() + 60
        while done < count:
            _, wcs = ep.cq.poll(16)  # perftest's CTX_POLL_BATCH
            if not wcs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{done} of {count} SENDs after 60 s without one")
                continue
            deadline = time.monotonic() + 60
            for wc in wcs:
                done += 1
                good += wc.status == 0 and wc.byte_len == size
                if posted < count:
                    ep.qp.post_recv(receive)
                    posted += 1
        return good, digest(ep.mr.read(size, 0))

    def reflect(self, op: str, iters: int) -> None:
        """Latency partner: answer each 2-byte SEND with a SEND, or each WRITE with a WRITE
        (each WR built once and posted again, as perftest's latency tests post theirs)."""
        ep = self.ep
        peer = self.peer
        receive = RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, 64, ep.mr.lkey)])
        answer = SendWR(wr_id=1, sg=[SGE(ep.mr.buf + 64, 2, ep.mr.lkey)])
        write_back = SendWR(wr_id=1, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, 2, ep.mr.lkey)])
        write_back.set_wr_rdma(peer.rkey, peer.addr)
        if op == "send":
            for _ in range(2):
                ep.qp.post_recv(receive)
        self.conn.send("ready")
        outstanding = 0  # our WRITEs not yet completed
        for index in range(iters):
            if op == "send":
                ep.poll(1, 60)
                ep.qp.post_recv(receive)
                ep.qp.post_send(answer)
                ep.poll(1, 60)
            else:
                expected = (index & 0xFFFF).to_bytes(2, "little")
                while ep.mr.read(2, 0) != expected:
                    outstanding -= ep.cq.poll()[0]  # drives the engine; reaps our earlier WRITEs
                ep.qp.post_send(write_back)
                outstanding += 1
        if outstanding:
            ep.poll(outstanding, 60)

    def set_peer(self, peer: tuple[Any, ...]) -> None:
        self.peer = PeerInfo(*peer)

    def cpu(self) -> float:
        times = os.times()
        return times.user + times.system


def serve(conn: Connection) -> None:
    Server(conn).run()


# --- the client -----------------------------------------------------------------------


class Client:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        spawn = multiprocessing.get_context("spawn")
        self.conn, child = spawn.Pipe()
        self.server = spawn.Process(target=serve, args=(child,), daemon=True)
        self.server.start()
        self.ep = RcEndpoint.open(REGION, max_wr=256)
        self.ep.mr.write(os.urandom(REGION), REGION)
        self.mtu = ibv_mtu(int(self.ep.ctx.active_mtu))
        self.peer = PeerInfo(*self.ask("info"))
        self.ask("connect", tuple(self.ep.info()), self.mtu)
        self.ep.connect(self.peer, path_mtu=self.mtu, rd_atomic=outstanding_reads(self.ep))
        self.ask("set_peer", tuple(self.ep.info()))
        self.errors: list[str] = []

    def ask(self, *request: Any) -> Any:
        self.conn.send(request)
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send(("quit",))
        self.server.join(30)
        self.ep.close()

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.errors.append(what)

    def stream(self, op: int, size: int, seconds: float, qps: list[QP] | None = None,
               post_list: int = 1) -> tuple[int, float]:  # fmt: skip
        """Keep DEPTH requests of ``size`` bytes in flight (over ``qps``) for ``seconds``, posted
        ``post_list`` at a time as one chained list whose last alone is signaled (perftest's
        ``--post_list`` with ``--cq-mod`` the same); returns the messages completed and the time
        taken. As perftest posts its own, the WRs are built once and posted again: a WR alone
        for each of ``wr_slots`` offsets, the next offset for each message, on whichever QP is
        ready; a list once per QP (``_verify`` knows where the last message went)."""
        ep = self.ep
        qps = qps or [ep.qp]
        depth = DEPTH if len(qps) == 1 else max(1, min(EXTRA_QP_DEPTH, TOTAL_IN_FLIGHT // len(qps)))
        by_qpn = {qp.qp_num: qp for qp in qps}
        # one entry per free slot for a list, round robin
        ready = deque(qp for _ in range(max(1, depth // post_list)) for qp in qps)
        singles: list[SendWR] = []
        lists: dict[int, SendWR] = {}
        slots = wr_slots(size)
        posted = done = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            if time.perf_counter() < deadline:
                while ready and posted - done < TOTAL_IN_FLIGHT:
                    qp = ready.popleft()
                    if post_list == 1:
                        if len(singles) < slots:
                            singles.append(self._work_requests(op, size, posted, 1))
                        qp.post_send(singles[posted % slots])
                    else:
                        if qp.qp_num not in lists:
                            lists[qp.qp_num] = self._work_requests(op, size, 0, post_list)
                        qp.post_send(lists[qp.qp_num])
                    posted += post_list
            elif done == posted:
                break
            _, wcs = ep.cq.poll(16)
            for wc in wcs:
                if wc.status:
                    raise RuntimeError(f"work completion failed: {wc.reason or wc.status}")
                ready.append(by_qpn[wc.qp_num])
                done += post_list
        return done, time.perf_counter() - start

    def _work_requests(self, op: int, size: int, first: int, count: int) -> SendWR:
        """A chain of ``count`` WRs of ``size`` bytes for the messages from ``first`` on (each at
        its own offset in both regions), its last alone signaled."""
        ep = self.ep
        slots = wr_slots(size)
        wr = None
        for index in reversed(range(count)):  # the list built from its signaled end
            offset = ((first + index) % slots) * size
            wr = SendWR(wr_id=first + index, opcode=op, sg=[SGE(ep.mr.buf + offset, size, ep.mr.lkey)],
                        send_flags=ibv_send_flags.IBV_SEND_SIGNALED if index == count - 1 else 0, next_wr=wr)  # fmt: skip
            if op != WR.IBV_WR_SEND:
                wr.set_wr_rdma(self.peer.rkey, self.peer.addr + offset)
        assert wr is not None
        return wr

    def bandwidth(self, name: str, size: int, seconds: float, qps: list[QP] | None = None,
                  post_list: int = 1) -> dict[str, Any]:  # fmt: skip
        op = {"write": WR.IBV_WR_RDMA_WRITE, "read": WR.IBV_WR_RDMA_READ, "send": WR.IBV_WR_SEND}[name]
        count = self._sends_lasting(size, seconds) if name == "send" else 0
        cpu0, server_cpu0 = _cpu(), self.ask("cpu")
        if name == "send":
            messages, elapsed = count, self._send_row(count, size)
        else:
            messages, elapsed = self.stream(op, size, seconds, qps, post_list)
            self._verify(name, size, post_list if post_list > 1 else messages)
        cpu = _cpu() - cpu0 + self.ask("cpu") - server_cpu0
        moved = messages * size
        return {
            "op": name,
            "metric": "bw",
            "size": size,
            "qps": len(qps or [1]),
            "MBps": moved / elapsed / 1e6,
            "msgs_per_s": messages / elapsed,
            "cpu_s_per_GB": cpu / max(moved, 1) * 1e9,
        }

    def _sends_lasting(self, size: int, seconds: float) -> int:
        """How many SENDs of ``size`` bytes take about ``seconds``, so a SEND row runs as long as
        the WRITE and READ rows beside it (the receiver must know the count before the first):
        rows of SEND_PROBE, then four times as many, until one lasts a tenth of ``seconds``."""
        count = SEND_PROBE
        while True:
            elapsed = self._send_row(count, size)
            if elapsed >= seconds / 10:
                return max(count, int(count * seconds / elapsed))
            count *= 4

    def _send_row(self, count: int, size: int) -> float:
        """``count`` SENDs of ``size`` bytes, each checked to have arrived whole; the time taken
        until the receiver has the last."""
        self.conn.send(("receive", count, size))
        assert self.conn.recv() == "ready"
        start = time.perf_counter()
        last_offset = self._send_count(count, size)
        good, last = self.conn.recv()
        elapsed = time.perf_counter() - start
        self.check(
            good == count and last == digest(self.ep.mr.read(size, last_offset)),
            f"SEND {size} B: {good}/{count} arrived intact",
        )
        return elapsed

    def _send_count(self, count: int, size: int) -> int:
        """Send ``count`` messages of ``size`` bytes, DEPTH in flight, each at the next of
        ``wr_slots`` offsets (WRs built once per offset and posted again, as ``stream``'s);
        returns the offset of the last."""
        ep = self.ep
        slots = wr_slots(size)
        wrs = [self._work_requests(WR.IBV_WR_SEND, size, slot, 1) for slot in range(slots)]
        posted = done = 0
        while done < count:
            while posted < count and posted - done < DEPTH:
                ep.qp.post_send(wrs[posted % slots])
                posted += 1
            for wc in ep.cq.poll(16)[1]:
                if wc.status:
                    raise RuntimeError(f"SEND failed: {wc.reason or wc.status}")
                done += 1
        return ((count - 1) % slots) * size

    def _verify(self, name: str, size: int, messages: int) -> None:
        """The bytes of the last of ``messages`` moved (from the region's start) must be the
        source's."""
        if not messages or not size:
            return
        offset = ((messages - 1) % wr_slots(size)) * size
        mine = digest(self.ep.mr.read(size, offset))
        theirs = self.ask("region_digest", offset, size)
        self.check(mine == theirs, f"{name.upper()} {size} B: the bytes at offset {offset} differ")

    def latency(self, name: str, iters: int) -> dict[str, Any]:
        ep = self.ep
        samples = []
        if name in ("send", "write"):
            self.conn.send(("reflect", name, iters))
            assert self.conn.recv() == "ready"
            # each WR built once and posted again, as perftest's latency tests post theirs
            receive = RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, 64, ep.mr.lkey)])
            send = SendWR(wr_id=1, sg=[SGE(ep.mr.buf + 64, 2, ep.mr.lkey)])
            write = SendWR(wr_id=1, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf + 128, 2, ep.mr.lkey)])
            write.set_wr_rdma(self.peer.rkey, self.peer.addr)
            if name == "send":
                ep.qp.post_recv(receive)
            for index in range(iters):
                start = time.perf_counter()
                if name == "send":
                    ep.qp.post_send(send)
                    ep.poll(2, 60)  # our SEND's completion and the answer
                    ep.qp.post_recv(receive)
                else:
                    ep.mr.write((index & 0xFFFF).to_bytes(2, "little"), 2, 128)
                    ep.qp.post_send(write)
                    expected = (index & 0xFFFF).to_bytes(2, "little")
                    completed = 0
                    while ep.mr.read(2, 0) != expected:  # the server writes the value back
                        completed += ep.cq.poll()[0]
                    if not completed:
                        ep.poll(1, 60)  # our WRITE's completion
                samples.append((time.perf_counter() - start) / 2)
            self.conn.recv()
        else:
            for _ in range(iters):
                wr = SendWR(wr_id=1, sg=[SGE(ep.mr.buf + 256, 8 if name == "atomic" else 2, ep.mr.lkey)])
                if name == "read":
                    wr.opcode = WR.IBV_WR_RDMA_READ
                    wr.set_wr_rdma(self.peer.rkey, self.peer.addr + 4096)
                else:
                    wr.opcode = WR.IBV_WR_ATOMIC_FETCH_AND_ADD
                    wr.set_wr_atomic(self.peer.rkey, self.peer.addr + 8192, 1)
                start = time.perf_counter()
                ep.qp.post_send(wr)
                ep.poll(1, 60)
                samples.append(time.perf_counter() - start)
        samples.sort()
        return {
            "op": name,
            "metric": "lat",
            "size": 8 if name == "atomic" else 2,
            "qps": 1,
            "lat_us_p50": statistics.median(samples) * 1e6,
            "lat_us_p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6,
        }

    def extra_qps(self, count: int) -> list[QP]:
        ep = self.ep
        qps = []
        for _ in range(count - 1):
            qps.append(
                QP(
                    ep.pd,
                    QPInitAttr(qp_type=2, scq=ep.cq, rcq=ep.cq, cap=QPCap(max_send_wr=EXTRA_QP_DEPTH, max_recv_wr=4)),
                )
            )
        infos = [(ep.ctx.query_gid(1, 0).raw, qp.qp_num, ep.psn, ep.mr.rkey, ep.mr.buf) for qp in qps]
        remote = self.ask("more_qps", infos, self.mtu)
        for qp, qpn in zip(qps, remote):
            RcEndpoint(ep.ctx, ep.pd, ep.cq, qp, ep.mr, ep.psn).connect(self.peer._replace(qpn=qpn), path_mtu=self.mtu,
                                                                        rd_atomic=outstanding_reads(ep))  # fmt: skip
        return [ep.qp, *qps]


def wr_slots(size: int) -> int:
    """The offsets a bandwidth row's messages of ``size`` bytes go to in turn, each with a WR of
    its own: as many as the region holds, at most WR_SLOTS (2-byte rows reuse 512 WRs)."""
    return max(1, min(WR_SLOTS, REGION // max(size, 1)))


def outstanding_reads(ep: RcEndpoint) -> int:
    """READs (and atomics) a QP keeps in flight: the device's most, as perftest's ``ib_read_bw``
    takes when ``--outs`` is not given (``ctx_set_out_reads``: ``max_qp_rd_atom``)."""
    return int(ep.ctx.query_device().max_qp_rd_atom)


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def ratio(row: dict[str, Any], ceiling: dict[str, float]) -> float:
    if row["metric"] == "lat":
        return row["lat_us_p50"] / ceiling["lat_us"]
    if row["metric"] == "rate":
        return row["msgs_per_s"] / 500_000  # the target rate
    return row["MBps"] / ceiling["roce_pipe_MBps"]


def run_seconds(quick: bool) -> float:
    """How long each bandwidth or rate row runs."""
    return 0.5 if quick else 2.0


def run(quick: bool) -> dict[str, Any]:
    seconds = run_seconds(quick)
    ceiling = {
        "lat_us": round(udp_ceiling.latency(2000 if quick else 20000), 2),
        "bw_plain_MBps": round(udp_ceiling.throughput(seconds, gso=False), 1),
        "bw_gso_MBps": round(udp_ceiling.throughput(seconds, gso=True), 1),
        "roce_pipe_MBps": round(max(udp_ceiling.roce_pipe(seconds) for _ in range(CEILING_RUNS)), 1),
        "crc": udp_ceiling.CRC_NAME,
    }
    client = Client(quick)
    results: list[dict[str, Any]] = []
    try:
        sizes = (4096, 65536, 1 << 20)
        for name in ("write", "read", "send"):
            for size in sizes if not quick else (65536,):
                results.append(client.bandwidth(name, size, seconds))
        for name in ("write", "send"):
            row = client.bandwidth(name, 2, seconds)
            row["metric"] = "rate"  # 2-byte messages: what counts is messages per second
            results.append(row)
        row = client.bandwidth("write", 2, seconds, post_list=POST_LIST)
        row.update(metric="rate", series="list", post_list=POST_LIST)
        results.append(row)
        for name in ("send", "write", "read", "atomic"):
            results.append(client.latency(name, 200 if quick else 2000))
        sweep = (2, 4096, 1 << 20) if quick else tuple(1 << k for k in range(1, 24))
        for size in sweep:
            row = client.bandwidth("write", size, seconds / 4 if not quick else seconds / 2)
            row["series"] = "size"
            results.append(row)
        for count in (1, 10, 100) if quick else (1, 10, 100, 1000, 10000):
            qps = client.extra_qps(count) if count > 1 else None
            row = client.bandwidth("write", 65536, seconds, qps)
            row["series"] = "qps"
            results.append(row)
            if qps:
                for qp in qps[1:]:
                    qp.close()
                client.ask("drop_qps")
        mrs = 10_000 if quick else 1_000_000
        registered = client.ask("register_mrs", mrs)
        row = client.bandwidth("write", 65536, seconds)
        row["series"] = "mrs"
        row["mrs"] = registered
        results.append(row)
        client.ask("drop_mrs")
    finally:
        errors = client.errors
        client.close()
    shared, shared_errors = shared_nic_rows(quick, seconds)
    results.extend(shared)
    errors += shared_errors
    pure, pure_errors = pure_rows(quick, seconds)
    results.extend(pure)
    errors += pure_errors
    port = 20000 + os.getpid() % 20000  # the Python server is gone
    notes = []
    for rows_of, offset in ((perftest_rows, 0), (qperf_rows, 5), (ucx_rows, 6), (mlx5dv_rows, 7)):
        rows, note = rows_of(quick, port=port + offset)
        results.extend(rows)
        notes += [note] if note else []
    for row in results:
        row["ratio"] = ratio(row, ceiling)
    calls = calls_per_msg(50 if quick else 200)  # counted, not timed: the same on every run
    return {"ceiling": ceiling, "results": results, "errors": errors, "notes": notes, "quick": quick,
            "calls_per_msg": calls, "build": ("compiled: " if pyroce.COMPILED else "pure: ") + pyroce.BUILD}  # fmt: skip


def headline_rows(quick: bool, seconds: float) -> tuple[list[dict[str, Any]], list[str]]:
    """2-byte SEND and WRITE latency, 64 KiB WRITE bandwidth and 2-byte WRITE and SEND rates, on
    a server of their own: the rows run again another way (a shared NIC, pure Python)."""
    rows: list[dict[str, Any]] = []
    client = Client(quick)
    try:
        for name in ("send", "write"):
            rows.append(client.latency(name, 200 if quick else 2000))
        rows.append(client.bandwidth("write", 65536, seconds))
        for name in ("write", "send"):
            row = client.bandwidth(name, 2, seconds)
            row["metric"] = "rate"
            rows.append(row)
    finally:
        client.close()
    return rows, client.errors


def pure_rows(quick: bool, seconds: float) -> tuple[list[dict[str, Any]], list[str]]:
    """The headline rows in pure Python (``PYROCE_PURE=1``: a child and its server run every
    module's .py), beside this run's rows of the compiled build; none when this run is pure."""
    if not pyroce.COMPILED:
        return [], []
    with tempfile.TemporaryDirectory() as folder:
        figures = Path(folder) / "pure.json"
        command = [sys.executable, __file__, "--pure-rows", str(figures), *(["--quick"] if quick else [])]
        subprocess.run(command, env={**os.environ, "PYROCE_PURE": "1"}, check=True, timeout=600)
        document = json.loads(figures.read_text())
    for row in document["rows"]:
        row["series"] = "pure"
    return document["rows"], document["errors"]


def shared_nic_rows(quick: bool, seconds: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Latency, 64 KiB WRITE and message rate with both processes' Python verbs on one shared
    NIC (``PYROCE_NIC=shared``, a ``pyroce nicd`` of this run's own address, stopped after),
    to set beside the rows above, where each process has a NIC of its own."""
    saved = {name: os.environ.get(name) for name in ("PYROCE_NIC", "PYROCE_ADDR")}
    os.environ["PYROCE_NIC"] = "shared"
    os.environ["PYROCE_ADDR"] = f"127.204.{os.getpid() >> 8 & 0xFF}.{os.getpid() & 0xFF or 1}"
    try:
        rows, errors = headline_rows(quick, seconds)
        ask(nic_place(), "stop")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    for row in rows:
        row["series"] = "shared"
    return rows, errors


def print_table(report: dict[str, Any]) -> None:
    ceiling = report["ceiling"]
    print("ceilings: " + ", ".join(f"{k} {v}" for k, v in ceiling.items()))
    print(f"build: {report['build']}")
    print(
        f"{'metric':<18}{'op':<8}{'size':>9}{'qps':>6}{'MB/s':>10}{'msgs/s':>11}{'p50 us':>9}{'p99 us':>9}"
        f"{'CPU s/GB':>10}{'ratio':>8}"
    )
    for row in report["results"]:
        label = row["metric"] + (f"/{row['series']}" if "series" in row else "")
        print(
            f"{label:<18}{row['op']:<8}{row['size']:>9}{row['qps']:>6}{row.get('MBps', 0):>10.1f}"
            f"{row.get('msgs_per_s', 0):>11.0f}{row.get('lat_us_p50', 0):>9.1f}{row.get('lat_us_p99', 0):>9.1f}"
            f"{row.get('cpu_s_per_GB', 0):>10.2f}{row['ratio']:>8.3f}"
        )
    print("ratio: bandwidth / roce_pipe_MBps, latency p50 / lat_us, rate / 500 000 msgs/s")
    print("/perftest rows: perftest's own figures (latency: t_typical and 99%), through pyroce run, both programs on "
          "one shared NIC (/perftest-own: ib_write_bw with each program on a shared NIC of its own address, two engines as the Python rows have); /qperf rows: qperf's own (rc_lat: its mean, in the p50 column; rc_bw: SEND), the same "
          "way, over rdma_cm; /ucx rows: ucx_perftest's own (tag_lat: its median; tag_bw, put_bw: its overall average), "
          "the same way, over rc_verbs; /mlx5dv rows: a C program's 2-byte WRITEs posted by hand through mlx5 direct verbs "
          "(latency: a lone WRITE's), /c-verbs rows the same program through ibv_post_send, on a shared NIC; /shared rows: pyroce's Python verbs, both processes on one shared NIC (PYROCE_NIC=shared); "
          "/pure rows (a compiled build only): the same Python verbs with PYROCE_PURE=1, every module run from its .py; "
          f"rate/list: 2-byte WRITEs posted {POST_LIST} to a chained list, its last alone signaled, the list built "
          "once and posted again (as perftest's --post_list); "
          "the other rows: pyroce's Python verbs, each process with a NIC of its own")  # fmt: skip
    calls = report["calls_per_msg"]
    print(f"calls per 2-byte SEND (calls_per_msg.py): send {calls['send']:.0f}, receive {calls['receive']:.0f}, "
          f"ack {calls['ack']:.0f}; requester {calls['send'] + calls['ack']:.0f}, responder {calls['receive']:.0f} "
          "(goal: 40 per side)")  # fmt: skip
    for note in report["notes"]:
        print(note)
    errors = report["errors"]
    print(f"verified: {'all bytes moved matched' if not errors else '; '.join(errors)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--pure-rows", metavar="FILE", help=argparse.SUPPRESS)  # pure_rows' child
    args = parser.parse_args()
    if args.pure_rows:
        rows, errors = headline_rows(args.quick, run_seconds(args.quick))
        Path(args.pure_rows).write_text(json.dumps({"rows": rows, "errors": errors}))
        return 0
    report = run(args.quick)
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
