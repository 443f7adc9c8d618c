"""Memory windows and MR.rereg, observed from the remote side of an RC pair: what a window
grants a peer, what it refuses (REM_ACCESS_ERR, nothing written), and the errnos of misuse."""

from __future__ import annotations

import errno

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.mr import MR
from pyroce.verbs.mw import MW, MWBind, MWBindInfo
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import ALL_ACCESS, Endpoint

A = e.ibv_access_flags
S = e.ibv_wc_status
WR = e.ibv_wr_opcode
BINDABLE = ALL_ACCESS | A.IBV_ACCESS_MW_BIND


def write(a: Endpoint, rkey: int, raddr: int, length: int, data: bytes = b"\x5a") -> int:
    """RDMA WRITE ``length`` bytes of ``data`` from a to ``raddr``; the completion status."""
    a.mr.write(data * length, length)
    wr = SendWR(wr_id=7, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    a.qp.post_send(wr)
    (done,) = a.poll()
    return int(done.status)


def bound_window(b: Endpoint, mr: MR, offset: int, length: int, access: int = A.IBV_ACCESS_REMOTE_WRITE) -> MW:
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf + offset, length, access), e.ibv_send_flags.IBV_SEND_SIGNALED))
    return mw


def test_a_window_grants_its_range_only(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 8192, BINDABLE)
    mw = bound_window(b, mr, 1024, 2048)
    assert mw.rkey != mr.rkey
    assert write(a, mw.rkey, mr.buf + 1024, 2048) == S.IBV_WC_SUCCESS
    assert mr.read(8192, 0) == bytes(1024) + b"\x5a" * 2048 + bytes(5120)
    assert write(a, mw.rkey, mr.buf + 2048, 2048, b"\x11") == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(8192, 0) == bytes(1024) + b"\x5a" * 2048 + bytes(5120)


def test_a_window_grants_only_its_access(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = bound_window(b, mr, 0, 4096, A.IBV_ACCESS_REMOTE_READ)
    assert write(a, mw.rkey, mr.buf, 64) == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == bytes(4096)


def test_local_write_in_a_bind_is_taken_and_grants_no_peer_anything(pair: tuple[Endpoint, Endpoint]) -> None:
    """rxe takes IBV_ACCESS_LOCAL_WRITE in a bind (rdma-core's tests ask it); a window's key
    is only ever an rkey, so what it grants a peer is the remote part alone."""
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    both = bound_window(b, mr, 0, 2048, A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE)
    local = bound_window(b, mr, 2048, 2048, A.IBV_ACCESS_LOCAL_WRITE)
    assert write(a, both.rkey, mr.buf, 64) == S.IBV_WC_SUCCESS
    assert write(a, local.rkey, mr.buf + 2048, 64, b"\x11") == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == b"\x5a" * 64 + bytes(4032)


def test_a_window_grants_nothing_once_unbound_or_its_mr_is_gone(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = bound_window(b, mr, 0, 4096)
    mr.close()
    assert write(a, mw.rkey, mr.buf, 64) == S.IBV_WC_REM_ACCESS_ERR


def test_rebinding_changes_the_key(pair: tuple[Endpoint, Endpoint]) -> None:
    _, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = bound_window(b, mr, 0, 4096)
    first = mw.rkey
    b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf, 0, 0), e.ibv_send_flags.IBV_SEND_SIGNALED))
    assert mw.rkey >> 8 == first >> 8 and mw.rkey != first


@pytest.mark.parametrize("case", ["no MW_BIND", "beyond the MR", "another PD", "type 2", "remote write, no local",
                                  "zero-based"])  # fmt: skip
def test_refused_binds_are_einval(pair: tuple[Endpoint, Endpoint], case: str) -> None:
    _, b = pair
    mr = MR(b.pd, 4096, ALL_ACCESS if case == "no MW_BIND" else BINDABLE)
    if case == "remote write, no local":
        mr = MR(b.pd, 4096, A.IBV_ACCESS_REMOTE_READ | A.IBV_ACCESS_MW_BIND)
    pd = PD(b.ctx) if case == "another PD" else b.pd
    mw_type = e.ibv_mw_type.IBV_MW_TYPE_2 if case == "type 2" else e.ibv_mw_type.IBV_MW_TYPE_1
    mw = MW(pd, mw_type)
    length = 8192 if case == "beyond the MR" else 4096
    zero_based = A.IBV_ACCESS_ZERO_BASED if case == "zero-based" else 0
    info = MWBindInfo(mr, mr.buf, length, A.IBV_ACCESS_REMOTE_WRITE | zero_based)
    with pytest.raises(PyverbsRDMAError) as raised:
        b.qp.bind_mw(mw, MWBind(info, e.ibv_send_flags.IBV_SEND_SIGNALED))
    assert raised.value.error_code == errno.EINVAL


