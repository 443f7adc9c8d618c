"""UD through the verbs API in one process: datagrams to an AH, the 40 bytes of network header
at the start of every receive buffer, the WC's GRH flag and source QP, answering with an AH
made from the WC, Q_Keys (a wrong one dropped and counted, the controlled Q_Key), and what
goes wrong staying with its WR or its datagram: an oversize send, a datagram longer than the
receive buffer, a send without an AH, RDMA on UD."""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.host.assembly import build_device
from pyroce.ib.reasons import Reason
from pyroce.link.memory import MemoryWire
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.ah import AH
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from pyroce.wire.framing import ipv4_checksum
from tests.rc_pair import Endpoint, open_endpoint
from tests.test_sqd import next_event, to_sqd
from tests.test_verbs_api import raises_errno
from tests.waiting import spin_until

UD = e.ibv_qp_type.IBV_QPT_UD
QKEY = 0x11111111
GRH = 40
RECV_AT = 1 << 20  # receive buffers start here in the MR; sends are taken from offset 0
SLOT = 8192  # bytes per receive buffer


def ud_endpoint(qkey: int = QKEY) -> Endpoint:
    ep = open_endpoint(qp_type=UD)
    attr = QPAttr(port_num=1)
    attr.qkey = qkey
    attr.sq_psn = ep.psn
    ep.qp.to_rts(attr)
    return ep


def ah_to(src: Endpoint, gid: bytes) -> AH:
    route = GlobalRoute(dgid=GID(gid), sgid_index=3)
    return AH(src.pd, attr=AHAttr(port_num=1, is_global=1, gr=route))


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = ud_endpoint(), ud_endpoint()
    yield a, b
    a.close()
    b.close()


def post_recvs(ep: Endpoint, count: int, size: int = SLOT) -> None:
    for i in range(count):
        ep.qp.post_recv(RecvWR(wr_id=100 + i, sg=[SGE(ep.mr.buf + RECV_AT + i * SLOT, size, ep.mr.lkey)]))


def send(a: Endpoint, ah: AH, dqpn: int, size: int, wr_id: int = 1, qkey: int = QKEY,
         imm: int | None = None) -> None:  # fmt: skip
    opcode = e.ibv_wr_opcode.IBV_WR_SEND if imm is None else e.ibv_wr_opcode.IBV_WR_SEND_WITH_IMM
    wr = SendWR(wr_id=wr_id, opcode=opcode, sg=[SGE(a.mr.buf, size, a.mr.lkey)], imm_data=imm or 0)
    wr.set_wr_ud(ah, dqpn, qkey)
    a.qp.post_send(wr)


@pytest.mark.parametrize("size", [0, 1, 100, 1023, 1024])
@pytest.mark.parametrize("imm", [None, 0x12345678])
def test_datagram_lands_after_40_bytes_of_ipv4_header(pair: tuple[Endpoint, Endpoint], size: int,
                                                       imm: int | None) -> None:  # fmt: skip
    a, b = pair
    payload = bytes((i * 7 + size) & 0xFF for i in range(size))
    a.mr.write(payload, size, 0)
    post_recvs(b, 1)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, size, imm=imm)
    (sent,) = a.poll()
    assert sent.status == e.ibv_wc_status.IBV_WC_SUCCESS and sent.opcode == e.ibv_wc_opcode.IBV_WC_SEND
    (wc,) = b.poll()
    assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS, wc
    assert wc.opcode == e.ibv_wc_opcode.IBV_WC_RECV and wc.wr_id == 100
    assert wc.byte_len == GRH + size
    assert wc.src_qp == a.qp.qp_num
    assert wc.wc_flags & e.ibv_wc_flags.IBV_WC_GRH
    assert bool(wc.wc_flags & e.ibv_wc_flags.IBV_WC_WITH_IMM) == (imm is not None)
    buffer = b.mr.read(GRH + size, RECV_AT)
    assert buffer[GRH:] == payload
    ipv4 = buffer[20:40]  # RoCEv2/IPv4: 20 bytes unused, then the IPv4 header
    assert buffer[:20] == bytes(20)
    assert ipv4[0] == 0x45 and ipv4[9] == 17 and ipv4_checksum(ipv4) == 0
    assert int.from_bytes(ipv4[2:4], "big") == 20 + 8 + 12 + 8 + (4 if imm is not None else 0) + size + (-size & 3) + 4
    source = ipaddress.IPv6Address(a.info().gid).ipv4_mapped
    assert ipv4[12:16] == source.packed  # type: ignore[union-attr]


