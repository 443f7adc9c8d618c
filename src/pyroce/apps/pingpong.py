"""``ibv_rc_pingpong``'s verbs side (``libibverbs/examples/rc_pingpong.c``, rdma-core v44):
the ``pingpong_context`` and its QP moved as ``pp_connect_ctx`` moves it, the 52-byte address
message, and the completion loop. ``pyroce rc_pingpong`` (``pyroce.cli.rc_pingpong``) adds the
TCP exchange and the output, so it pairs with the real tool on rxe or a NIC.

RC attributes as in ``pp_connect_ctx``: max_dest_rd_atomic 1, min_rnr_timer 12, timeout 14,
retry_cnt 7, rnr_retry 7, max_rd_atomic 1, and a GRH when the peer's GID has a non-zero
interface id. ``rx_depth`` receives of ``size`` bytes are posted up front (and topped up when
one or none is left); the client posts one SEND, and each side posts its next SEND once both
its previous SEND and a RECV have completed, until ``iters`` of each have completed.

``-c``: as in the C tool, the client writes 0 at the first byte of every page of its buffer
(the rest is 0x7b) before the first SEND; at the end the buffer holds whatever was last
received and must still be that pattern. The C tool checks only the first byte of each page
and only on the server; this one checks every byte on both sides (``bad_pages``).
"""

from __future__ import annotations

import mmap
import socket
from dataclasses import dataclass

import pyroce.verbs.enums as e
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

PINGPONG_RECV_WRID = 1
PINGPONG_SEND_WRID = 2
MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1  # sizeof msg in the C tool: 52
DONE = b"done\0"
FILL = 0x7B  # memset(ctx->buf, 0x7b, size)
MTU_ENUM = {256: e.ibv_mtu.IBV_MTU_256, 512: e.ibv_mtu.IBV_MTU_512, 1024: e.ibv_mtu.IBV_MTU_1024,
            2048: e.ibv_mtu.IBV_MTU_2048, 4096: e.ibv_mtu.IBV_MTU_4096}  # fmt: skip
QPS = e.ibv_qp_state
MASK = e.ibv_qp_attr_mask


class PingpongError(Exception):
    """A failed step, named as the C tool names it (``Failed to modify QP to RTR``)."""


@dataclass
class Dest:
    """``struct pingpong_dest``."""

    lid: int
    qpn: int
    psn: int
    gid: bytes  # 16 raw bytes

    def wire(self) -> bytes:
        """``sprintf(msg, "%04x:%06x:%06x:%s", ...)`` with ``gid_to_wire_gid``, plus the NUL."""
        msg = b"%04x:%06x:%06x:%s\0" % (self.lid, self.qpn, self.psn, self.gid.hex().encode())
        if len(msg) != MSG_LEN:
            raise PingpongError(f"local address does not fit the {MSG_LEN}-byte message")
        return msg

    @classmethod
    def parse(cls, msg: bytes) -> Dest:
        """``sscanf(msg, "%x:%x:%x:%s", ...)`` and ``wire_gid_to_gid``."""
        text = msg.split(b"\0", 1)[0].decode("ascii", "replace")
        parts = text.split(":", 3)
        try:
            lid, qpn, psn = (int(p, 16) for p in parts[:3])
            gid = bytes.fromhex(parts[3][:32].ljust(32, "0"))
        except (ValueError, IndexError):
            raise PingpongError(f"bad remote address {text!r}") from None
        return cls(lid, qpn, psn, gid)

    def __str__(self) -> str:
        return (f"LID 0x{self.lid:04x}, QPN 0x{self.qpn:06x}, PSN 0x{self.psn:06x}, "
                f"GID {socket.inet_ntop(socket.AF_INET6, self.gid)}")  # fmt: skip