def test_rereg_changes_access(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 4096, A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_READ)
    mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_ACCESS, access=ALL_ACCESS)
    assert write(a, mr.rkey, mr.buf, 64) == S.IBV_WC_SUCCESS
    assert mr.read(64, 0) == b"\x5a" * 64


def test_rereg_can_take_access_away(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    b.mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_ACCESS, access=A.IBV_ACCESS_LOCAL_WRITE)
    assert write(a, b.mr.rkey, b.mr.buf, 64) == S.IBV_WC_REM_ACCESS_ERR
    assert b.mr.read(64, 0) == bytes(64)


def test_rereg_to_another_pd_puts_the_mr_out_of_reach(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    b.mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_PD, pd=PD(b.ctx))
    assert write(a, b.mr.rkey, b.mr.buf, 64) == S.IBV_WC_REM_ACCESS_ERR


def test_rereg_to_new_memory_keeps_the_key(pair: tuple[Endpoint, Endpoint]) -> None:
    """A new translation: the same rkey now reaches the new buffer, and only its length."""
    a, b = pair
    mr = MR(b.pd, 4096, ALL_ACCESS)
    rkey, old = mr.rkey, mr.buf
    fresh = bytearray(256)
    mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, addr=fresh, length=256)
    assert (mr.rkey, mr.length) == (rkey, 256) and mr.buf != old
    assert write(a, rkey, mr.buf, 64) == S.IBV_WC_SUCCESS
    assert bytes(fresh) == b"\x5a" * 64 + bytes(192)
    assert write(a, rkey, mr.buf + 250, 64) == S.IBV_WC_REM_ACCESS_ERR  # past the new length


def test_rereg_to_new_memory_is_refused_while_a_window_is_bound(pair: tuple[Endpoint, Endpoint]) -> None:
    _, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = bound_window(b, mr, 0, 1024)
    with pytest.raises(PyverbsRDMAError) as raised:
        mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, addr=bytearray(64), length=64)
    assert raised.value.error_code == errno.EINVAL
    mw.close()
    mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, addr=bytearray(64), length=64)


@pytest.mark.parametrize(("flags", "access", "code"), [
    (e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, 0, errno.EINVAL),  # no address, no length
    (1 << 3, 0, errno.EINVAL),
    (e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_ACCESS, A.IBV_ACCESS_REMOTE_WRITE, errno.EINVAL),
])  # fmt: skip
def test_rereg_misuse(pair: tuple[Endpoint, Endpoint], flags: int, access: int, code: int) -> None:
    _, b = pair
    with pytest.raises(PyverbsRDMAError) as raised:
        b.mr.rereg(flags, access=access)
    assert raised.value.error_code == code


def bind_type2(b: Endpoint, mw: MW, mr: MR, offset: int, length: int, wr_id: int = 9) -> int:
    """Post an IBV_WR_BIND_MW on b's send queue; its completion status."""
    wr = SendWR(wr_id=wr_id, opcode=WR.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf + offset, length, A.IBV_ACCESS_REMOTE_WRITE))
    b.qp.post_send(wr)
    (done,) = b.poll()
    assert done.wr_id == wr_id
    if done.status == S.IBV_WC_SUCCESS:
        assert done.opcode == e.ibv_wc_opcode.IBV_WC_BIND_MW
    return int(done.status)


def test_an_unbound_type2_window_grants_nothing(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_2)
    assert write(a, mw.rkey, mr.buf, 64) == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == bytes(4096)


@pytest.fixture
def bound2(pair: tuple[Endpoint, Endpoint]) -> tuple[Endpoint, Endpoint, MR, MW]:
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_2)
    old = mw.rkey
    assert bind_type2(b, mw, mr, 1024, 1024) == S.IBV_WC_SUCCESS
    assert mw.rkey != old and mw.rkey >> 8 == old >> 8
    return a, b, mr, mw


def test_a_type2_window_grants_its_range(bound2: tuple[Endpoint, Endpoint, MR, MW]) -> None:
    a, _, mr, mw = bound2
    assert write(a, mw.rkey, mr.buf + 1024, 1024) == S.IBV_WC_SUCCESS
    assert mr.read(4096, 0) == bytes(1024) + b"\x5a" * 1024 + bytes(2048)
    assert write(a, mw.rkey, mr.buf, 64, b"\x11") == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == bytes(1024) + b"\x5a" * 1024 + bytes(2048)


