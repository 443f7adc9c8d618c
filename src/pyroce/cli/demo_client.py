"""The client side of ``pyroce demo``: connect to the server's endpoint, run every operation at
every size, check each against the server's digests or a reference model, and build the report."""

from __future__ import annotations

import os
import time
from typing import Any

from pyroce.apps.rc_endpoint import PeerInfo, PollTimeout, RcEndpoint
from pyroce.cli.demo_protocol import Channel, from_wire, to_wire, wc_failure
from pyroce.cli.demo_report import Report, Row, Side
from pyroce.cli.demo_server import ATOMIC_OFFSET, MAX_SIZE, SIZES, WORD, digest
from pyroce.cli.errors import CliError
from pyroce.cli.progress import Progress
from pyroce.verbs.enums import ibv_mtu, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR

ATOMIC_ROUNDS = 64


def messages_for(size: int) -> int:
    """Messages per size: several of the small ones, fewer as they grow."""
    return max(1, min(16, (8 << 20) // max(size, 1) // 4))


class Demo:
    """One client run against a connected server."""

    def __init__(self, conn: Channel, ep: RcEndpoint, progress: Progress) -> None:
        """Connect ``ep``'s QP to the server's at the smaller of the two active MTUs."""
        self.conn = conn
        self.ep = ep
        self.progress = progress
        self.errors: list[str] = []
        self.operations = 0
        self.sizes = SIZES
        kind, *fields = conn.recv()
        if kind == "error":
            raise CliError(f"the server at {conn.peer}: {fields[0]}")
        peer_fields, server_pid, server_address, server_mtu = fields
        self.peer: PeerInfo = from_wire(peer_fields)
        self.mtu = ibv_mtu(min(int(ep.ctx.active_mtu), server_mtu))
        self.ask("connect", to_wire(ep.info()), int(self.mtu))
        ep.connect(self.peer, path_mtu=self.mtu)
        self.client = Side(ep.ctx.device.address, os.getpid())
        self.server = Side(server_address, server_pid)

    def ask(self, *request: Any) -> Any:
        self.conn.send(*request)
        status, value = self.conn.recv()
        if status != "ok":
            raise CliError(f"the server at {self.conn.peer}: {value}")
        return value

    def check(self, ok: bool, what: str) -> None:
        self.operations += 1
        if not ok:
            self.errors.append(what)

    def complete(self, what: str) -> None:
        try:
            (wc,) = self.ep.poll(1, self.conn.timeout)
        except PollTimeout:
            raise CliError(f"{what} did not complete within {self.conn.timeout:g} s") from None
        if wc.status:
            raise CliError(wc_failure(what, wc))

    def post(self, opcode: int, size: int, offset: int = 0, remote_offset: int = 0) -> None:
        wr = SendWR(wr_id=opcode, opcode=opcode, sg=[SGE(self.ep.mr.buf + offset, size, self.ep.mr.lkey)])
        wr.set_wr_rdma(self.peer.rkey, self.peer.addr + remote_offset)
        self.ep.qp.post_send(wr)

    def send(self, size: int) -> None:
        self.ask("post_recv", MAX_SIZE)
        data = os.urandom(size)
        self.ep.mr.write(data, size)
        self.post(ibv_wr_opcode.IBV_WR_SEND, size)
        self.complete(f"SEND of {size} B")
        status, received, length = self.ask("wait_recv")
        self.check(status == 0 and length == size and received == digest(data), f"SEND {size} B")

    def write(self, size: int) -> None:
        data = os.urandom(size)
        self.ep.mr.write(data, size)
        self.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, size, remote_offset=MAX_SIZE)
        self.complete(f"RDMA_WRITE of {size} B")
        self.check(self.ask("digest", MAX_SIZE, size) == digest(data), f"RDMA_WRITE {size} B")

    def read(self, size: int) -> None:
        expected = self.ask("fill", MAX_SIZE, size)
        self.post(ibv_wr_opcode.IBV_WR_RDMA_READ, size, offset=MAX_SIZE, remote_offset=MAX_SIZE)
        self.complete(f"RDMA_READ of {size} B")
        self.check(digest(self.ep.mr.read(size, MAX_SIZE)) == expected, f"RDMA_READ {size} B")

    def atomics(self, compare_swap: bool) -> int:
        """Atomic rounds against a reference model; returns the rounds run."""
        name = "ATOMIC_CMP_AND_SWP" if compare_swap else "ATOMIC_FETCH_AND_ADD"
        value = int.from_bytes(os.urandom(8), "little")
        self.ask("set_word", ATOMIC_OFFSET, value)
        for round_ in range(ATOMIC_ROUNDS):
            self.progress.update(f"{name}: round {round_ + 1} of {ATOMIC_ROUNDS}")
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
            self.complete(f"{name} round {round_}")
            original = WORD.unpack(self.ep.mr.read(8, local))[0]
            self.check(original == value, f"atomic round {round_}: got original {original:#x}, expected {value:#x}")
            value = new
        self.check(self.ask("get_word", ATOMIC_OFFSET) == value, "final atomic value")
        return ATOMIC_ROUNDS

    def run(self) -> Report:
        """Every operation at every size; the report (``conn`` is told the verdict)."""
        rows: list[Row] = []
        sizes = self.sizes
        for name, action in (("SEND/RECV", self.send), ("RDMA_WRITE", self.write), ("RDMA_READ", self.read)):
            start, count, moved = time.perf_counter(), 0, 0
            total = sum(messages_for(size) for size in sizes)
            for size in sizes:
                for _ in range(messages_for(size)):
                    self.progress.update(f"{name}: message {count + 1} of {total} ({size} B)")
                    action(size)
                    count, moved = count + 1, moved + size
            rows.append(Row(name, count, moved, time.perf_counter() - start))
        for name, compare_swap in (("ATOMIC_FETCH_AND_ADD", False), ("ATOMIC_CMP_AND_SWP", True)):
            start = time.perf_counter()
            rounds = self.atomics(compare_swap)
            rows.append(Row(name, rounds, 8 * rounds, time.perf_counter() - start))
        mine, theirs = self.ep.ctx.device.stats(), self.ask("stats")
        counters = {name: mine.get(name, 0) + theirs.get(name, 0) for name in sorted({*mine, *theirs})}
        report = Report(self.client, self.server, 128 << self.mtu, sizes, rows, counters, self.errors,
                        self.operations)  # fmt: skip
        self.conn.send("bye", report.verdict())
        return report