class Pingpong:
    """``struct pingpong_context`` with ``pp_init_ctx``, ``pp_post_recv``, ``pp_post_send``,
    ``pp_connect_ctx`` and ``parse_single_wc``."""

    def __init__(self, dev_name: str, size: int, rx_depth: int, ib_port: int) -> None:
        self.size = size
        self.rx_depth = rx_depth
        self.send_flags: int = e.ibv_send_flags.IBV_SEND_SIGNALED
        self.pending = 0
        self.rcnt = self.scnt = self.routs = 0  # RECVs and SENDs completed, receives outstanding
        self.ctx = Context(name=dev_name)
        try:
            self.pd = PD(self.ctx)
            self.mr = MR(self.pd, size, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
            self.mr.write(bytes([FILL]) * size, size)
            self.cq = CQ(self.ctx, rx_depth + 1)
            cap = QPCap(max_send_wr=1, max_recv_wr=rx_depth, max_send_sge=1, max_recv_sge=1)
            self.qp = QP(self.pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
            _, init_attr = self.qp.query(MASK.IBV_QP_CAP)
            if init_attr.cap.max_inline_data >= size:
                self.send_flags |= e.ibv_send_flags.IBV_SEND_INLINE
            attr = QPAttr(qp_state=QPS.IBV_QPS_INIT, port_num=ib_port)
            attr.pkey_index = 0
            attr.qp_access_flags = 0
            try:
                self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_PKEY_INDEX | MASK.IBV_QP_PORT
                               | MASK.IBV_QP_ACCESS_FLAGS)  # fmt: skip
            except PyverbsError as exc:
                raise PingpongError(f"Failed to modify QP to INIT: {exc}") from None
        except BaseException:
            self.ctx.close()
            raise
        self.sge = SGE(self.mr.buf, size, self.mr.lkey)

    def close(self) -> None:
        self.ctx.close()

    def post_recv(self, n: int) -> int:
        """Post ``n`` receives one by one; the number posted."""
        for i in range(n):
            try:
                self.qp.post_recv(RecvWR(wr_id=PINGPONG_RECV_WRID, num_sge=1, sg=[self.sge]))
            except PyverbsError:
                return i
        return n

    def post_send(self) -> None:
        wr = SendWR(wr_id=PINGPONG_SEND_WRID, opcode=e.ibv_wr_opcode.IBV_WR_SEND, num_sge=1, sg=[self.sge],
                    send_flags=self.send_flags)  # fmt: skip
        try:
            self.qp.post_send(wr)
        except PyverbsError as exc:
            raise PingpongError(f"Couldn't post send: {exc}") from None

    def connect(self, port: int, my_psn: int, mtu: int, sl: int, dest: Dest, sgid_idx: int) -> None:
        attr = QPAttr(qp_state=QPS.IBV_QPS_RTR, path_mtu=mtu)
        attr.dest_qp_num = dest.qpn
        attr.rq_psn = dest.psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=0)
        if any(dest.gid[8:]):  # dest->gid.global.interface_id
            attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=1,
                                  gr=GlobalRoute(dgid=GID(dest.gid), hop_limit=1, sgid_index=sgid_idx))  # fmt: skip
        try:
            self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_AV | MASK.IBV_QP_PATH_MTU | MASK.IBV_QP_DEST_QPN
                           | MASK.IBV_QP_RQ_PSN | MASK.IBV_QP_MAX_DEST_RD_ATOMIC | MASK.IBV_QP_MIN_RNR_TIMER)  # fmt: skip
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTR: {exc}") from None
        attr.qp_state = QPS.IBV_QPS_RTS
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.sq_psn = my_psn
        attr.max_rd_atomic = 1
        try:
            self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_TIMEOUT | MASK.IBV_QP_RETRY_CNT
                           | MASK.IBV_QP_RNR_RETRY | MASK.IBV_QP_SQ_PSN | MASK.IBV_QP_MAX_QP_RD_ATOMIC)  # fmt: skip
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTS: {exc}") from None

    def run(self, iters: int) -> None:
        """The completion loop of ``main``: until ``iters`` SENDs and RECVs have completed."""
        self.rcnt = self.scnt = 0
        while self.rcnt < iters or self.scnt < iters:
            n, wcs = self.cq.poll(2)  # busy polling as the C tool does; the poll runs the engine
            for wc in wcs[:n]:
                self.parse_wc(wc, iters)

    def parse_wc(self, wc: WC, iters: int) -> None:
        """``parse_single_wc``."""
        if wc.status != e.ibv_wc_status.IBV_WC_SUCCESS:
            raise PingpongError(f"Failed status {e.ibv_wc_status_str(wc.status)} ({wc.status}) for wr_id {wc.wr_id}")
        if wc.wr_id == PINGPONG_SEND_WRID:
            self.scnt += 1
        elif wc.wr_id == PINGPONG_RECV_WRID:
            self.routs -= 1
            if self.routs <= 1:
                self.routs += self.post_recv(self.rx_depth - self.routs)
                if self.routs < self.rx_depth:
                    raise PingpongError(f"Couldn't post receive ({self.routs})")
            self.rcnt += 1
        else:
            raise PingpongError(f"Completion for unknown wr_id {wc.wr_id}")
        self.pending &= ~wc.wr_id
        if self.scnt < iters and not self.pending:
            self.post_send()
            self.pending = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID

    def mark_pages(self) -> None:
        """``-c`` on the client: ``ctx->buf[i] = i / page_size % sizeof(char)``, i.e. 0 per page."""
        for offset in range(0, self.size, mmap.PAGESIZE):
            self.mr.write(b"\0", 1, offset)

    def bad_pages(self) -> list[int]:
        """``-c`` at the end: pages whose bytes are not the client's pattern (0, then 0x7b)."""
        data = self.mr.read(self.size, 0)
        page = mmap.PAGESIZE
        expected = b"\0" + bytes([FILL]) * (page - 1)
        bad = []
        for offset in range(0, self.size, page):
            got = data[offset : offset + page]
            if got != expected[: len(got)]:
                bad.append(offset // page)
        return bad
