"""Fault plans at the verbs level (``pyroce.testing.faults``): each fault is seen by the
application as a real NIC would show it (errno, WC status and reason, async event, counter)."""

from __future__ import annotations

import errno
import time

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.ib.reasons import Reason
from pyroce.nic.engine import CQ_ERR, PORT_ACTIVE, PORT_ERR, QP_FATAL
from pyroce.testing.faults import FaultPlan
from pyroce.verbs.enums import ibv_port_state, ibv_send_flags, ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.mr import MR
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, RecvWR, SendWR

Pair = tuple[RcEndpoint, RcEndpoint]


def write(a: RcEndpoint, b: RcEndpoint, wr_id: int = 1) -> None:
    wr = SendWR(wr_id=wr_id, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                send_flags=ibv_send_flags.IBV_SEND_SIGNALED)  # fmt: skip
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)


def events(ep: RcEndpoint) -> list[tuple[int, int]]:
    return [(event.event_type, event.element) for event in ep.ctx.async_queue.take_all()]


def test_a_verb_fails_on_its_nth_call_with_the_chosen_errno(rc_pair: Pair, rdma_fault_plan: FaultPlan) -> None:
    a, b = rc_pair
    rdma_fault_plan.fail_verb("post_send", errno.ENOMEM, nth=2)
    write(a, b, 1)
    with pytest.raises(PyverbsRDMAError, match="injected by a fault plan") as raised:
        write(a, b, 2)
    assert raised.value.error_code == errno.ENOMEM
    write(a, b, 3)
    assert [wc.wr_id for wc in a.poll(2)] == [1, 3]
    assert rdma_fault_plan.injected == [("post_send", 2, errno.ENOMEM)]


def test_the_same_seed_gives_the_same_faults_in_the_same_order(rc_pair: Pair) -> None:
    a, _ = rc_pair

    def run(seed: int) -> list[tuple[str, int, int]]:
        plan = FaultPlan(a.ctx.device, seed)
        plan.fail_verb("reg_mr", errno.ENOMEM, probability=0.3)
        for _ in range(40):
            try:
                MR(a.pd, 64, 1).close()
            except PyverbsRDMAError as exc:
                assert exc.error_code == errno.ENOMEM
        plan.clear()
        return plan.injected

    first = run(7)
    assert first == run(7) and 3 < len(first) < 25
    assert first != run(8)


def test_forced_rnr_is_retried_until_the_receiver_is_ready(rc_pair: Pair, rdma_fault_plan: FaultPlan) -> None:
    a, b = rc_pair
    b.qp.post_recv(RecvWR(wr_id=5, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    rdma_fault_plan.force_rnr(b.qp, count=2)
    a.qp.post_send(SendWR(wr_id=6, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    assert a.poll(1)[0].status == ibv_wc_status.IBV_WC_SUCCESS
    assert b.poll(1)[0].wr_id == 5
    assert a.ctx.device.qp_stats(a.qp.qp_num)["rcvd_rnr_err"] == 2


def test_a_qp_error_fails_the_oldest_request_with_a_reason_and_an_event(rc_pair: Pair,
                                                                       rdma_fault_plan: FaultPlan) -> None:  # fmt: skip
    _, b = rc_pair
    events(b)
    b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    b.qp.post_recv(RecvWR(wr_id=2, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    rdma_fault_plan.qp_error(b.qp)
    first, second = b.poll(2)
    assert (first.wr_id, first.status, first.vendor_err) == (1, ibv_wc_status.IBV_WC_GENERAL_ERR, Reason.INJECTED)
    assert "a fault plan moved the QP to the error state" in first.reason
    assert (second.wr_id, second.status) == (2, ibv_wc_status.IBV_WC_WR_FLUSH_ERR)
    assert (QP_FATAL, b.qp.qp_num) in events(b)


def test_a_cq_overrun_loses_one_completion_and_says_so(rc_pair: Pair, rdma_fault_plan: FaultPlan) -> None:
    a, b = rc_pair
    events(a)
    rdma_fault_plan.cq_overrun(a.cq)
    write(a, b, 1)
    write(a, b, 2)
    assert [wc.wr_id for wc in a.poll(1)] == [2]  # 1's completion was lost
    assert (CQ_ERR, a.cq.hw.cqn) in events(a) and a.ctx.device.stats()["cq_overflow"] >= 1


def test_a_port_down_drops_everything_until_it_comes_back(rc_pair: Pair, rdma_fault_plan: FaultPlan) -> None:
    a, b = rc_pair
    events(a)
    rdma_fault_plan.port_down()
    assert a.ctx.query_port(1).state == ibv_port_state.IBV_PORT_DOWN
    write(a, b, 1)
    deadline = time.monotonic() + 5
    while a.ctx.device.stats().get("drop_port_down", 0) == 0:
        assert time.monotonic() < deadline
        a.cq.poll()
    rdma_fault_plan.port_up()
    assert a.poll(1)[0].status == ibv_wc_status.IBV_WC_SUCCESS  # retransmitted once the port was up
    assert [event for event, _ in events(a)] == [PORT_ERR, PORT_ACTIVE]
