"""``pyroce demo``: two endpoints in two processes move data with RDMA and check every byte.

The client starts a server process (or, with ``--serve``/``--connect``, the two run apart, on
two hosts or network namespaces), and the two exchange their ``PeerInfo`` (GID, QPN, PSN,
R_Key, address) over TCP, as ibv_rc_pingpong does. Each process has its own pyroce0 device
(its own loopback address, or ``PYROCE_ADDR``), so every packet is real RoCEv2 over UDP with
its ICRC. The TCP channel also carries the checks, as JSON lines: the server reports digests
of what it received and of its memory, and the client compares them with what it sent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TextIO

from pyroce.apps.rc_endpoint import PeerInfo, PollTimeout, RcEndpoint
from pyroce.verbs.enums import ibv_mtu, ibv_wc_status_str, ibv_wr_opcode
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.verbs.wr import SGE, RecvWR, SendWR

SIZES = (0, 1, 1000, 4095, 4096, 4097, 65536, 1 << 20, 4 << 20)  # around every path MTU up to 4 MiB
MAX_SIZE = max(SIZES)
MR_SIZE = 2 * MAX_SIZE
ATOMIC_OFFSET = MR_SIZE - 64
ATOMIC_ROUNDS = 64
WORD = struct.Struct("=Q")
DEADLINE_S = 60.0
CONNECT_RETRY_S = 10.0


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def messages_for(size: int) -> int:
    """Messages per size: several of the small ones, fewer as they grow."""
    return max(1, min(16, (8 << 20) // max(size, 1) // 4))


class Channel:
    """JSON lines over a TCP connection: the out-of-band path between the two sides."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(DEADLINE_S)
        self.sock = sock
        self.reader = sock.makefile("r", encoding="utf-8")

    def send(self, *message: Any) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def recv(self) -> list[Any]:
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the other side closed the connection")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def to_wire(info: PeerInfo) -> list[Any]:
    return [info.gid.hex(), info.qpn, info.psn, info.rkey, info.addr]


def from_wire(fields: list[Any]) -> PeerInfo:
    gid, qpn, psn, rkey, addr = fields
    return PeerInfo(bytes.fromhex(gid), qpn, psn, rkey, addr)


def connect(address: tuple[str, int]) -> socket.socket:
    """A TCP connection to the server, retried while it may still be starting (refused)."""
    deadline = time.monotonic() + CONNECT_RETRY_S
    while True:
        try:
            return socket.create_connection(address, DEADLINE_S)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


# --- server ---------------------------------------------------------------------------


def serve(conn: Channel) -> None:
    """The server side: answers the client's requests until it says ``bye``."""
    ep = RcEndpoint.open(MR_SIZE, max_wr=32)
    try:
        conn.send("info", to_wire(ep.info()), os.getpid(), ep.ctx.device.address)
        handlers: dict[str, Callable[..., Any]] = {
            "connect": lambda peer: ep.connect(from_wire(peer), path_mtu=int(ep.ctx.active_mtu)),
            "post_recv": lambda size: ep.qp.post_recv(RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, size, ep.mr.lkey)])),
            "wait_recv": lambda: _received(ep),
            "digest": lambda offset, length: digest(ep.mr.read(length, offset)),
            "fill": lambda offset, length: _fill(ep, offset, length),
            "set_word": lambda offset, value: ep.mr.write(WORD.pack(value), 8, offset),
            "get_word": lambda offset: WORD.unpack(ep.mr.read(8, offset))[0],
            "stats": lambda: ep.ctx.device.stats(),
        }
        while True:
            request, *args = conn.recv()
            if request == "bye":
                return
            try:
                result = handlers[request](*args)
                conn.send("ok", result)
            except (PyverbsError, PollTimeout) as exc:
                conn.send("error", str(exc))
    finally:
        ep.close()


def _received(ep: RcEndpoint) -> tuple[int, str, int]:
    (wc,) = ep.poll(1, DEADLINE_S)
    return wc.status, digest(ep.mr.read(wc.byte_len, 0)), wc.byte_len


def _fill(ep: RcEndpoint, offset: int, length: int) -> str:
    data = os.urandom(length)
    ep.mr.write(data, length, offset)
    return digest(data)


# --- client ---------------------------------------------------------------------------


class Row(NamedTuple):
    operation: str
    messages: int
    bytes: int
    seconds: float


