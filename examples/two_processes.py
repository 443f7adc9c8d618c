"""An RC connection between two processes: each has its own pyroce0 (its own address), and
they swap the numbers a connection needs (GID, QPN, PSN, R_Key, buffer address) over TCP, as
ibv_rc_pingpong and perftest do. The client then RDMA WRITEs into the server's memory and
SENDs a message saying so; the server prints what it holds.

    python3 examples/two_processes.py server [PORT]          # in one shell (default port 18600)
    python3 examples/two_processes.py client HOST [PORT]     # in another

On two hosts, set PYROCE_ADDR to each host's IPv4 address (the device binds UDP 4791 there).
"""

from __future__ import annotations

import json
import secrets
import socket
import sys

import pyroce.verbs.enums as e
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
PORT = 18600


class Side:
    """This process's end of the connection."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.pd = PD(ctx)
        self.mr = MR(self.pd, 1 << 16, ACCESS)
        self.cq = CQ(ctx, 16)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                         cap=QPCap(max_send_wr=8, max_recv_wr=8)))  # fmt: skip
        self.psn = secrets.randbits(24)

    def numbers(self) -> dict[str, object]:
        """What the peer needs to reach this side."""
        return {"gid": str(self.ctx.query_gid(1, 0)), "qpn": self.qp.qp_num, "psn": self.psn,
                "rkey": self.mr.rkey, "addr": self.mr.buf}  # fmt: skip

    def connect(self, peer: dict) -> None:
        attr = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
        attr.qp_access_flags = ACCESS
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer["qpn"], peer["psn"], self.psn
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(peer["gid"])))
        self.qp.to_rts(attr)

    def wait(self) -> WC:
        while True:
            count, wcs = self.cq.poll(1)
            if count:
                if wcs[0].status != e.IBV_WC_SUCCESS:
                    raise SystemExit(f"work request failed: {wcs[0].reason}")
                return wcs[0]


def exchange(conn: socket.socket, mine: dict) -> dict:
    """Send our numbers as one JSON line, read the peer's."""
    conn.sendall(json.dumps(mine).encode() + b"\n")
    return json.loads(conn.makefile().readline())


def server(port: int) -> None:
    with Context(name="pyroce0") as ctx, socket.create_server(("127.0.0.1", port)) as listener:
        side = Side(ctx)
        print(f"server: pyroce0 at {ctx.device.address}, waiting on TCP port {port}", flush=True)
        conn, _ = listener.accept()
        with conn:
            peer = exchange(conn, side.numbers())
            side.connect(peer)
            # a receive for the client's SEND (if it came first, the client's NIC would retry: RNR)
            side.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(side.mr.buf + 4096, 256, side.mr.lkey)]))
        message = side.wait()
        note = side.mr.read(message.byte_len, 4096).decode()
        length = int(note.split()[-2])
        print(f"server: SEND says {note!r}; my memory holds {side.mr.read(length, 0).decode()!r}")


def client(host: str, port: int) -> None:
    with Context(name="pyroce0") as ctx, socket.create_connection((host, port), timeout=30) as conn:
        side = Side(ctx)
        peer = exchange(conn, side.numbers())
        side.connect(peer)
        text = f"written by process at {ctx.device.address}".encode()
        side.mr.write(text, len(text))
        write = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sg=[SGE(side.mr.buf, len(text), side.mr.lkey)])
        write.set_wr_rdma(peer["rkey"], peer["addr"])
        note = f"I wrote {len(text)} bytes".encode()
        side.mr.write(note, len(note), 1024)
        side.qp.post_send(write)
        side.qp.post_send(SendWR(wr_id=2, sg=[SGE(side.mr.buf + 1024, len(note), side.mr.lkey)]))
        side.wait(), side.wait()
        print(f"client: wrote {len(text)} bytes into the server's memory and told it so")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "server":
        server(int(sys.argv[2]) if len(sys.argv) > 2 else PORT)
    elif len(sys.argv) >= 3 and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else PORT)
    else:
        raise SystemExit(__doc__)