def test_local_inv_takes_the_window_back(bound2: tuple[Endpoint, Endpoint, MR, MW]) -> None:
    a, b, mr, mw = bound2
    inv = SendWR(wr_id=3, opcode=WR.IBV_WR_LOCAL_INV)
    inv.invalidate_rkey = mw.rkey
    b.qp.post_send(inv)
    (done,) = b.poll()
    assert (done.status, done.wr_id, done.opcode) == (S.IBV_WC_SUCCESS, 3, e.ibv_wc_opcode.IBV_WC_LOCAL_INV)
    assert write(a, mw.rkey, mr.buf + 1024, 64) == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == bytes(4096)


def test_a_peers_send_with_invalidate_takes_the_window_back(bound2: tuple[Endpoint, Endpoint, MR, MW]) -> None:
    a, b, mr, mw = bound2
    b.qp.post_recv(RecvWR(wr_id=4, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    send = SendWR(wr_id=6, opcode=WR.IBV_WR_SEND_WITH_INV, sg=[SGE(a.mr.buf, 16, a.mr.lkey)])
    send.invalidate_rkey = mw.rkey
    a.qp.post_send(send)
    (sent,) = a.poll()
    (received,) = b.poll()
    assert (sent.status, received.status, received.wr_id) == (S.IBV_WC_SUCCESS, S.IBV_WC_SUCCESS, 4)
    assert received.wc_flags & e.ibv_wc_flags.IBV_WC_WITH_INV
    assert write(a, mw.rkey, mr.buf + 1024, 64) == S.IBV_WC_REM_ACCESS_ERR
    assert mr.read(4096, 0) == bytes(4096)


def test_send_with_invalidate_of_an_mr_is_refused(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    b.qp.post_recv(RecvWR(wr_id=4, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    send = SendWR(wr_id=6, opcode=WR.IBV_WR_SEND_WITH_INV, sg=[SGE(a.mr.buf, 16, a.mr.lkey)])
    send.invalidate_rkey = b.mr.rkey
    a.qp.post_send(send)
    (sent,) = a.poll()
    assert sent.status == S.IBV_WC_REM_INV_REQ_ERR


def test_a_bind_beyond_the_mr_fails_the_work_request(pair: tuple[Endpoint, Endpoint]) -> None:
    _, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_2)
    assert bind_type2(b, mw, mr, 2048, 4096) == S.IBV_WC_MW_BIND_ERR


def test_a_bind_waits_for_the_work_before_it(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    mr = MR(b.pd, 4096, BINDABLE)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_2)
    first = SendWR(wr_id=1, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)])
    first.set_wr_rdma(a.mr.rkey, a.mr.buf)
    bind = SendWR(wr_id=2, opcode=WR.IBV_WR_BIND_MW)
    bind.set_bind_wr(mw, MWBindInfo(mr, mr.buf, 4096, A.IBV_ACCESS_REMOTE_WRITE))
    first.next_wr = bind
    b.qp.post_send(first)
    assert [(wc.wr_id, wc.status) for wc in b.poll(2)] == [(1, S.IBV_WC_SUCCESS), (2, S.IBV_WC_SUCCESS)]
    assert write(a, mw.rkey, mr.buf, 64) == S.IBV_WC_SUCCESS


def test_a_window_type_that_does_not_exist_is_einval(pair: tuple[Endpoint, Endpoint]) -> None:
    _, b = pair
    with pytest.raises(PyverbsRDMAError) as raised:
        MW(b.pd, 3)
    assert raised.value.error_code == errno.EINVAL


def test_local_inv_of_a_type1_window_fails_the_work_request(pair: tuple[Endpoint, Endpoint]) -> None:
    _, b = pair
    mw = bound_window(b, MR(b.pd, 4096, BINDABLE), 0, 4096)
    inv = SendWR(wr_id=3, opcode=WR.IBV_WR_LOCAL_INV)
    inv.invalidate_rkey = mw.rkey
    b.qp.post_send(inv)
    (done,) = b.poll()
    assert (done.status, done.wr_id) == (S.IBV_WC_LOC_QP_OP_ERR, 3)


def test_a_bound_type2_window_is_not_bound_again(bound2: tuple[Endpoint, Endpoint, MR, MW]) -> None:
    _, b, mr, mw = bound2
    assert bind_type2(b, mw, mr, 0, 1024) == S.IBV_WC_MW_BIND_ERR


def test_a_window_key_is_no_local_key(bound2: tuple[Endpoint, Endpoint, MR, MW]) -> None:
    """A window's key is an R_Key: a local SGE naming it fails (LOC_PROT_ERR), its bytes unread."""
    _, b, mr, mw = bound2
    mr.write(b"secret", 6, 1024)
    b.qp.post_send(SendWR(wr_id=9, sg=[SGE(mr.buf + 1024, 6, mw.rkey)]))
    (done,) = b.poll()
    assert (done.wr_id, done.status) == (9, S.IBV_WC_LOC_PROT_ERR)