class Demo:
    def __init__(self, conn: Channel, ep: RcEndpoint, peer: PeerInfo) -> None:
        self.conn = conn
        self.ep = ep
        self.peer = peer
        self.errors: list[str] = []
        self.operations = 0

    def ask(self, *request: Any) -> Any:
        self.conn.send(*request)
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"server: {value}")
        return value

    def check(self, ok: bool, what: str) -> None:
        self.operations += 1
        if not ok:
            self.errors.append(what)

    def complete(self, opcode_name: str) -> None:
        (wc,) = self.ep.poll(1, DEADLINE_S)
        if wc.status:
            raise RuntimeError(f"{opcode_name} completed with status {ibv_wc_status_str(wc.status)}")

    def post(self, opcode: int, size: int, offset: int = 0, remote_offset: int = 0) -> None:
        wr = SendWR(wr_id=opcode, opcode=opcode, sg=[SGE(self.ep.mr.buf + offset, size, self.ep.mr.lkey)])
        wr.set_wr_rdma(self.peer.rkey, self.peer.addr + remote_offset)
        self.ep.qp.post_send(wr)

    def send(self, size: int) -> None:
        self.ask("post_recv", MAX_SIZE)
        data = os.urandom(size)
        self.ep.mr.write(data, size)
        self.post(ibv_wr_opcode.IBV_WR_SEND, size)
        self.complete("SEND")
        status, received, length = self.ask("wait_recv")
        self.check(status == 0 and length == size and received == digest(data), f"SEND {size} B")

    def write(self, size: int) -> None:
        data = os.urandom(size)
        self.ep.mr.write(data, size)
        self.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, size, remote_offset=MAX_SIZE)
        self.complete("RDMA_WRITE")
        self.check(self.ask("digest", MAX_SIZE, size) == digest(data), f"RDMA_WRITE {size} B")

    def read(self, size: int) -> None:
        expected = self.ask("fill", MAX_SIZE, size)
        self.post(ibv_wr_opcode.IBV_WR_RDMA_READ, size, offset=MAX_SIZE, remote_offset=MAX_SIZE)
        self.complete("RDMA_READ")
        self.check(digest(self.ep.mr.read(size, MAX_SIZE)) == expected, f"RDMA_READ {size} B")

    def atomics(self, compare_swap: bool) -> int:
        """Atomic rounds against a reference model; returns the rounds run."""
        value = int.from_bytes(os.urandom(8), "little")
        self.ask("set_word", ATOMIC_OFFSET, value)
        for round_ in range(ATOMIC_ROUNDS):
            local = ATOMIC_OFFSET
            operand = int.from_bytes(os.urandom(8), "little")
            wr = SendWR(wr_id=round_, sg=[SGE(self.ep.mr.buf + local, 8, self.ep.mr.lkey)])
            if compare_swap:
                compare = value if round_ % 2 else operand  # half match, half do not
                wr.opcode = ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP
                wr.set_wr_atomic(self.peer.rkey, self.peer.addr + ATOMIC_OFFSET, compare, operand)
                new = operand if compare == value else value
            else:
                wr.opcode = ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD
                wr.set_wr_atomic(self.peer.rkey, self.peer.addr + ATOMIC_OFFSET, operand)
                new = (value + operand) & 0xFFFFFFFFFFFFFFFF
            self.ep.qp.post_send(wr)
            self.complete("ATOMIC_CMP_AND_SWP" if compare_swap else "ATOMIC_FETCH_AND_ADD")
            original = WORD.unpack(self.ep.mr.read(8, local))[0]
            self.check(original == value, f"atomic round {round_}: got original {original:#x}, expected {value:#x}")
            value = new
        self.check(self.ask("get_word", ATOMIC_OFFSET) == value, "final atomic value")
        return ATOMIC_ROUNDS


