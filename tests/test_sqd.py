"""The send queue drain through the verbs, as rxe does it (rxe_qp.c, rxe_req.c): RTS -> SQD lets
the work requests already started complete (RC: once ACKed), starts none, reports
``sq_draining`` until they are done, then raises IBV_EVENT_SQ_DRAINED once (asked for with
``en_sqd_async_notify``); work posted in SQD is accepted and waits; leaving SQD but to ERR while
draining is EINVAL; SQD -> RTS goes on. And IBV_EVENT_COMM_EST, raised once by the first packet
a QP receives in RTR."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.testing.faults import FaultPlan
from pyroce.verbs.enums import ibv_event_type, ibv_qp_state, ibv_qp_type, ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.enums import ibv_qp_attr_mask as M
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QPAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import connected_pair, open_endpoint
from tests.waiting import DEADLINE_S, readable, spin_until

Pair = tuple[RcEndpoint, RcEndpoint]
SQD, RTS, ERR = ibv_qp_state.IBV_QPS_SQD, ibv_qp_state.IBV_QPS_RTS, ibv_qp_state.IBV_QPS_ERR
SLOT = 4096  # bytes of each WRITE, and where the i-th one lands in the peer's MR


@pytest.fixture
def rc(progress_mode: str) -> Iterator[Pair]:
    a, b = connected_pair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def uc() -> Iterator[Pair]:
    a, b = connected_pair(qp_type=ibv_qp_type.IBV_QPT_UC)
    yield a, b
    a.close()
    b.close()


def writes(a: RcEndpoint, b: RcEndpoint, *wr_ids: int) -> SendWR:
    """A chain of signaled SLOT-byte WRITEs, the one of ``wr_id`` i from and to slot i."""
    chain = None
    for wr_id in reversed(wr_ids):
        a.mr.write(bytes([wr_id]) * SLOT, SLOT, wr_id * SLOT)
        wr = SendWR(wr_id=wr_id, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE,
                    sg=[SGE(a.mr.buf + wr_id * SLOT, SLOT, a.mr.lkey)], next_wr=chain)  # fmt: skip
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + wr_id * SLOT)
        chain = wr
    assert chain is not None
    return chain


def landed(b: RcEndpoint, wr_id: int) -> bool:
    return b.mr.read(SLOT, wr_id * SLOT) == bytes([wr_id]) * SLOT


def to_sqd(ep: RcEndpoint, notify: bool = True) -> None:
    attr = QPAttr(qp_state=SQD)
    attr.en_sqd_async_notify = int(notify)
    ep.qp.modify(attr, M.IBV_QP_STATE | M.IBV_QP_EN_SQD_ASYNC_NOTIFY)


def modify(ep: RcEndpoint, state: int, mask: int = 0) -> None:
    ep.qp.modify(QPAttr(qp_state=state), M.IBV_QP_STATE | mask)


def draining(ep: RcEndpoint) -> int:
    attr, _ = ep.qp.query()
    assert attr.qp_state == SQD
    return attr.sq_draining


def sent(ep: RcEndpoint, packets: int) -> None:
    """Wait until the QP has sent ``packets`` (its WQEs have started)."""
    spin_until(lambda: ep.ctx.device.qp_stats(ep.qp.qp_num).get("sent_pkts", 0) >= packets, "packets sent",
               ep.ctx.device.kick)  # fmt: skip


def next_event(ep: RcEndpoint) -> tuple[int, int]:
    assert readable(ep.ctx.async_fd, DEADLINE_S), "no async event"
    got = ep.ctx.get_async_event()
    got.ack()
    return got.event_type, got.element


def events(ep: RcEndpoint, passes: int = 5) -> list[tuple[int, int]]:
    """The events waiting, after a few more engine passes."""
    for _ in range(passes):
        ep.ctx.device.kick()
    got = []
    while readable(ep.ctx.async_fd, 0):
        got.append(next_event(ep))
    return got


PORT_DOWN_AND_UP = [(ibv_event_type.IBV_EVENT_PORT_ERR, 1), (ibv_event_type.IBV_EVENT_PORT_ACTIVE, 1)]


def test_rc_requests_in_flight_complete_then_one_sq_drained(rc: Pair) -> None:
    a, b = rc
    plan = FaultPlan(a.ctx.device)
    plan.port_down()  # what is sent is lost: the three WRITEs stay in flight until the port is back
    try:
        a.qp.post_send(writes(a, b, 1, 2, 3))
        sent(a, 3)
        to_sqd(a)
        assert draining(a) == 1
        a.qp.post_send(writes(a, b, 4))  # accepted in SQD, as rxe does; it waits
        for state in (RTS, SQD, ibv_qp_state.IBV_QPS_RESET):  # rxe: only ERR leaves SQD while draining
            with pytest.raises(PyverbsRDMAError, match="still draining") as raised:
                modify(a, state)
            assert raised.value.error_code == errno.EINVAL
        assert events(a) == PORT_DOWN_AND_UP[:1]  # not drained
    finally:
        plan.port_up()
    assert [(wc.wr_id, wc.status) for wc in a.poll(3)] == [(i, ibv_wc_status.IBV_WC_SUCCESS) for i in (1, 2, 3)]
    assert events(a) == [PORT_DOWN_AND_UP[1], (ibv_event_type.IBV_EVENT_SQ_DRAINED, a.qp.qp_num)]  # once
    assert events(b) == PORT_DOWN_AND_UP
    assert draining(a) == 0 and all(landed(b, i) for i in (1, 2, 3)) and not landed(b, 4)
    assert a.cq.poll()[0] == 0  # the WRITE posted in SQD has not started
    modify(a, RTS)
    assert a.poll(1)[0].wr_id == 4 and landed(b, 4)
    assert events(a) == []


def test_uc_drains_once_sent_and_work_posted_in_sqd_waits(uc: Pair) -> None:
    a, b = uc
    a.qp.post_send(writes(a, b, 1))
    assert a.poll(1)[0].wr_id == 1  # UC: complete once sent
    to_sqd(a)
    assert next_event(a) == (ibv_event_type.IBV_EVENT_SQ_DRAINED, a.qp.qp_num)
    a.qp.post_send(writes(a, b, 2))
    assert events(a) == [] and a.cq.poll()[0] == 0 and not landed(b, 2)
    modify(a, RTS)
    assert a.poll(1)[0].wr_id == 2
    spin_until(lambda: landed(b, 2), "the WRITE posted in SQD", b.ctx.device.kick)


def test_without_en_sqd_async_notify_no_event(rc: Pair) -> None:
    a, b = rc
    a.qp.post_send(writes(a, b, 1))
    sent(a, 1)
    to_sqd(a, notify=False)
    assert a.poll(1)[0].wr_id == 1
    spin_until(lambda: draining(a) == 0, "the drain", a.ctx.device.kick)
    assert events(a) == []


def test_attributes_in_sqd_follow_the_kernel_table(rc: Pair) -> None:
    a, _ = rc
    to_sqd(a)
    assert next_event(a)[0] == ibv_event_type.IBV_EVENT_SQ_DRAINED
    attr = QPAttr(qp_state=SQD)
    attr.timeout, attr.retry_cnt = 10, 3
    a.qp.modify(attr, M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT)  # SQD -> SQD may change these on RC
    assert (a.qp.query()[0].timeout, a.qp.query()[0].retry_cnt) == (10, 3)
    for mask in (M.IBV_QP_SQ_PSN, M.IBV_QP_EN_SQD_ASYNC_NOTIFY):  # not in SQD -> SQD, nor SQD -> RTS
        with pytest.raises(PyverbsRDMAError) as raised:
            a.qp.modify(attr, mask)
        assert raised.value.error_code == errno.EINVAL
        with pytest.raises(PyverbsRDMAError):
            modify(a, RTS, mask)
    modify(a, RTS)
    assert a.qp.query()[0].qp_state == RTS and events(a) == []


def test_sqd_to_err_while_draining_flushes(rc: Pair) -> None:
    a, b = rc
    plan = FaultPlan(a.ctx.device)
    plan.port_down()
    try:
        a.qp.post_send(writes(a, b, 1))
        sent(a, 1)
        to_sqd(a)
        modify(a, ERR)
    finally:
        plan.port_up()
    assert a.poll(1)[0].status == ibv_wc_status.IBV_WC_WR_FLUSH_ERR
    assert events(a) == PORT_DOWN_AND_UP  # no SQ_DRAINED: the QP left SQD before the drain ended


@pytest.mark.parametrize("qp_type", [ibv_qp_type.IBV_QPT_RC, ibv_qp_type.IBV_QPT_UC])
def test_comm_est_once_for_the_first_packet_in_rtr(qp_type: int) -> None:
    a, b = open_endpoint(qp_type=qp_type), open_endpoint(qp_type=qp_type)
    try:
        a.connect(b.info())
        b.connect(a.info(), state=ibv_qp_state.IBV_QPS_RTR)
        for wr_id in (1, 2):
            b.qp.post_recv(RecvWR(wr_id=wr_id, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
            a.qp.post_send(SendWR(wr_id=wr_id, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
            assert b.poll(1)[0].wr_id == wr_id and a.poll(1)[0].wr_id == wr_id
        assert events(b) == [(ibv_event_type.IBV_EVENT_COMM_EST, b.qp.qp_num)]  # once
        assert events(a) == []  # a was in RTS when its first packet came
    finally:
        a.close()
        b.close()
