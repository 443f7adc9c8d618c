"""The verbs side of rdma-core's SEND ping-pong examples (``libibverbs/examples``, v44):
``rc_pingpong.c``, ``uc_pingpong.c`` and ``srq_pingpong.c`` differ only in the QP type, the
number of QPs and whether their receives come from one shared SRQ, so one ``Pingpong`` is
parametrized by those. ``pyroce.cli.pingpong`` adds the options, TCP exchange and output, so each
pairs with the real tool on rxe or a NIC.

``pp_connect_ctx`` moves each QP to RTR and RTS with the peer's numbers and a GRH when the peer's
GID has a non-zero interface id; an RC QP also gets max_dest_rd_atomic 1, min_rnr_timer 12,
timeout 14, retry_cnt 7, rnr_retry 7 and max_rd_atomic 1 (``CONNECT``), a UC QP nothing more.
``rx_depth`` receives of ``size`` bytes are posted up front (to the QP, or to the SRQ) and topped
up when ``num_qp`` or fewer are left; the client posts one SEND per QP, and each QP posts its next
SEND once both its previous SEND and a RECV on it have completed, until ``iters`` SENDs and
``iters`` RECVs have completed in all (srq_pingpong's ``-n`` counts all QPs together).

``ud_pingpong.c`` differs in more than a table entry: a Q_Key at INIT, no peer at RTR, an AH
and the peer's QPN in each SEND, 40 bytes of GRH ahead of each receive (its buffer is ``size +
40``, SENDs leave from byte 40), and a size no larger than the port's MTU: ``UdPingpong``
overrides ``to_init``, ``connect`` and ``post_send``.

``-c``: as in the C tools, the client writes 0 at the first byte of every page of its buffer (the
rest is the fill: 0x7b, srq_pingpong's 0) before the first SEND; at the end the buffer holds
whatever was last received and must still be that pattern. The C tools check only the first byte
of each page and only on the server; this one checks every byte on both sides (``bad_pages``).
"""

from __future__ import annotations

import mmap
import socket
from dataclasses import dataclass, field

import pyroce.verbs.enums as e
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.ah import AH
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

PINGPONG_RECV_WRID = 1
PINGPONG_SEND_WRID = 2
MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1  # sizeof msg in the C tools: 52
DONE = b"done\0"
FILL = 0x7B  # memset(ctx->buf, 0x7b, size)
MTU_ENUM = {256: e.ibv_mtu.IBV_MTU_256, 512: e.ibv_mtu.IBV_MTU_512, 1024: e.ibv_mtu.IBV_MTU_1024,
            2048: e.ibv_mtu.IBV_MTU_2048, 4096: e.ibv_mtu.IBV_MTU_4096}  # fmt: skip
QPS = e.ibv_qp_state
QPT = e.ibv_qp_type
MASK = e.ibv_qp_attr_mask


class PingpongError(Exception):
    """A failed step, named as the C tools name it (``Failed to modify QP to RTR``)."""


@dataclass(frozen=True)
class Transitions:
    """What ``pp_connect_ctx`` sets at RTR and at RTS besides the peer's numbers and our PSN."""

    rtr: dict[str, int] = field(default_factory=dict)
    rtr_mask: int = 0
    rts: dict[str, int] = field(default_factory=dict)
    rts_mask: int = 0


CONNECT = {
    QPT.IBV_QPT_RC: Transitions(
        rtr={"max_dest_rd_atomic": 1, "min_rnr_timer": 12},
        rtr_mask=MASK.IBV_QP_MAX_DEST_RD_ATOMIC | MASK.IBV_QP_MIN_RNR_TIMER,
        rts={"timeout": 14, "retry_cnt": 7, "rnr_retry": 7, "max_rd_atomic": 1},
        rts_mask=MASK.IBV_QP_TIMEOUT | MASK.IBV_QP_RETRY_CNT | MASK.IBV_QP_RNR_RETRY | MASK.IBV_QP_MAX_QP_RD_ATOMIC,
    ),
    QPT.IBV_QPT_UC: Transitions(),
}


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


