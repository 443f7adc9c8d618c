"""rdma-core's own pyverbs (Debian's python3-pyverbs, a Cython module) on pyroce through the C
driver: two RC QPs of one process ping-pong ``--iters`` messages, each side polling its CQ in a
busy loop as rdma-core's tests do; prints µs per round trip. Run it with the Python pyverbs is
built for, under ``pyroce run``:

    pyroce run -- /usr/bin/python3 benchmarks/pyverbs_pingpong.py [--size 64] [--iters 1000]

It imports nothing of pyroce: what it measures is what any pyverbs program gets.
"""

from __future__ import annotations

import argparse
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC, IBV_WR_SEND
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR


def rc_pair(ctx: Context, pd: PD, depth: int) -> list[tuple[QP, CQ]]:
    """Two RC QPs, each with its own CQ, connected to each other on port 1, GID 0."""
    gid = ctx.query_gid(1, 0)
    pairs = []
    for _ in range(2):
        cq = CQ(ctx, depth)
        init = QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=depth, max_recv_wr=depth))
        pairs.append((QP(pd, init), cq))
    for (qp, _), (peer, _) in zip(pairs, reversed(pairs)):
        attr = QPAttr(qp_state=1, port_num=1)  # INIT
        attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
        qp.to_init(attr)
        attr.dest_qp_num = peer.qp_num
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=0), is_global=1, port_num=1)
        attr.path_mtu = 3  # 1024
        qp.to_rtr(attr)
        qp.to_rts(attr)
    return pairs


def poll(cq: CQ) -> None:
    """Busy-poll one completion, as rdma-core's tests (utils.poll_cq) do."""
    while True:
        count, wcs = cq.poll()
        if count:
            if wcs[0].status:
                raise RuntimeError(f"completion status {wcs[0].status}")
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--iters", type=int, default=1000)
    args = parser.parse_args()
    with Context(name="pyroce0") as ctx, PD(ctx) as pd:
        (a, acq), (b, bcq) = rc_pair(ctx, pd, 16)
        mrs = [MR(pd, args.size, IBV_ACCESS_LOCAL_WRITE) for _ in range(2)]
        send = [SendWR(opcode=IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, args.size, mr.lkey)]) for mr in mrs]
        recv = [RecvWR(num_sge=1, sg=[SGE(mr.buf, args.size, mr.lkey)]) for mr in mrs]
        a.post_recv(recv[0])
        b.post_recv(recv[1])
        start = time.perf_counter()
        for _ in range(args.iters):
            a.post_send(send[0])
            poll(acq)  # a's send
            poll(bcq)  # b's receive
            b.post_recv(recv[1])
            b.post_send(send[1])
            poll(bcq)
            poll(acq)
            a.post_recv(recv[0])
        elapsed = time.perf_counter() - start
    print(f"{args.iters} round trips of {args.size} bytes: {elapsed / args.iters * 1e6:.1f} usec/iter")


if __name__ == "__main__":
    main()
