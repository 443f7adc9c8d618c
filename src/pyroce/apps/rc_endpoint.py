"""One RC endpoint: a context, PD, CQ, QP and MR, connected to a peer from the few numbers an
out-of-band exchange carries (GID, QPN, PSN, R_Key, address), as ibv_rc_pingpong does."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from pyroce.ib.addressing import ROCE_V2_INDEX
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC, CompChannel
from pyroce.verbs.cq_ex import CQEX, CqInitAttrEx
from pyroce.verbs.device import Context
from pyroce.verbs.enums import (
    IBV_WC_STANDARD_FLAGS,
    ibv_access_flags,
    ibv_mtu,
    ibv_qp_init_attr_mask,
    ibv_qp_state,
    ibv_qp_type,
)
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.qp_ex import QPEx, QPInitAttrEx

ALL_ACCESS = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
              | ibv_access_flags.IBV_ACCESS_REMOTE_READ | ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC)  # fmt: skip


class PeerInfo(NamedTuple):
    """What one side tells the other before connecting."""

    gid: bytes
    qpn: int
    psn: int
    rkey: int
    addr: int


class PollTimeout(TimeoutError):
    """Completions did not arrive in time."""


@dataclass
class RcEndpoint:
    ctx: Context
    pd: PD
    cq: CQ
    qp: QP
    mr: MR
    psn: int
    failed: list[WC] = field(default_factory=list)  # failed completions ``poll`` returned, for reports
    channel: CompChannel | None = None  # the CQ's completion channel (``open(events=True)``)

    @classmethod
    def open(cls, mr_size: int, max_wr: int = 64, max_sge: int = 4, max_inline: int = 64,
             access: int = ALL_ACCESS, device: str = "pyroce0", psn: int | None = None,
             events: bool = False, qp_type: int = ibv_qp_type.IBV_QPT_RC,
             send_ops_flags: int = 0, context: Context | None = None) -> RcEndpoint:  # fmt: skip
        """``events``: the CQ reports to a completion channel of its own; ``qp_type``: RC or UC
        (``connect`` sets what the transitions of either require); ``send_ops_flags``: the
        extended verbs, a ``QPEx`` with these builders over a ``CQEX``; ``context``: one already
        open (on a device a simulator built) instead of ``device``'s."""
        ctx = Context(name=device) if context is None else context
        pd = PD(ctx)
        channel = CompChannel(ctx) if events else None
        cap = QPCap(max_send_wr=max_wr, max_recv_wr=max_wr, max_send_sge=max_sge, max_recv_sge=max_sge,
                    max_inline_data=max_inline)  # fmt: skip
        cq: CQ
        if send_ops_flags:
            cq = CQEX(ctx, CqInitAttrEx(4 * max_wr, channel, wc_flags=IBV_WC_STANDARD_FLAGS))
            mask = ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
            qp: QP = QPEx(ctx, QPInitAttrEx(qp_type=qp_type, scq=cq, rcq=cq, cap=cap, comp_mask=mask, pd=pd,
                                            send_ops_flags=send_ops_flags))  # fmt: skip
        else:
            cq = CQ(ctx, 4 * max_wr, None, channel)
            qp = QP(pd, QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq, cap=cap))
        mr = MR(pd, mr_size, access)
        return cls(ctx, pd, cq, qp, mr, secrets.randbits(24) if psn is None else psn, channel=channel)

    def info(self) -> PeerInfo:
        return PeerInfo(self.ctx.query_gid(1, ROCE_V2_INDEX).raw, self.qp.qp_num, self.psn, self.mr.rkey, self.mr.buf)

    def connect(self, peer: PeerInfo, path_mtu: int = ibv_mtu.IBV_MTU_1024, rd_atomic: int = 4,
                access: int = ALL_ACCESS, timeout: int = 14, rnr_retry: int = 7,
                state: int = ibv_qp_state.IBV_QPS_RTS) -> None:  # fmt: skip
        """INIT, RTR and RTS with ibv_rc_pingpong's settings (min_rnr_timer 12 is 0.64 ms);
        ``state`` IBV_QPS_RTR stops there (the QP receives, and sends nothing)."""
        attr = QPAttr(port_num=1, path_mtu=path_mtu)
        attr.qp_access_flags = access
        attr.dest_qp_num = peer.qpn
        attr.rq_psn = peer.psn
        attr.sq_psn = self.psn
        attr.max_rd_atomic = attr.max_dest_rd_atomic = rd_atomic
        attr.min_rnr_timer = 12
        attr.timeout = timeout
        attr.retry_cnt = 7
        attr.rnr_retry = rnr_retry
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(peer.gid), sgid_index=ROCE_V2_INDEX))
        if state == ibv_qp_state.IBV_QPS_RTR:
            self.qp.to_rtr(attr)
        else:
            self.qp.to_rts(attr)

    def poll(self, count: int = 1, deadline_s: float = 10.0) -> list[WC]:
        """Exactly ``count`` completions; ``PollTimeout`` if they take longer than ``deadline_s``."""
        deadline = time.monotonic() + deadline_s
        wcs: list[WC] = []
        while len(wcs) < count:
            _, got = self.cq.poll(count - len(wcs))
            wcs += got
            self.failed += [wc for wc in got if wc.status]
            if not got and time.monotonic() > deadline:
                raise PollTimeout(f"{len(wcs)} of {count} completions after {deadline_s} s")
        return wcs

    def close(self) -> None:
        self.ctx.close()