EMPTY_DEST = Dest(0, 0, 0, bytes(16))  # srq_pingpong's unused slots: memset(my_dest, 0, sizeof my_dest)


class Pingpong:
    """``struct pingpong_context`` with ``pp_init_ctx``, ``pp_post_recv``, ``pp_post_send``,
    ``pp_connect_ctx`` and the completion loop, for ``num_qp`` QPs of ``qp_type`` (RC or UC);
    with ``srq``, the QPs take their receives from one SRQ (more than one QP needs it)."""

    GRH = 0  # bytes of each receive before the message (UD's 40-byte GRH)

    def __init__(self, dev_name: str, size: int, rx_depth: int, ib_port: int, qp_type: int = QPT.IBV_QPT_RC,
                 num_qp: int = 1, srq: bool = False, fill: int = FILL) -> None:  # fmt: skip
        if num_qp > 1 and not srq:
            raise PingpongError("more than one QP needs the shared receive queue")
        self.size = size
        self.rx_depth = rx_depth
        self.qp_type = qp_type
        self.num_qp = num_qp
        self.fill = fill
        self.send_flags: int = e.ibv_send_flags.IBV_SEND_SIGNALED
        self.pending = [0] * num_qp
        self.rcnt = self.scnt = self.routs = 0  # RECVs and SENDs completed, receives outstanding
        self.ctx = Context(name=dev_name)
        try:
            self.pd = PD(self.ctx)
            length = size + self.GRH
            self.mr = MR(self.pd, length, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
            self.mr.write(bytes([fill]) * length, length)
            self.cq = CQ(self.ctx, rx_depth + num_qp)
            self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=rx_depth, max_sge=1))) if srq else None
            if self.srq is None:
                cap = QPCap(max_send_wr=1, max_recv_wr=rx_depth, max_send_sge=1, max_recv_sge=1)
            else:
                cap = QPCap(max_send_wr=1, max_recv_wr=0, max_send_sge=1, max_recv_sge=0)
            init = QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq, srq=self.srq, cap=cap)
            self.qps = [QP(self.pd, init) for _ in range(num_qp)]
            for qp in self.qps:
                _, init_attr = qp.query(MASK.IBV_QP_CAP)
                if init_attr.cap.max_inline_data >= size:
                    self.send_flags |= e.ibv_send_flags.IBV_SEND_INLINE
            for i in range(num_qp):
                self.to_init(i, ib_port)
        except BaseException:
            self.ctx.close()
            raise
        self.index = {qp.qp_num: i for i, qp in enumerate(self.qps)}
        self.recv_sge = SGE(self.mr.buf, size + self.GRH, self.mr.lkey)
        self.send_sge = SGE(self.mr.buf + self.GRH, size, self.mr.lkey)

    def close(self) -> None:
        self.ctx.close()

    def name(self, i: int) -> str:
        """``QP`` as rc_pingpong.c names its one QP, ``QP[i]`` as srq_pingpong.c names each."""
        return "QP" if self.num_qp == 1 else f"QP[{i}]"

    def to_init(self, i: int, ib_port: int) -> None:
        attr = QPAttr(qp_state=QPS.IBV_QPS_INIT, port_num=ib_port)
        attr.pkey_index = 0
        attr.qp_access_flags = 0
        mask = MASK.IBV_QP_STATE | MASK.IBV_QP_PKEY_INDEX | MASK.IBV_QP_PORT | MASK.IBV_QP_ACCESS_FLAGS
        try:
            self.qps[i].modify(attr, mask)
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify {self.name(i)} to INIT: {exc}") from None

    def post_recv(self, n: int) -> int:
        """Post ``n`` receives one by one (to the SRQ if there is one); the number posted."""
        receiver = self.srq if self.srq is not None else self.qps[0]
        for i in range(n):
            try:
                receiver.post_recv(RecvWR(wr_id=PINGPONG_RECV_WRID, num_sge=1, sg=[self.recv_sge]))
            except PyverbsError:
                return i
        return n

    def post_send(self, i: int) -> None:
        try:
            self.qps[i].post_send(self.send_wr(i))
        except PyverbsError as exc:
            raise PingpongError(f"Couldn't post send: {exc}") from None

    def send_wr(self, i: int) -> SendWR:
        return SendWR(wr_id=PINGPONG_SEND_WRID, opcode=e.ibv_wr_opcode.IBV_WR_SEND, num_sge=1, sg=[self.send_sge],
                      send_flags=self.send_flags)  # fmt: skip

    def connect(self, port: int, mtu: int, sl: int, my_dests: list[Dest], dests: list[Dest], sgid_idx: int) -> None:
        """``pp_connect_ctx``: QP ``i`` to RTR with ``dests[i]`` and to RTS with ``my_dests[i]``'s PSN."""
        extra = CONNECT[self.qp_type]
        for i, (qp, dest) in enumerate(zip(self.qps, dests)):
            attr = QPAttr(qp_state=QPS.IBV_QPS_RTR, path_mtu=mtu)
            attr.dest_qp_num = dest.qpn
            attr.rq_psn = dest.psn
            for name, value in extra.rtr.items():
                setattr(attr, name, value)
            attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=0)
            if any(dest.gid[8:]):  # dest->gid.global.interface_id
                attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=1,
                                      gr=GlobalRoute(dgid=GID(dest.gid), hop_limit=1, sgid_index=sgid_idx))  # fmt: skip
            try:
                qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_AV | MASK.IBV_QP_PATH_MTU | MASK.IBV_QP_DEST_QPN
                          | MASK.IBV_QP_RQ_PSN | extra.rtr_mask)  # fmt: skip
            except PyverbsError as exc:
                raise PingpongError(f"Failed to modify {self.name(i)} to RTR: {exc}") from None
            attr.qp_state = QPS.IBV_QPS_RTS
            attr.sq_psn = my_dests[i].psn
            for name, value in extra.rts.items():
                setattr(attr, name, value)
            try:
                qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_SQ_PSN | extra.rts_mask)
            except PyverbsError as exc:
                raise PingpongError(f"Failed to modify {self.name(i)} to RTS: {exc}") from None

    def start(self, client: bool) -> None:
        """Each QP waits for a RECV; the client's also sends first."""
        for i in range(self.num_qp):
            self.pending[i] = PINGPONG_RECV_WRID
            if client:
                self.post_send(i)
                self.pending[i] |= PINGPONG_SEND_WRID

    def run(self, iters: int) -> None:
        """The completion loop of ``main``: until ``iters`` SENDs and RECVs have completed."""
        self.rcnt = self.scnt = 0
        batch = self.rx_depth + self.num_qp  # num_wc of srq_pingpong.c
        while self.rcnt < iters or self.scnt < iters:
            n, wcs = self.cq.poll(batch)  # busy polling as the C tools do; the poll runs the engine
            for wc in wcs[:n]:
                self.parse_wc(wc, iters)

    def parse_wc(self, wc: WC, iters: int) -> None:
        """One completion of the loop (rc_pingpong.c's ``parse_single_wc``)."""
        if wc.status != e.ibv_wc_status.IBV_WC_SUCCESS:
            raise PingpongError(f"Failed status {e.ibv_wc_status_str(wc.status)} ({wc.status}) for wr_id {wc.wr_id}")
        i = self.index.get(wc.qp_num)
        if i is None:
            raise PingpongError(f"Couldn't find QPN {wc.qp_num:06x}")
        if wc.wr_id == PINGPONG_SEND_WRID:
            self.scnt += 1
        elif wc.wr_id == PINGPONG_RECV_WRID:
            self.routs -= 1
            if self.routs <= self.num_qp:
                self.routs += self.post_recv(self.rx_depth - self.routs)
                if self.routs < self.rx_depth:
                    raise PingpongError(f"Couldn't post receive ({self.routs})")
            self.rcnt += 1
        else:
            raise PingpongError(f"Completion for unknown wr_id {wc.wr_id}")
        self.pending[i] &= ~wc.wr_id
        if self.scnt < iters and not self.pending[i]:
            self.post_send(i)
            self.pending[i] = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID

    def mark_pages(self) -> None:
        """``-c`` on the client: ``ctx->buf[i] = i / page_size % sizeof(char)``, i.e. 0 per page."""
        for offset in range(0, self.size, mmap.PAGESIZE):
            self.mr.write(b"\0", 1, offset)

    def bad_pages(self) -> list[int]:
        """``-c`` at the end: pages whose bytes are not the client's pattern (0, then the fill)."""
        data = self.mr.read(self.size, 0)
        page = mmap.PAGESIZE
        expected = b"\0" + bytes([self.fill]) * (page - 1)
        bad = []
        for offset in range(0, self.size, page):
            got = data[offset : offset + page]
            if got != expected[: len(got)]:
                bad.append(offset // page)
        return bad


UD_QKEY = 0x11111111  # ud_pingpong.c's Q_Key, at INIT and in every SEND


class UdPingpong(Pingpong):
    """``ud_pingpong.c``: one UD QP, SENDs to an AH made from the peer's GID."""

    GRH = 40

    def __init__(self, dev_name: str, size: int, rx_depth: int, ib_port: int) -> None:
        super().__init__(dev_name, size, rx_depth, ib_port, qp_type=QPT.IBV_QPT_UD)
        try:
            mtu = 128 << int(self.ctx.query_port(ib_port).active_mtu)
        except PyverbsError as exc:
            self.close()
            raise PingpongError(f"Unable to query port info for port {ib_port}: {exc}") from None
        if size > mtu:
            self.close()
            raise PingpongError(f"Requested size larger than port MTU ({mtu})")
        self.ah: AH | None = None
        self.remote_qpn = 0

    def to_init(self, i: int, ib_port: int) -> None:
        attr = QPAttr(qp_state=QPS.IBV_QPS_INIT, port_num=ib_port)
        attr.pkey_index = 0
        attr.qkey = UD_QKEY
        try:
            self.qps[i].modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_PKEY_INDEX | MASK.IBV_QP_PORT | MASK.IBV_QP_QKEY)
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to INIT: {exc}") from None

    def connect(self, port: int, mtu: int, sl: int, my_dests: list[Dest], dests: list[Dest], sgid_idx: int) -> None:
        """``pp_connect_ctx`` of ud_pingpong.c: RTR and RTS (our PSN), then the AH to the peer,
        with a GRH (hop limit 1) when its GID has an interface id."""
        qp, dest = self.qps[0], dests[0]
        try:
            qp.modify(QPAttr(qp_state=QPS.IBV_QPS_RTR), MASK.IBV_QP_STATE)
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTR: {exc}") from None
        attr = QPAttr(qp_state=QPS.IBV_QPS_RTS)
        attr.sq_psn = my_dests[0].psn
        try:
            qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_SQ_PSN)
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTS: {exc}") from None
        ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=0)
        if any(dest.gid[8:]):
            ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=1,
                             gr=GlobalRoute(dgid=GID(dest.gid), hop_limit=1, sgid_index=sgid_idx))  # fmt: skip
        try:
            self.ah = AH(self.pd, attr=ah_attr)
        except PyverbsError as exc:
            raise PingpongError(f"Failed to create AH: {exc}") from None
        self.remote_qpn = dest.qpn

    def send_wr(self, i: int) -> SendWR:
        wr = super().send_wr(i)
        wr.set_wr_ud(self.ah, self.remote_qpn, UD_QKEY)  # type: ignore[arg-type]
        return wr
