"""Shared receive queues through the verbs API: three RC QPs of one receiver drawing from one
SRQ (each completion in its QP's CQ, with its QP number, the SRQ WQE's wr_id, and the data),
WQEs taken in ring order, the limit event once per arming, RNR while the SRQ is empty,
query/modify (resize keeps the posted WQEs) and misuse with rxe's errnos."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.verbs.cq import CQ
from pyroce.verbs.enums import ibv_event_type, ibv_qp_type, ibv_srq_attr_mask, ibv_wc_opcode, ibv_wc_status
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPCap, QPInitAttr
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import open_endpoint
from tests.waiting import DEADLINE_S, readable, spin_until

QPS = 3
SLOT = 256  # bytes of the receiver's MR per receive WQE
OK = ibv_wc_status.IBV_WC_SUCCESS


@dataclass
class Shared:
    """One receiving Context: an SRQ and ``QPS`` RC QPs on it (each with its own CQ),
    each connected to a sender endpoint of its own."""

    receiver: RcEndpoint  # its QP is the receiver's plain QP, unused here
    srq: SRQ
    qps: list[RcEndpoint]  # the receiver's SRQ QPs, as endpoints sharing its PD and MR
    senders: list[RcEndpoint]

    def post(self, *wr_ids: int, start: int = 0) -> None:
        """One receive WQE per ``wr_id``, the i-th into slot ``start + i`` of the MR, as a chain."""
        mr = self.receiver.mr
        chain = None
        for i in reversed(range(len(wr_ids))):
            sge = SGE(mr.buf + (start + i) * SLOT, SLOT, mr.lkey)
            chain = RecvWR(wr_id=wr_ids[i], sg=[sge], next_wr=chain)
        assert chain is not None
        self.srq.post_recv(chain)

    def send(self, k: int, data: bytes) -> None:
        """A SEND of ``data`` from sender ``k``, its completion checked."""
        sender = self.senders[k]
        sender.mr.write(data, len(data))
        sender.qp.post_send(SendWR(wr_id=k, sg=[SGE(sender.mr.buf, len(data), sender.mr.lkey)]))
        (sent,) = sender.poll()
        assert sent.status == OK


@pytest.fixture
def shared() -> Iterator[Shared]:
    receiver = open_endpoint()
    srq = SRQ(receiver.pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=2)))
    qps, senders = [], []
    for _ in range(QPS):
        cq = CQ(receiver.ctx, 16)
        qp = QP(receiver.pd, QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq,
                                        cap=QPCap(max_send_wr=4)))  # fmt: skip
        ep = RcEndpoint(receiver.ctx, receiver.pd, cq, qp, receiver.mr, receiver.psn)
        sender = open_endpoint()
        ep.connect(sender.info())
        sender.connect(ep.info())
        qps.append(ep)
        senders.append(sender)
    yield Shared(receiver, srq, qps, senders)
    for ep in [receiver, *senders]:
        ep.close()


def test_three_qps_take_the_srq_wqes_in_ring_order(shared: Shared) -> None:
    shared.post(*range(100, 106))
    for i in range(6):  # message i comes from sender i % 3 and takes WQE i
        k = i % QPS
        shared.send(k, bytes([i + 1]) * (10 + i))
        (wc,) = shared.qps[k].poll()
        assert (wc.status, wc.opcode, wc.wr_id, wc.qp_num, wc.byte_len) == (
            OK, ibv_wc_opcode.IBV_WC_RECV, 100 + i, shared.qps[k].qp.qp_num, 10 + i)  # fmt: skip
        assert shared.receiver.mr.read(10 + i, i * SLOT) == bytes([i + 1]) * (10 + i)
    for ep in shared.qps:  # nothing went to another QP's CQ
        assert ep.cq.poll()[0] == 0


def test_an_empty_srq_answers_rnr_then_the_message_lands_once_a_wqe_is_posted(shared: Shared) -> None:
    sender, ep = shared.senders[1], shared.qps[1]
    device = shared.receiver.ctx.device
    sender.mr.write(b"late", 4)
    sender.qp.post_send(SendWR(wr_id=7, sg=[SGE(sender.mr.buf, 4, sender.mr.lkey)]))
    spin_until(lambda: device.qp_stats(ep.qp.qp_num).get("send_rnr_err", 0) > 0, "an RNR NAK",
               lambda: sender.cq.poll())  # fmt: skip
    shared.post(0x5EED)
    (sent,) = sender.poll()
    (wc,) = ep.poll()
    assert (sent.status, wc.status, wc.wr_id, wc.qp_num) == (OK, OK, 0x5EED, ep.qp.qp_num)
    assert shared.receiver.mr.read(4, 0) == b"late"


def next_event(shared: Shared) -> tuple[int, int]:
    ctx = shared.receiver.ctx
    assert readable(ctx.async_fd, DEADLINE_S), "no async event"
    got = ctx.get_async_event()
    got.ack()
    return got.event_type, got.element


def test_the_limit_event_fires_once_per_arming(shared: Shared) -> None:
    srq, ctx = shared.srq, shared.receiver.ctx
    shared.post(*range(4))
    srq.modify(SrqAttr(srq_limit=3), ibv_srq_attr_mask.IBV_SRQ_LIMIT)
    assert srq.query().srq_limit == 3
    shared.send(0, b"a")  # 3 left: not below the limit
    assert not readable(ctx.async_fd, 0)
    shared.send(1, b"b")  # 2 left: below it
    assert next_event(shared) == (ibv_event_type.IBV_EVENT_SRQ_LIMIT_REACHED, srq.hw.srqn)
    assert srq.query().srq_limit == 0  # disarmed
    shared.send(2, b"c")
    assert not readable(ctx.async_fd, 0)
    srq.modify(SrqAttr(srq_limit=2), ibv_srq_attr_mask.IBV_SRQ_LIMIT)
    shared.send(0, b"d")  # 0 left
    assert next_event(shared) == (ibv_event_type.IBV_EVENT_SRQ_LIMIT_REACHED, srq.hw.srqn)
    assert not readable(ctx.async_fd, 0)
    assert [ep.poll(n)[-1].wr_id for ep, n in zip(shared.qps, (2, 1, 1), strict=True)] == [3, 1, 2]


def test_query_and_resize_keep_the_posted_wqes(shared: Shared) -> None:
    srq = shared.srq
    attr = srq.query()
    assert (attr.max_wr, attr.max_sge, attr.srq_limit) == (8, 2, 0)
    shared.post(*range(10, 16))
    shared.send(0, b"x")  # WQE 0 taken before the resize
    assert shared.qps[0].poll()[0].wr_id == 10
    srq.modify(SrqAttr(max_wr=64), ibv_srq_attr_mask.IBV_SRQ_MAX_WR)
    assert srq.query().max_wr == 64
    shared.post(*range(16, 30), start=6)
    for i in range(1, 20):
        shared.send(i % QPS, bytes([i]))
        (wc,) = shared.qps[i % QPS].poll()
        assert (wc.wr_id, shared.receiver.mr.read(1, i * SLOT)) == (10 + i, bytes([i]))
    shared.post(*range(30, 33), start=20)
    with pytest.raises(PyverbsRDMAError) as caught:  # below the 3 outstanding
        srq.modify(SrqAttr(max_wr=2), ibv_srq_attr_mask.IBV_SRQ_MAX_WR)
    assert caught.value.error_code == errno.EINVAL


def errno_of(call: object, *args: object) -> int:
    with pytest.raises(PyverbsRDMAError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.error_code


def test_misuse_answers_rxes_errnos(shared: Shared) -> None:
    srq, receiver = shared.srq, shared.receiver
    mr = receiver.mr
    assert errno_of(shared.qps[0].qp.post_recv, RecvWR(sg=[SGE(mr.buf, 8, mr.lkey)])) == errno.EINVAL
    three = RecvWR(sg=[SGE(mr.buf, 8, mr.lkey)] * 3)
    assert errno_of(srq.post_recv, three) == errno.EINVAL  # max_sge 2
    assert errno_of(srq.modify, SrqAttr(srq_limit=9), ibv_srq_attr_mask.IBV_SRQ_LIMIT) == errno.EINVAL
    shared.post(*range(6))
    with pytest.raises(PyverbsRDMAError) as caught:  # the first two of the chain are posted
        shared.post(6, 7, 8, start=6)
    assert caught.value.error_code == errno.ENOMEM
    assert errno_of(srq.modify, SrqAttr(max_wr=7), ibv_srq_attr_mask.IBV_SRQ_MAX_WR) == errno.EINVAL
    assert errno_of(srq.close) == errno.EBUSY
    for ep in shared.qps[:2]:
        ep.qp.close()
    assert errno_of(srq.close) == errno.EBUSY
    shared.qps[2].qp.close()
    srq.close()
    assert errno_of(srq.post_recv, three) == errno.EBADF
    attr = receiver.ctx.query_device()
    assert (attr.max_srq, attr.max_srq_wr, attr.max_srq_sge) == (0xDFFFF, 0x4000, 27)
    for size in (SrqAttr(max_wr=0), SrqAttr(max_wr=0x4001), SrqAttr(max_sge=28)):
        assert errno_of(SRQ, receiver.pd, SrqInitAttr(size)) == errno.EINVAL