def run_client(conn: Channel, out: TextIO, sizes: tuple[int, ...] = SIZES) -> int:
    """The client side: connect, run every operation, print the report; 1 if anything differed."""
    ep = RcEndpoint.open(MR_SIZE, max_wr=32)
    try:
        _, peer_fields, server_pid, server_address = conn.recv()
        peer = from_wire(peer_fields)
        mtu = ibv_mtu(int(ep.ctx.active_mtu))
        demo = Demo(conn, ep, peer)
        demo.ask("connect", to_wire(ep.info()))
        ep.connect(peer, path_mtu=mtu)
        print(f"pyroce demo: {ep.ctx.device.address} (pid {os.getpid()}) <-> {server_address} (pid {server_pid}), "
              f"RC, path MTU {128 << mtu} B, sizes {min(sizes)} B .. {max(sizes) >> 20} MiB", file=out)  # fmt: skip
        print(f"{'operation':<22}{'messages':>10}{'bytes':>12}{'MB/s':>10}", file=out)
        rows: list[Row] = []
        for name, action in (("SEND/RECV", demo.send), ("RDMA_WRITE", demo.write), ("RDMA_READ", demo.read)):
            start, count, moved = time.perf_counter(), 0, 0
            for size in sizes:
                for _ in range(messages_for(size)):
                    action(size)
                    count, moved = count + 1, moved + size
            rows.append(Row(name, count, moved, time.perf_counter() - start))
        for name, compare_swap in (("ATOMIC_FETCH_AND_ADD", False), ("ATOMIC_CMP_AND_SWP", True)):
            start = time.perf_counter()
            rounds = demo.atomics(compare_swap)
            rows.append(Row(name, rounds, 8 * rounds, time.perf_counter() - start))
        for row in rows:
            rate = row.bytes / row.seconds / 1e6 if row.seconds else 0.0
            print(f"{row.operation:<22}{row.messages:>10}{row.bytes:>12}{rate:>10.2f}", file=out)
        mine, theirs = ep.ctx.device.stats(), demo.ask("stats")
        both = {name: mine.get(name, 0) + theirs.get(name, 0) for name in {*mine, *theirs}}
        print(f"packets: {both.get('sent_pkts', 0)} sent, {both.get('rcvd_pkts', 0)} received, "
              f"{both.get('icrc_errors', 0)} with a bad ICRC", file=out)  # fmt: skip
        injected = {name[len("injected_") :]: n for name, n in sorted(both.items()) if name.startswith("injected_")}
        if injected:
            faults = ", ".join(f"{name} {n}" for name, n in injected.items())
            print(f"faults injected: {faults}; retransmitted {both.get('retransmitted_pkts', 0)} packets "
                  f"({both.get('local_ack_timeout_err', 0)} timeouts, {both.get('rcvd_seq_err', 0)} sequence NAKs, "
                  f"{both.get('implied_naks', 0)} implied NAKs)", file=out)  # fmt: skip
        for error in demo.errors:
            print(f"MISMATCH: {error}", file=out)
        total = sum(row.bytes for row in rows)
        print(f"verified: {demo.operations} operations, {total} bytes, {len(demo.errors)} errors", file=out)
        conn.send("bye")
        return 1 if demo.errors else 0
    finally:
        ep.close()


def run_local(out: TextIO) -> int:
    """Both sides on this host: the server is a child process that connects back over TCP."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(DEADLINE_S)
    port = listener.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "pyroce", "demo", "--connect-server", f"127.0.0.1:{port}"])
    try:
        sock, _ = listener.accept()
        conn = Channel(sock)
        try:
            return run_client(conn, out)
        finally:
            conn.close()
    finally:
        listener.close()
        try:
            server.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            server.kill()


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="two processes move data with RDMA and verify every byte")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--serve", metavar="[HOST:]PORT", help="run only the server side, waiting on TCP PORT")
    where.add_argument("--connect", metavar="HOST:PORT", help="run only the client side, against a --serve")
    where.add_argument("--connect-server", metavar="HOST:PORT", help=argparse.SUPPRESS)  # the local child
    for fault in ("loss", "reorder", "duplicate", "corrupt"):
        parser.add_argument(f"--{fault}", type=float, default=0.0, metavar="P", help=f"{fault} probability per packet")
    parser.add_argument("--seed", type=int, default=1, help="seed of the injected faults")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    faults = {name: getattr(args, name) for name in ("loss", "reorder", "duplicate", "corrupt")}
    if any(faults.values()):
        if not all(0.0 <= p <= 1.0 for p in faults.values()):
            print("pyroce demo: error: fault probabilities must be between 0 and 1", file=sys.stderr)
            return 1
        settings = ",".join(f"{name}={p}" for name, p in faults.items())
        os.environ["PYROCE_FAULTS"] = f"{settings},seed={args.seed}"  # both processes inherit it
    try:
        if args.serve:
            with socket.create_server(parse_endpoint(args.serve)) as listener:
                sock, _ = listener.accept()
            serve(Channel(sock))
            return 0
        if args.connect_server or args.connect:
            conn = Channel(connect(parse_endpoint(args.connect_server or args.connect)))
            if args.connect_server:
                serve(conn)
                return 0
            return run_client(conn, out)
        return run_local(out)
    except (PyverbsError, PollTimeout, RuntimeError, ValueError) as exc:
        print(f"pyroce demo: error: {exc}", file=sys.stderr)
        return 1