def test_a_datagram_finds_the_receive_its_doorbell_record_holds_before_the_doorbell_is_taken(
        pair: tuple[Endpoint, Endpoint], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The receive WQE is in the ring and the doorbell record moved past it, but the doorbell's
    wake-up has not reached the NIC (a C driver's waits in the doorbell pipe): the datagram
    that needs it still lands, not dropped for want of a WQE."""
    a, b = pair
    monkeypatch.setattr(b.qp.device, "note_receives", lambda qpn: None)
    post_recvs(b, 1)
    a.mr.write(b"early", 5, 0)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 5)
    a.poll()
    (wc,) = b.poll()
    assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS and wc.wr_id == 100, wc
    assert b.mr.read(5, RECV_AT + GRH) == b"early"


def test_reply_through_an_ah_made_from_the_wc(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    post_recvs(b, 1)
    post_recvs(a, 1)
    a.mr.write(b"ping", 4, 0)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 4)
    a.poll()
    (wc,) = b.poll()
    reply_ah = AH(b.pd, wc=wc, grh=b.mr.buf + RECV_AT, port_num=1)
    assert reply_ah.dgid == GID(a.info().gid)
    assert reply_ah.attr.gr.hop_limit == 64 and reply_ah.attr.gr.sgid_index == 3  # RoCE v2 over the address
    b.mr.write(b"pong", 4, 0)
    send(b, reply_ah, a.qp.qp_num, 4, qkey=QKEY)
    b.poll()
    (back,) = a.poll()
    assert back.src_qp == b.qp.qp_num and a.mr.read(4, RECV_AT + GRH) == b"pong"


def test_ah_from_a_wc_needs_its_header_in_registered_memory(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    post_recvs(b, 1)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 4)
    a.poll()
    (wc,) = b.poll()
    with raises_errno(errno.EINVAL):
        AH(b.pd, wc=wc, grh=b.mr.buf + b.mr.length - 8, port_num=1)  # 40 bytes from there leave the MR
    wc.wc_flags = 0
    with raises_errno(errno.EINVAL):
        AH(b.pd, wc=wc, grh=b.mr.buf + RECV_AT, port_num=1)


def test_wrong_qkey_is_dropped_and_counted(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    before = b.ctx.device.qp_stats(b.qp.qp_num).get("drop_qkey", 0)
    port_before = b.ctx.query_port(1).qkey_viol_cntr
    post_recvs(b, 1)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 8, wr_id=1, qkey=QKEY + 1)
    a.poll()  # the sender cannot know: UD is unacknowledged
    spin_until(lambda: b.ctx.device.qp_stats(b.qp.qp_num).get("drop_qkey", 0) == before + 1, "the Q_Key drop counted")
    assert b.ctx.query_port(1).qkey_viol_cntr == port_before + 1  # the port's Q_Key violation counter too
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 8, wr_id=2)  # the receive WQE is still there for the right Q_Key
    a.poll()
    (wc,) = b.poll()
    assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS and wc.byte_len == GRH + 8


def test_controlled_qkey_sends_the_qps_own() -> None:
    a, b = ud_endpoint(qkey=0x0BADCAFE), ud_endpoint(qkey=0x0BADCAFE)
    try:
        post_recvs(b, 1)
        send(a, ah_to(a, b.info().gid), b.qp.qp_num, 8, qkey=0x80000000)  # top bit: "use the sending QP's Q_Key"
        a.poll()
        (wc,) = b.poll()
        assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS
    finally:
        a.close()
        b.close()


def test_oversize_send_fails_that_wr_and_the_qp_goes_on(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mtu = 128 << int(a.ctx.active_mtu)
    post_recvs(b, 1)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, mtu + 1, wr_id=7)
    (failed,) = a.poll()
    assert failed.wr_id == 7 and failed.status == e.ibv_wc_status.IBV_WC_LOC_LEN_ERR
    assert failed.vendor_err == Reason.UD_TOO_LONG
    assert a.qp.query()[0].qp_state == e.ibv_qp_state.IBV_QPS_RTS
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, mtu, wr_id=8)
    (ok,) = a.poll()
    assert ok.wr_id == 8 and ok.status == e.ibv_wc_status.IBV_WC_SUCCESS
    (wc,) = b.poll()
    assert wc.byte_len == GRH + mtu


def test_datagram_longer_than_the_receive_buffer_is_dropped_not_written_past(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    guard = RECV_AT + GRH + 16
    b.mr.write(b"\xee" * 64, 64, guard)
    before = b.ctx.device.qp_stats(b.qp.qp_num).get("drop_ud_too_long", 0)
    post_recvs(b, 1, size=GRH + 16)
    a.mr.write(b"\x11" * 64, 64, 0)
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 17)
    a.poll()
    spin_until(lambda: b.ctx.device.qp_stats(b.qp.qp_num).get("drop_ud_too_long", 0) == before + 1, "the drop counted")
    assert b.mr.read(64, guard) == b"\xee" * 64
    send(a, ah_to(a, b.info().gid), b.qp.qp_num, 16)  # the WQE was left for a datagram that fits
    a.poll()
    (wc,) = b.poll()
    assert wc.byte_len == GRH + 16 and wc.status == e.ibv_wc_status.IBV_WC_SUCCESS


def test_max_inline_data_is_what_the_wqe_holds_and_inline_is_copied_at_post(pair: tuple[Endpoint, Endpoint]) -> None:
    """A UD QP that asked for 64 inline bytes has WQEs of three basic blocks, which hold 124:
    the QP reports 124 (as libmlx5's ``calc_sq_size``) and takes 124. Programs size their
    inline sends by it: UCX sends its 65-byte connection request inline, copied at post; sent
    from its buffer instead, the NIC read it after UCX had reused the buffer for another
    peer's message (a datagram with another process's endpoint: four MPI ranks crashed)."""
    a, b = pair
    limit = a.qp.query()[0].cap.max_inline_data
    assert limit == 124
    payload = bytes(range(limit))
    a.mr.write(payload, limit, 0)
    post_recvs(b, 1)
    inline = e.ibv_send_flags.IBV_SEND_INLINE | e.ibv_send_flags.IBV_SEND_SIGNALED
    wr = SendWR(wr_id=7, sg=[SGE(a.mr.buf, limit, a.mr.lkey)], send_flags=inline)
    wr.set_wr_ud(ah_to(a, b.info().gid), b.qp.qp_num, QKEY)
    a.qp.post_send(wr)
    a.mr.write(bytes(limit), limit, 0)  # the buffer reused at once: the WQE holds the datagram
    (sent,) = a.poll()
    assert sent.status == e.ibv_wc_status.IBV_WC_SUCCESS
    (wc,) = b.poll()
    assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS and wc.byte_len == GRH + limit
    assert b.mr.read(limit, RECV_AT + GRH) == payload
    wr = SendWR(wr_id=8, sg=[SGE(a.mr.buf, limit + 1, a.mr.lkey)], send_flags=inline)
    wr.set_wr_ud(ah_to(a, b.info().gid), b.qp.qp_num, QKEY)
    with raises_errno(errno.EINVAL):
        a.qp.post_send(wr)


def test_misuse_is_refused_at_post(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    wr = SendWR(wr_id=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    with raises_errno(errno.EINVAL):  # no AH
        a.qp.post_send(wr)
    for opcode in (e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, e.ibv_wr_opcode.IBV_WR_RDMA_READ,
                   e.ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD):  # fmt: skip
        wr = SendWR(wr_id=2, opcode=opcode, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_ud(ah_to(a, b.info().gid), b.qp.qp_num, QKEY)
        with raises_errno(errno.EINVAL):
            a.qp.post_send(wr)
    assert a.qp.query()[0].qp_state == e.ibv_qp_state.IBV_QPS_RTS


def test_ah_on_an_rc_qp_is_refused() -> None:
    rc = open_endpoint()
    try:
        ud = ud_endpoint()
        try:
            attr = QPAttr(port_num=1)
            rc.qp.to_init(attr)
            wr = SendWR(wr_id=1, sg=[SGE(rc.mr.buf, 8, rc.mr.lkey)])
            wr.set_wr_ud(ah_to(rc, ud.info().gid), ud.qp.qp_num, QKEY)
            attr.qp_state = e.ibv_qp_state.IBV_QPS_INIT
            with raises_errno(errno.EINVAL):
                rc.qp.post_send(wr)
        finally:
            ud.close()
    finally:
        rc.close()


def test_ah_needs_a_grh_and_a_reachable_gid() -> None:
    ep = ud_endpoint()
    try:
        with raises_errno(errno.EINVAL):
            AH(ep.pd, attr=AHAttr(port_num=1, is_global=0))
        with raises_errno(errno.EINVAL):
            AH(ep.pd, attr=AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(ep.info().gid), sgid_index=5)))
        for gid in ("fe80::1", "fd00::5"):  # link-local; IPv6, which this IPv4 device's link does not carry
            with raises_errno(errno.EOPNOTSUPP):
                AH(ep.pd, attr=AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(gid))))
    finally:
        ep.close()


def test_several_senders_to_one_qp(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    c = ud_endpoint()
    try:
        post_recvs(b, 2)
        send(a, ah_to(a, b.info().gid), b.qp.qp_num, 8)
        send(c, ah_to(c, b.info().gid), b.qp.qp_num, 8)
        a.poll()
        c.poll()
        sources = {wc.src_qp for wc in b.poll(2)}
        assert sources == {a.qp.qp_num, c.qp.qp_num}
    finally:
        c.close()


def test_ud_qps_take_their_receives_from_one_srq(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    receiver = ud_endpoint()
    try:
        srq = SRQ(receiver.pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
        qps = []
        for _ in range(2):
            cq = CQ(receiver.ctx, 8)
            qp = QP(receiver.pd, QPInitAttr(qp_type=UD, scq=cq, rcq=cq, srq=srq, cap=QPCap(max_send_wr=4)))
            attr = QPAttr(port_num=1)
            attr.qkey, attr.sq_psn = QKEY, 0
            qp.to_rts(attr)
            qps.append((qp, cq))
        for i in range(4):
            srq.post_recv(RecvWR(wr_id=200 + i, sg=[SGE(receiver.mr.buf + RECV_AT + i * SLOT, SLOT, receiver.mr.lkey)]))
        ah = ah_to(a, receiver.info().gid)
        order = [0, 1, 1, 0]
        for k, index in enumerate(order):
            a.mr.write(bytes([k]) * 8, 8, 0)
            wr = SendWR(wr_id=k, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
            wr.set_wr_ud(ah, qps[index][0].qp_num, QKEY)
            a.qp.post_send(wr)
            a.poll()
            qp, cq = qps[index]
            got: list = []
            spin_until(lambda cq=cq, got=got: got.extend(cq.poll(1)[1]) or got, "the receive completion")
            (wc,) = got
            assert (wc.wr_id, wc.qp_num, wc.src_qp) == (200 + k, qp.qp_num, a.qp.qp_num)  # the SRQ's WQEs in order
            assert receiver.mr.read(8, RECV_AT + k * SLOT + GRH) == bytes([k]) * 8
    finally:
        receiver.close()


def test_sqd_drains_a_ud_qp_at_once_and_resumes() -> None:
    """A UD send is done once it leaves: RTS -> SQD raises SQ_DRAINED at once; a send posted in
    SQD waits for SQD -> RTS."""
    a, b = ud_endpoint(), ud_endpoint()
    try:
        to_sqd(a)
        assert next_event(a) == (e.ibv_event_type.IBV_EVENT_SQ_DRAINED, a.qp.qp_num)
        assert a.qp.query()[0].sq_draining == 0
        post_recvs(b, 1)
        send(a, ah_to(a, b.info().gid), b.qp.qp_num, 8)
        a.ctx.device.kick()
        assert a.cq.poll(1)[1] == []  # waits in SQD
        a.qp.modify(QPAttr(qp_state=e.ibv_qp_state.IBV_QPS_RTS), e.ibv_qp_attr_mask.IBV_QP_STATE)
        (sent,) = a.poll()
        assert sent.status == e.ibv_wc_status.IBV_WC_SUCCESS
        (wc,) = b.poll()
        assert wc.byte_len == GRH + 8
    finally:
        a.close()
        b.close()


def test_a_datagram_posted_just_before_its_qp_is_destroyed_is_sent() -> None:
    """A NIC fetches WQEs as the doorbell arrives, so a program that posts its last datagrams and
    tears its QP down at once (mckey's sender) has sent them. In host mode nothing runs between
    the post and the destroy: the destroy itself sends them."""
    wire = MemoryWire()
    devices = [build_device(f"ud-{i}", wire.link(f"10.4.0.{i + 1}"), progress="host") for i in range(2)]
    sender, receiver = (RcEndpoint.open(2 * RECV_AT, qp_type=UD, context=Context(device=device)) for device in devices)
    for endpoint in (sender, receiver):
        attr = QPAttr(port_num=1)
        attr.qkey, attr.sq_psn = QKEY, endpoint.psn
        endpoint.qp.to_rts(attr)
    post_recvs(receiver, 1)
    sender.mr.write(b"last words", 10, 0)
    send(sender, ah_to(sender, receiver.ctx.query_gid(1, 3).raw), receiver.qp.qp_num, 10)
    sender.qp.close()
    for device in devices:
        device.step(0.0)
    count, wcs = receiver.cq.poll(1)
    assert count == 1 and wcs[0].status == e.ibv_wc_status.IBV_WC_SUCCESS and wcs[0].byte_len == GRH + 10, wcs
    assert receiver.mr.read(10, RECV_AT + GRH) == b"last words"
    for endpoint in (sender, receiver):
        endpoint.close()
    for device in devices:
        device.close()
