"""Completion channels (pyverbs ``CompChannel``, ``CQ.req_notify``, ``get_cq_event``,
``ack_events``): an armed CQ raises one event when its next completion is written, seen
through the channel's fd by a selector and by asyncio, in every progress mode.

Exact counts (no event for an unsolicited SEND, none without a re-arm) are asserted in host
mode, where nothing runs between ``step`` calls, so "no event" is a fact and not a race."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from collections.abc import Iterator

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.testing.plugin import use_embedded_nic
from pyroce.verbs.cq import CQ, CompChannel
from pyroce.verbs.enums import ibv_send_flags, ibv_wc_opcode
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import connected_pair
from tests.waiting import DEADLINE_S, readable, spin_until

Pair = tuple[RcEndpoint, RcEndpoint]


@pytest.fixture
def pair(progress_mode: str) -> Iterator[Pair]:
    """Two endpoints whose CQs have completion channels, in inline and thread progress modes."""
    a, b = connected_pair(events=True)
    assert a.ctx.device.progress_mode == progress_mode
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def host_pair(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    """The same in host mode (the embedded NIC's): the engine moves only in ``step``."""
    monkeypatch.setenv("PYROCE_PROGRESS", "host")
    use_embedded_nic(monkeypatch)
    a, b = connected_pair(events=True)
    yield a, b
    a.close()
    b.close()


def send(a: RcEndpoint, solicited: bool = False, length: int = 8) -> None:
    flags = ibv_send_flags.IBV_SEND_SIGNALED | (ibv_send_flags.IBV_SEND_SOLICITED if solicited else 0)
    a.qp.post_send(SendWR(wr_id=1, sg=[SGE(a.mr.buf, length, a.mr.lkey)], send_flags=flags))


def post_recv(b: RcEndpoint, count: int = 1) -> None:
    for _ in range(count):
        b.qp.post_recv(RecvWR(wr_id=2, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))


def channel(ep: RcEndpoint) -> CompChannel:
    assert ep.channel is not None
    return ep.channel


def step_until(ep: RcEndpoint, count: int) -> list[int]:
    """Host mode: engine passes until ``ep`` has ``count`` successful completions (their opcodes)."""
    device = ep.ctx.device
    wcs: list[int] = []

    def got() -> bool:
        device.step(time.monotonic())
        for wc in ep.cq.poll(count)[1]:
            assert wc.status == 0, wc
            wcs.append(wc.opcode)
        return len(wcs) >= count

    spin_until(got, f"{count} completions")
    return wcs


def raise_event(a: RcEndpoint, b: RcEndpoint) -> None:
    """Host mode: arm ``b``'s CQ and complete one SEND into it (its event is then on the channel)."""
    post_recv(b)
    b.cq.req_notify()
    send(a)
    step_until(b, 1)


def test_a_selector_wakes_for_the_next_completion(pair: Pair) -> None:
    a, b = pair
    post_recv(b)
    b.cq.req_notify()
    assert not readable(channel(b).fd, 0)
    send(a)
    assert readable(channel(b).fd, DEADLINE_S), "no completion event"
    channel(b).get_cq_event(b.cq)
    assert b.cq.num_events == 1
    _, wcs = b.cq.poll()  # the CQE was written before the event was signalled
    assert [wc.opcode for wc in wcs] == [ibv_wc_opcode.IBV_WC_RECV]
    assert not readable(channel(b).fd, 0)
    b.cq.ack_events(1)
    assert b.cq.num_events == 0
    a.poll()


def test_asyncio_add_reader_wakes_for_the_next_completion(pair: Pair) -> None:
    a, b = pair
    post_recv(b)

    async def wait_for_event() -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(channel(b).fd, lambda: ready.done() or ready.set_result(None))
        try:
            b.cq.req_notify()
            send(a)
            await asyncio.wait_for(ready, DEADLINE_S)
        finally:
            loop.remove_reader(channel(b).fd)
        channel(b).get_cq_event(b.cq)

    asyncio.run(wait_for_event())
    assert b.cq.num_events == 1
    assert b.cq.poll()[0] == 1


def test_get_cq_event_blocks_until_the_engine_writes_the_completion(pair: Pair) -> None:
    """Nobody polls: the engine thread alone writes the CQE and raises the event."""
    a, b = pair
    post_recv(b)
    b.cq.req_notify()
    done = threading.Event()

    def waiter() -> None:
        channel(b).get_cq_event(b.cq)
        done.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    send(a)
    assert done.wait(DEADLINE_S), "get_cq_event did not return"
    thread.join()
    assert b.cq.poll()[0] == 1


def test_one_event_per_arm_and_none_without_a_re_arm(host_pair: Pair) -> None:
    a, b = host_pair
    post_recv(b, 3)
    b.cq.req_notify()
    send(a)
    send(a)
    assert step_until(b, 2) == [ibv_wc_opcode.IBV_WC_RECV] * 2
    assert len(channel(b).events) == 1  # two completions, one event: the first disarmed the CQ
    channel(b).get_cq_event(b.cq)
    send(a)
    step_until(b, 1)
    assert not readable(channel(b).fd, 0)  # not re-armed: no event
    b.cq.req_notify()
    send(a)
    post_recv(b)
    step_until(b, 1)
    channel(b).get_cq_event(b.cq)
    assert b.cq.num_events == 2


def test_solicited_only_wakes_for_a_solicited_send_only(host_pair: Pair) -> None:
    a, b = host_pair
    post_recv(b, 2)
    b.cq.req_notify(solicited_only=True)
    send(a)
    step_until(b, 1)
    assert not readable(channel(b).fd, 0)  # an unsolicited SEND does not wake
    send(a, solicited=True, length=3000)  # three packets: the SE is on the LAST
    step_until(b, 1)
    assert readable(channel(b).fd, 0)
    channel(b).get_cq_event(b.cq)


def test_solicited_only_wakes_for_a_failed_completion(host_pair: Pair) -> None:
    a, _ = host_pair
    a.cq.req_notify(solicited_only=True)
    send(a)  # no receive posted: RNR retries forever would hang, so the QP is failed instead
    a.ctx.device.inject_qp_error(a.qp.qp_num, "test")
    a.ctx.device.step(time.monotonic())
    assert readable(channel(a).fd, 0)
    channel(a).get_cq_event(a.cq)
    assert a.cq.poll()[1][0].status != 0


def test_a_solicited_arm_does_not_narrow_an_arm_for_any_completion(host_pair: Pair) -> None:
    a, b = host_pair
    post_recv(b)
    b.cq.req_notify()
    b.cq.req_notify(solicited_only=True)
    send(a)
    step_until(b, 1)
    assert readable(channel(b).fd, 0)


def test_a_sleeping_poller_is_woken_by_the_next_completion(host_pair: Pair) -> None:
    """What the C driver's ``ibv_poll_cq`` naps on: with its flag set, the next CQE clears the
    flag and writes the eventfd, once however many CQEs follow; with the flag clear, nothing."""
    a, b = host_pair
    napping, fd = b.cq.poller_wakeup()
    assert b.cq.poller_wakeup()[1] == fd  # one per CQ
    post_recv(b, 3)
    send(a)
    step_until(b, 1)
    assert not readable(fd, 0)  # nobody napping: no wake-up
    napping[0] = 1
    send(a)
    send(a)
    step_until(b, 2)
    assert napping[0] == 0
    assert os.eventfd_read(fd) == 1  # one wake-up for the two CQEs
    assert b.ctx.device.counters["poller_wakeups"] == 1
    b.qp.close()
    b.cq.close()
    with pytest.raises(OSError) as closed:
        os.fstat(fd)
    assert closed.value.errno == errno.EBADF  # closed with its CQ


def test_destroying_a_cq_drops_its_unread_events(host_pair: Pair) -> None:
    a, b = host_pair
    raise_event(a, b)
    assert readable(channel(b).fd, 0)
    b.qp.close()
    b.cq.close()
    assert not readable(channel(b).fd, 0)  # ib_uverbs drops a destroyed CQ's events too


def test_closing_a_cq_acknowledges_what_it_counted(host_pair: Pair) -> None:
    """libibverbs' destroy waits for every event to be acknowledged; pyverbs' close acks first."""
    a, b = host_pair
    raise_event(a, b)
    channel(b).get_cq_event(b.cq)
    b.qp.close()
    b.cq.close()
    assert b.cq.num_events == 0


def test_misuse_answers_with_libibverbs_errnos(host_pair: Pair) -> None:
    a, _ = host_pair
    plain = CQ(a.ctx, 4)
    with pytest.raises(PyverbsRDMAError) as raised:
        channel(a).get_cq_event(plain)  # pyverbs would wait for ever: no event can come
    assert raised.value.error_code == errno.EINVAL
    plain.req_notify()  # allowed (rxe, mlx5): the arm has nowhere to report
    os.set_blocking(channel(a).fd, False)
    with pytest.raises(PyverbsRDMAError) as raised:
        channel(a).get_cq_event(a.cq)
    assert raised.value.error_code == errno.EAGAIN
    closed = CompChannel(a.ctx)
    closed.close()
    with pytest.raises(PyverbsRDMAError) as raised:
        CQ(a.ctx, 4, None, closed)
    assert raised.value.error_code == errno.EBADF
    plain.close()
    with pytest.raises(PyverbsRDMAError) as raised:
        plain.req_notify()
    assert raised.value.error_code == errno.EBADF


def test_an_event_for_another_cq_of_the_channel_is_an_error_counted_on_that_cq(host_pair: Pair) -> None:
    a, b = host_pair
    other = CQ(b.ctx, 4, None, channel(b))
    raise_event(a, b)
    with pytest.raises(PyverbsRDMAError, match="unexpected CQ") as raised:
        channel(b).get_cq_event(other)
    assert raised.value.error_code == errno.EINVAL
    assert (b.cq.num_events, other.num_events) == (1, 0)


def test_closing_the_channel_closes_its_cqs_first(host_pair: Pair) -> None:
    a, _ = host_pair
    cc = CompChannel(a.ctx)
    cq = CQ(a.ctx, 4, None, cc)
    cc.close()
    assert cq.closed and cq.comp_channel is cc
