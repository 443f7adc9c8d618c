"""Two RC queue pairs connected in one process, then a SEND and an RDMA WRITE between them.

Everything an RDMA program does, with pyverbs' names: open the device, allocate a PD,
register memory, create CQs and QPs, move each QP through INIT, RTR and RTS with the other's
numbers (QPN, PSN, GID), post work and poll for completions. The two QPs are on the same
device here, so the numbers are simply passed across; between two processes they travel over
any channel (see two_processes.py).

    python3 examples/connect_two_qps.py
"""

from __future__ import annotations

import pyroce.verbs.enums as e
from pyroce.verbs.addr import AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def make_side(ctx: Context) -> tuple[PD, MR, CQ, QP]:
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    cq = CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=16, max_recv_wr=16)))
    return pd, mr, cq, qp


def connect(qp: QP, ctx: Context, remote_qpn: int, remote_psn: int, my_psn: int) -> None:
    """INIT -> RTR -> RTS: what ibv_rc_pingpong does with the numbers it received."""
    attr = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
    attr.qp_access_flags = ACCESS
    attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote_qpn, remote_psn, my_psn
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    # RoCE addresses by GID: GID index 3 of pyroce0 is ::ffff:<its IPv4 address>, RoCE v2 (as on mlx5)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, 3), sgid_index=3))
    qp.to_rts(attr)


def poll(cq: CQ) -> list:
    """Spin until a completion arrives (a real program would bound this or use a channel)."""
    while True:
        count, wcs = cq.poll(1)
        if count:
            return wcs


def main() -> None:
    with Context(name="pyroce0") as ctx:
        _, mr_a, cq_a, qp_a = make_side(ctx)
        _, mr_b, cq_b, qp_b = make_side(ctx)
        connect(qp_a, ctx, qp_b.qp_num, remote_psn=200, my_psn=100)
        connect(qp_b, ctx, qp_a.qp_num, remote_psn=100, my_psn=200)

        mr_b_recv = SGE(mr_b.buf, 64, mr_b.lkey)
        qp_b.post_recv(RecvWR(wr_id=1, sg=[mr_b_recv]))  # receives first: a SEND needs one
        mr_a.write(b"hello over RoCEv2", 17)
        qp_a.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, sg=[SGE(mr_a.buf, 17, mr_a.lkey)]))
        (sent,) = poll(cq_a)
        (received,) = poll(cq_b)
        assert sent.status == e.IBV_WC_SUCCESS, sent.reason
        print(f"SEND: {received.byte_len} bytes arrived: {mr_b.read(received.byte_len, 0).decode()!r}")

        write = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, sg=[SGE(mr_a.buf, 17, mr_a.lkey)])
        write.set_wr_rdma(mr_b.rkey, mr_b.buf + 1024)  # the peer's R_Key and address
        qp_a.post_send(write)
        (done,) = poll(cq_a)
        assert done.status == e.IBV_WC_SUCCESS, done.reason
        print(f"RDMA WRITE: the peer's memory now holds {mr_b.read(17, 1024).decode()!r}")


if __name__ == "__main__":
    main()
