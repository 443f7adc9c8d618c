"""Asynchronous events go to the Context that owns their object, as the kernel gives each
``ibv_open_device`` its own async event file: two Contexts of one device (as rdma-core's tests
open them, and as ``connected_pair`` connects them) each see their own QP, CQ and SRQ events
and none of the other's; port events reach both; a destroyed object's unread events go with it,
and a closed Context's events with it."""

from __future__ import annotations

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.testing.faults import FaultPlan
from pyroce.verbs.cq import CQ
from pyroce.verbs.enums import ibv_event_type, ibv_qp_type, ibv_send_flags, ibv_srq_attr_mask, ibv_wr_opcode
from pyroce.verbs.qp import QP, QPCap, QPInitAttr
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import open_endpoint
from tests.waiting import DEADLINE_S, readable

Pair = tuple[RcEndpoint, RcEndpoint]


def next_event(ep: RcEndpoint) -> tuple[int, int]:
    assert readable(ep.ctx.async_fd, DEADLINE_S), "no async event"
    got = ep.ctx.get_async_event()
    got.ack()
    return got.event_type, got.element


def quiet(ep: RcEndpoint) -> bool:
    return not readable(ep.ctx.async_fd, 0)


def only_event(ep: RcEndpoint, *others: RcEndpoint) -> tuple[int, int]:
    """``ep``'s next event, once it waits there while none waits for ``others``."""
    assert readable(ep.ctx.async_fd, DEADLINE_S), "no async event"
    assert all(quiet(other) for other in others), "the event went to another context too"
    return next_event(ep)


def test_the_two_contexts_have_their_own_async_fd(pair: Pair) -> None:
    a, b = pair
    assert (a.ctx.device.name, a.ctx.device.address) == (b.ctx.device.name, b.ctx.device.address)
    assert a.ctx.async_fd != b.ctx.async_fd


def test_a_qp_event_goes_to_its_context_only(pair: Pair) -> None:
    a, b = pair
    FaultPlan(a.ctx.device).qp_error(b.qp)
    assert only_event(b, a) == (ibv_event_type.IBV_EVENT_QP_FATAL, b.qp.qp_num)
    assert quiet(b)


def test_a_cq_event_goes_to_its_context_only(pair: Pair) -> None:
    a, b = pair
    FaultPlan(a.ctx.device).cq_overrun(a.cq)
    wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                send_flags=ibv_send_flags.IBV_SEND_SIGNALED)  # fmt: skip
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    assert only_event(a, b) == (ibv_event_type.IBV_EVENT_CQ_ERR, a.cq.hw.cqn)


def test_an_srq_event_goes_to_its_context_only(pair: Pair) -> None:
    a, b = pair
    srq = SRQ(b.pd, SrqInitAttr(SrqAttr(max_wr=4)))
    cq = CQ(b.ctx, 8)
    qp = QP(b.pd, QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=QPCap(max_send_wr=4)))
    receiver = RcEndpoint(b.ctx, b.pd, cq, qp, b.mr, b.psn)
    sender = open_endpoint()
    try:
        receiver.connect(sender.info())
        sender.connect(receiver.info())
        srq.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
        srq.modify(SrqAttr(srq_limit=1), ibv_srq_attr_mask.IBV_SRQ_LIMIT)
        sender.qp.post_send(SendWR(wr_id=2, sg=[SGE(sender.mr.buf, 8, sender.mr.lkey)]))
        assert sender.poll()[0].status == 0 and receiver.poll()[0].wr_id == 1  # its WQE taken: 0 left
        assert only_event(b, a, sender) == (ibv_event_type.IBV_EVENT_SRQ_LIMIT_REACHED, srq.hw.srqn)
        assert quiet(b)
    finally:
        sender.close()


def test_a_port_event_goes_to_every_context(pair: Pair) -> None:
    plan = FaultPlan(pair[0].ctx.device)
    plan.port_down()
    plan.port_up()
    for ep in pair:
        assert [next_event(ep), next_event(ep)] == [(ibv_event_type.IBV_EVENT_PORT_ERR, 1),
                                                    (ibv_event_type.IBV_EVENT_PORT_ACTIVE, 1)]  # fmt: skip
        assert quiet(ep)


def test_a_destroyed_qp_takes_its_unread_events_with_it(pair: Pair) -> None:
    a, _ = pair
    FaultPlan(a.ctx.device).qp_error(a.qp)
    assert readable(a.ctx.async_fd, DEADLINE_S)
    a.qp.close()
    assert quiet(a)


def test_a_closed_context_leaves_the_other_its_events(pair: Pair) -> None:
    a, b = pair
    plan = FaultPlan(a.ctx.device)
    a.ctx.close()
    plan.port_down()
    plan.qp_error(b.qp)
    assert [only_event(b), next_event(b)] == [(ibv_event_type.IBV_EVENT_PORT_ERR, 1),
                                              (ibv_event_type.IBV_EVENT_QP_FATAL, b.qp.qp_num)]  # fmt: skip
    plan.port_up()
