"""Two connected RC QPs on pyroce0 for tests: real verbs objects, real engine, real packets.

Both ends live in this process, as in rdma-core's own tests: two Contexts of one device
connected through the device's GID, so every packet takes the device's internal loopback
(built, ICRC'd, verified and parsed like any other).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyroce.verbs.enums as e
from pyroce.verbs.addr import AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr

ALL_ACCESS = (e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | e.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
              | e.ibv_access_flags.IBV_ACCESS_REMOTE_READ | e.ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC)  # fmt: skip
MR_SIZE = 3 << 20
POLL_DEADLINE_S = 10.0


@dataclass
class Endpoint:
    ctx: Context
    pd: PD
    cq: CQ
    qp: QP
    mr: MR

    @classmethod
    def open(cls, max_wr: int = 64, max_sge: int = 4, max_inline: int = 64, access: int = ALL_ACCESS) -> Endpoint:
        ctx = Context(name="pyroce0")
        pd = PD(ctx)
        cq = CQ(ctx, 256)
        cap = QPCap(max_send_wr=max_wr, max_recv_wr=max_wr, max_send_sge=max_sge, max_recv_sge=max_sge,
                    max_inline_data=max_inline)  # fmt: skip
        qp = QP(pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
        mr = MR(pd, MR_SIZE, access)
        return cls(ctx, pd, cq, qp, mr)

    def connect(self, peer: Endpoint, path_mtu: int = e.ibv_mtu.IBV_MTU_1024, rd_atomic: int = 4,
                access: int = ALL_ACCESS, timeout: int = 14, rnr_retry: int = 7) -> None:  # fmt: skip
        attr = QPAttr(port_num=1, path_mtu=path_mtu)
        attr.qp_access_flags = access
        attr.dest_qp_num = peer.qp.qp_num
        attr.rq_psn = 0xFFFFF0  # near the 24-bit wrap, so every message crosses it
        attr.sq_psn = 0xFFFFF0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = rd_atomic
        attr.min_rnr_timer = 1
        attr.timeout = timeout
        attr.retry_cnt = 7
        attr.rnr_retry = rnr_retry
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=peer.ctx.query_gid(1, 0)))
        self.qp.to_rts(attr)

    def poll(self, count: int = 1) -> list[WC]:
        """Exactly ``count`` completions, waiting up to POLL_DEADLINE_S for them."""
        deadline = time.monotonic() + POLL_DEADLINE_S
        wcs: list[WC] = []
        while len(wcs) < count:
            _, got = self.cq.poll(count - len(wcs))
            wcs += got
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(wcs)} of {count} completions after {POLL_DEADLINE_S} s: {wcs}")
        return wcs

    def close(self) -> None:
        self.ctx.close()


def connected_pair(**connect: int) -> tuple[Endpoint, Endpoint]:
    a, b = Endpoint.open(), Endpoint.open()
    a.connect(b, **connect)
    b.connect(a, **connect)
    return a, b
