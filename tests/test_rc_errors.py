"""RC errors as rxe reports them (rocev2.md): the responder checks before it touches memory,
NAKs, and both sides complete with the right status; nothing outside an MR changes."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import pyroce.verbs.enums as e
from pyroce.ib.reasons import Reason
from pyroce.verbs.cq import CQ
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import ALL_ACCESS, Endpoint, open_endpoint
from tests.waiting import spin_until

S = e.ibv_wc_status
WR = e.ibv_wr_opcode


def rdma(opcode: int, a: Endpoint, length: int, rkey: int, raddr: int, wr_id: int = 5) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=opcode, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    return wr


def snapshot(ep: Endpoint) -> bytes:
    return ep.mr.read(ep.mr.length, 0)


@pytest.mark.parametrize(
    "case",
    ["past the end", "before the start", "wrapping 2**64", "unknown rkey", "stale key byte", "no remote write"],
)
@pytest.mark.embedded_nic  # reads the responder's state in the device model
def test_remote_write_violations_nak_and_change_nothing(pair: tuple[Endpoint, Endpoint], case: str) -> None:
    a, b = pair
    a.mr.write(b"\xaa" * 8192, 8192)
    small = MR(b.pd, 4096, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | e.ibv_access_flags.IBV_ACCESS_REMOTE_READ)
    before_b, before_small = snapshot(b), small.read(4096, 0)
    rkey, raddr, length = b.mr.rkey, b.mr.buf, 4096
    if case == "past the end":
        raddr = b.mr.buf + b.mr.length - 100
    elif case == "before the start":
        raddr = b.mr.buf - 8
    elif case == "wrapping 2**64":
        raddr = (1 << 64) - 16
    elif case == "unknown rkey":
        rkey = b.mr.rkey ^ 0x7F000000
    elif case == "stale key byte":
        rkey = b.mr.rkey ^ 0x01
    else:
        rkey, raddr = small.rkey, small.buf
    a.qp.post_send(rdma(WR.IBV_WR_RDMA_WRITE, a, length, rkey, raddr))
    (done,) = a.poll()
    assert (done.status, done.wr_id) == (S.IBV_WC_REM_ACCESS_ERR, 5)
    assert done.opcode == e.ibv_wc_opcode.IBV_WC_RDMA_WRITE  # the failed WR's own, as rxe reports it
    assert snapshot(b) == before_b and small.read(4096, 0) == before_small
    assert a.qp.ctx.device.qps[a.qp.qp_num].rc.state.name == "ERR"


def test_query_reports_the_error_state_the_nic_moved_the_qp_to(pair: tuple[Endpoint, Endpoint]) -> None:
    """The NIC moves the requester to ERROR on a remote access error; ``query`` and ``qp_state``
    say so (as ibv_query_qp on rxe), not the RTS the QP was last modified to."""
    a, b = pair
    a.qp.post_send(rdma(WR.IBV_WR_RDMA_WRITE, a, 64, b.mr.rkey ^ 0x7F000000, b.mr.buf))
    assert a.poll()[0].status == S.IBV_WC_REM_ACCESS_ERR
    attr, _ = a.qp.query()
    assert (attr.qp_state, attr.cur_qp_state, a.qp.qp_state) == (e.IBV_QPS_ERR,) * 3
    with pytest.raises(PyverbsRDMAError) as refused:  # ERROR -> RTS is not a transition
        a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    assert refused.value.error_code == errno.EINVAL


def test_another_pds_mr_is_out_of_reach(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    other = MR(PD(b.ctx), 4096, ALL_ACCESS)
    other.write(b"\x55" * 4096, 4096)
    a.qp.post_send(rdma(WR.IBV_WR_RDMA_READ, a, 4096, other.rkey, other.buf))
    (done,) = a.poll()
    assert (done.status, done.opcode) == (S.IBV_WC_REM_ACCESS_ERR, e.ibv_wc_opcode.IBV_WC_RDMA_READ)
    assert a.mr.read(4096, 0) != other.read(4096, 0)


def test_read_without_remote_read_access(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    write_only = MR(b.pd, 4096, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | e.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE)
    a.qp.post_send(rdma(WR.IBV_WR_RDMA_READ, a, 64, write_only.rkey, write_only.buf))
    assert a.poll()[0].status == S.IBV_WC_REM_ACCESS_ERR


def test_misaligned_atomic_is_an_invalid_request(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    before = snapshot(b)
    wr = SendWR(wr_id=1, opcode=WR.IBV_WR_ATOMIC_FETCH_AND_ADD, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 4, 1)
    a.qp.post_send(wr)
    assert a.poll()[0].status == S.IBV_WC_REM_INV_REQ_ERR
    assert snapshot(b) == before


def test_receive_buffer_too_small(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    before = snapshot(b)
    b.qp.post_recv(RecvWR(wr_id=3, sg=[SGE(b.mr.buf, 100, b.mr.lkey)]))
    b.qp.post_recv(RecvWR(wr_id=4, sg=[SGE(b.mr.buf + 200, 100, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=9, sg=[SGE(a.mr.buf, 3000, a.mr.lkey)]))
    (sent,) = a.poll()
    assert (sent.status, sent.wr_id) == (S.IBV_WC_REM_INV_REQ_ERR, 9)
    recv, flushed = b.poll(2)
    assert (recv.wr_id, recv.status) == (3, S.IBV_WC_LOC_LEN_ERR)
    assert (flushed.wr_id, flushed.status) == (4, S.IBV_WC_WR_FLUSH_ERR)
    assert snapshot(b)[100:] == before[100:]  # nothing past the 100-byte buffer


def test_bad_lkey_on_the_sender(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    a.qp.post_send(SendWR(wr_id=11, sg=[SGE(a.mr.buf, 10, a.mr.lkey ^ 0xFF)]))
    a.qp.post_send(SendWR(wr_id=12, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))
    first, second = a.poll(2)
    assert (first.wr_id, first.status) == (11, S.IBV_WC_LOC_PROT_ERR)
    assert (second.wr_id, second.status) == (12, S.IBV_WC_WR_FLUSH_ERR)


def test_operation_not_enabled_on_the_responder_qp() -> None:
    a, b = open_endpoint(), open_endpoint()
    try:
        a.connect(b.info())
        b.connect(a.info(), access=e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)  # no remote access on b's QP
        a.qp.post_send(rdma(WR.IBV_WR_RDMA_WRITE, a, 16, b.mr.rkey, b.mr.buf))
        assert a.poll()[0].status == S.IBV_WC_REM_INV_REQ_ERR
    finally:
        a.close()
        b.close()


def test_rnr_retry_exhausted() -> None:
    a, b = open_endpoint(), open_endpoint()
    try:
        a.connect(b.info(), rnr_retry=1)
        b.connect(a.info())
        a.qp.post_send(SendWR(wr_id=1, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))  # b posted no receive
        assert a.poll()[0].status == S.IBV_WC_RNR_RETRY_EXC_ERR
    finally:
        a.close()
        b.close()


def test_failed_completions_explain_themselves(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    bad_rkey = b.mr.rkey ^ 0x7F00
    a.qp.post_send(rdma(WR.IBV_WR_RDMA_WRITE, a, 100, bad_rkey, b.mr.buf))
    a.qp.post_send(SendWR(wr_id=6, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))
    failed, flushed = a.poll(2)
    prefix = f"qp 0x{a.qp.qp_num:x} -> {b.ctx.device.address} qp 0x{b.qp.qp_num:x}: "
    assert failed.vendor_err == Reason.REMOTE_ACCESS
    assert failed.reason == (f"{prefix}remote access error: rkey 0x{bad_rkey:x} va 0x{b.mr.buf:x} len 100 outside "
                             "the peer's MR, another PD's, or without the access it needs")  # fmt: skip
    assert flushed.vendor_err == Reason.FLUSHED and flushed.reason == prefix + Reason.FLUSHED.text


def test_retry_exceeded_names_the_psn_and_the_timer() -> None:
    a, b = open_endpoint(), open_endpoint()
    try:
        a.connect(b.info(), timeout=8)  # 1 ms: seven retries take a few milliseconds
        b.connect(a.info())
        attr, _ = b.qp.query()
        attr.qp_state = e.ibv_qp_state.IBV_QPS_ERR
        b.qp.modify(attr, e.ibv_qp_attr_mask.IBV_QP_STATE)  # the peer stops answering
        a.qp.post_send(SendWR(wr_id=1, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))
        (wc,) = a.poll(1, 30)
        assert (wc.status, wc.vendor_err) == (S.IBV_WC_RETRY_EXC_ERR, Reason.ACK_TIMEOUT)
        assert wc.reason.endswith(f"no ACK for PSN 0x{a.psn:06x} after 7 retries at timeout 8 (1 ms each): "
                                  "peer unreachable or not in RTR")  # fmt: skip
        assert a.ctx.device.stats()["retry_exceeded_err"] >= 1
    finally:
        a.close()
        b.close()


def test_receiver_side_length_error_says_how_long(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    b.qp.post_recv(RecvWR(wr_id=3, sg=[SGE(b.mr.buf, 100, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=9, sg=[SGE(a.mr.buf, 3000, a.mr.lkey)]))
    (recv,) = b.poll()
    assert (recv.status, recv.vendor_err) == (S.IBV_WC_LOC_LEN_ERR, Reason.RECV_TOO_SHORT)
    assert recv.reason.endswith("incoming SEND of at least 1024 bytes is longer than the 100-byte receive buffer")


def test_every_reason_code_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    for reason in Reason:
        if reason is not Reason.NONE:
            assert f"| {int(reason)} | `{reason.name}` |" in doc


def test_packets_for_a_destroyed_qp_are_dropped_and_counted() -> None:
    a, b = open_endpoint(), open_endpoint()
    try:
        a.connect(b.info(), timeout=8)
        b.connect(a.info())
        b.qp.close()
        a.qp.post_send(SendWR(wr_id=1, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))
        assert a.poll(1, 30)[0].status == S.IBV_WC_RETRY_EXC_ERR
        assert a.ctx.device.stats()["drop_unknown_qpn"] >= 8  # the first try and seven retries
    finally:
        a.close()
        b.close()


def test_a_cq_overrun_loses_the_cqe_and_is_counted(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    small_cq = CQ(a.ctx, 1)  # room for 2 CQEs
    qp = QP(a.pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=small_cq, rcq=small_cq, cap=QPCap(max_send_wr=8)))
    sender = Endpoint(a.ctx, a.pd, small_cq, qp, a.mr, a.psn)
    target = Endpoint(b.ctx, b.pd, b.cq, QP(b.pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=b.cq, rcq=b.cq)),
                      b.mr, b.psn)  # fmt: skip
    sender.connect(target.info())
    target.connect(sender.info())
    before = a.ctx.device.stats().get("cq_overflow", 0)
    for index in range(5):  # five signaled completions for a CQ of two, none polled
        wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        qp.post_send(wr)
    spin_until(lambda: a.ctx.device.stats().get("cq_overflow", 0) - before >= 3, "3 CQ overflows", a.ctx.device.kick)
    assert a.ctx.device.stats()["cq_overflow"] - before == 3
    assert [wc.wr_id for wc in sender.poll(2)] == [0, 1]  # the first two made it; the rest were lost
    for index in (5, 6):  # polled: the consumer record moved, and the NIC sees the room again
        wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        qp.post_send(wr)
    assert [wc.wr_id for wc in sender.poll(2)] == [5, 6]
    assert a.ctx.device.stats()["cq_overflow"] - before == 3
