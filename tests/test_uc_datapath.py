"""UC through the verbs API in one process: SEND and RDMA WRITE (with immediate) around the
path MTU and at 1 MiB, the completion fields, and what a UC QP refuses (READ, atomics, SEND with
invalidate at post; RC-only attributes at modify)."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.qp import QPAttr
from pyroce.verbs.wr import RecvWR, SendWR
from tests.rc_pair import Endpoint, connected_pair
from tests.test_rc_datapath import OK, SIZES, WC, WR, fill, gathered, sges
from tests.test_verbs_api import raises_errno
from tests.waiting import spin_until

UC = e.ibv_qp_type.IBV_QPT_UC


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = connected_pair(qp_type=UC)
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("with_imm", [False, True])
def test_send(pair: tuple[Endpoint, Endpoint], size: int, with_imm: bool) -> None:
    a, b = pair
    fill(a)
    src, dst = sges(a, 0, size, 3), sges(b, 0, size + 100, 1)
    b.qp.post_recv(RecvWR(wr_id=0xB0B, sg=dst))
    opcode = WR.IBV_WR_SEND_WITH_IMM if with_imm else WR.IBV_WR_SEND
    a.qp.post_send(SendWR(wr_id=0xA11, opcode=opcode, imm_data=0xDEADBEEF, sg=src))
    (sent,) = a.poll()
    (recv,) = b.poll()
    assert (sent.status, sent.opcode, sent.wr_id, sent.qp_num) == (OK, WC.IBV_WC_SEND, 0xA11, a.qp.qp_num)
    assert (recv.status, recv.opcode, recv.wr_id, recv.byte_len, recv.qp_num) == (
        OK, WC.IBV_WC_RECV, 0xB0B, size, b.qp.qp_num)  # fmt: skip
    assert (recv.wc_flags, recv.imm_data) == ((e.ibv_wc_flags.IBV_WC_WITH_IMM, 0xDEADBEEF) if with_imm else (0, 0))
    assert gathered(b, dst)[:size] == gathered(a, src)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("with_imm", [False, True])
def test_rdma_write(pair: tuple[Endpoint, Endpoint], size: int, with_imm: bool) -> None:
    a, b = pair
    fill(a)
    fill(b)
    src = sges(a, 0, size, 1)
    target = 4096 + 5
    if with_imm:
        b.qp.post_recv(RecvWR(wr_id=0x1111, sg=[]))
    wr = SendWR(wr_id=0xC0, opcode=WR.IBV_WR_RDMA_WRITE_WITH_IMM if with_imm else WR.IBV_WR_RDMA_WRITE,
                imm_data=0x01020304, sg=src)  # fmt: skip
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + target)
    a.qp.post_send(wr)
    (done,) = a.poll()
    assert (done.status, done.opcode, done.wr_id) == (OK, WC.IBV_WC_RDMA_WRITE, 0xC0)
    if with_imm:  # the receiver's completion is the proof of arrival
        (recv,) = b.poll()
        assert (recv.status, recv.opcode, recv.wr_id, recv.byte_len, recv.imm_data) == (
            OK, WC.IBV_WC_RECV_RDMA_WITH_IMM, 0x1111, size, 0x01020304)  # fmt: skip
    else:  # UC's completion says the packets left, not that they arrived
        spin_until(lambda: b.mr.read(size, target) == gathered(a, src), "the WRITE's bytes at the peer")
    assert b.mr.read(size, target) == gathered(a, src)


@pytest.mark.parametrize("opcode", [WR.IBV_WR_RDMA_READ, WR.IBV_WR_ATOMIC_CMP_AND_SWP, WR.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                    WR.IBV_WR_SEND_WITH_INV])  # fmt: skip
def test_operations_uc_does_not_have_are_einval_at_post(pair: tuple[Endpoint, Endpoint], opcode: int) -> None:
    a, b = pair
    wr = SendWR(wr_id=1, opcode=opcode, sg=sges(a, 0, 8, 1))
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    with raises_errno(errno.EINVAL):
        a.qp.post_send(wr)
    assert a.qp.qp_state == e.ibv_qp_state.IBV_QPS_RTS  # refused at post: the QP is untouched


def test_rc_only_attributes_are_einval_on_uc(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    attr = QPAttr()
    attr.timeout = 14
    with raises_errno(errno.EINVAL):  # the kernel's table: UC's RTS -> RTS takes no timeout
        a.qp.modify(attr, e.ibv_qp_attr_mask.IBV_QP_TIMEOUT | e.ibv_qp_attr_mask.IBV_QP_STATE)
    assert a.qp.query()[0].qp_state == e.ibv_qp_state.IBV_QPS_RTS
