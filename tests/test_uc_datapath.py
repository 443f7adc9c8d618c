"""UC through the verbs API in one process: SEND and RDMA WRITE (with immediate) around the
path MTU and at 1 MiB, the completion fields, and what a UC QP refuses (READ, atomics, SEND with
invalidate at post; RC-only attributes at modify)."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.qp import QPAttr
from pyroce.verbs.wr import SendWR
from tests.rc_pair import Endpoint, connected_pair
from tests.test_rc_datapath import SIZES, WR, WRITE_AT, fill, gathered, send_and_poll, sges, write_and_poll
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
    src, dst = send_and_poll(a, b, size, 3, with_imm)
    assert gathered(b, dst)[:size] == gathered(a, src)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("with_imm", [False, True])
def test_rdma_write(pair: tuple[Endpoint, Endpoint], size: int, with_imm: bool) -> None:
    a, b = pair
    fill(a)
    fill(b)
    src = write_and_poll(a, b, size, 1, with_imm)
    # UC's send completion says the packets left, not that they arrived (the receiver's does)
    spin_until(lambda: b.mr.read(size, WRITE_AT) == gathered(a, src), "the WRITE's bytes at the peer")


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
