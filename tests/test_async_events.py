"""Asynchronous events (``Context.get_async_event``, ``async_fd``, ``AsyncEvent``) from the
faults a ``FaultPlan`` injects, seen through a selector, asyncio and a blocked reader in inline
and thread modes; ``pyroce events`` (ibv_asyncwatch) on them, in this process."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import re
import threading
from collections.abc import Iterator

import pytest

from pyroce.apps.asyncwatch import describe, watch
from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.cli import main
from pyroce.testing.faults import FaultPlan
from pyroce.verbs.device import AsyncEvent
from pyroce.verbs.enums import ibv_event_type, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, SendWR
from tests.rc_pair import connected_pair
from tests.waiting import DEADLINE_S, readable, spin_until

Pair = tuple[RcEndpoint, RcEndpoint]


@pytest.fixture
def pair(progress_mode: str) -> Iterator[Pair]:
    a, b = connected_pair()
    assert a.ctx.device.progress_mode == progress_mode
    yield a, b
    a.close()
    b.close()


def event(ep: RcEndpoint) -> tuple[int, int]:
    """The next async event of ``ep``'s device, once a selector on ``async_fd`` says it is there."""
    assert readable(ep.ctx.async_fd, DEADLINE_S), "no async event"
    got = ep.ctx.get_async_event()
    got.ack()
    return got.event_type, got.element


def test_a_qp_error_raises_qp_fatal(pair: Pair) -> None:
    a, _ = pair
    assert not readable(a.ctx.async_fd, 0)
    FaultPlan(a.ctx.device).qp_error(a.qp)
    assert event(a) == (ibv_event_type.IBV_EVENT_QP_FATAL, a.qp.qp_num)
    assert not readable(a.ctx.async_fd, 0)


def test_a_cq_overrun_raises_cq_err(pair: Pair) -> None:
    a, b = pair
    FaultPlan(a.ctx.device).cq_overrun(a.cq)
    wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                send_flags=ibv_send_flags.IBV_SEND_SIGNALED)  # fmt: skip
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)  # nobody polls: the engine thread completes it, into an overrun
    assert event(a) == (ibv_event_type.IBV_EVENT_CQ_ERR, a.cq.hw.cqn)


def test_the_port_going_down_and_up_raises_port_err_then_port_active(pair: Pair) -> None:
    a, _ = pair
    plan = FaultPlan(a.ctx.device)
    plan.port_down()
    plan.port_up()
    assert [event(a), event(a)] == [(ibv_event_type.IBV_EVENT_PORT_ERR, 1), (ibv_event_type.IBV_EVENT_PORT_ACTIVE, 1)]


def test_get_async_event_blocks_until_an_event_comes(pair: Pair) -> None:
    a, _ = pair
    got: list[AsyncEvent] = []
    reader = threading.Thread(target=lambda: got.append(a.ctx.get_async_event()), daemon=True)
    reader.start()
    FaultPlan(a.ctx.device).qp_error(a.qp, "why it failed")
    reader.join(DEADLINE_S)
    assert not reader.is_alive(), "get_async_event did not return"
    assert (got[0].event_type, got[0].element, got[0].reason) == (ibv_event_type.IBV_EVENT_QP_FATAL, a.qp.qp_num,
                                                                  "why it failed")  # fmt: skip
    assert str(got[0]).startswith("Event Type              : IBV_EVENT_QP_FATAL")


def test_asyncio_add_reader_on_async_fd(pair: Pair) -> None:
    a, _ = pair
    plan = FaultPlan(a.ctx.device)

    async def wait_for_event() -> AsyncEvent:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[AsyncEvent] = loop.create_future()
        loop.add_reader(a.ctx.async_fd, lambda: ready.done() or ready.set_result(a.ctx.get_async_event()))
        try:
            plan.port_down()
            return await asyncio.wait_for(ready, DEADLINE_S)
        finally:
            loop.remove_reader(a.ctx.async_fd)

    try:
        assert asyncio.run(wait_for_event()).event_type == ibv_event_type.IBV_EVENT_PORT_ERR
    finally:
        plan.port_up()  # a shared NIC's port stays as a test leaves it, for every later program


def test_a_non_blocking_async_fd_answers_eagain(rc_pair: Pair) -> None:
    a, _ = rc_pair
    os.set_blocking(a.ctx.async_fd, False)
    try:
        with pytest.raises(PyverbsRDMAError) as raised:
            a.ctx.get_async_event()
    finally:
        os.set_blocking(a.ctx.async_fd, True)
    assert raised.value.error_code == errno.EAGAIN


def test_a_closed_context_answers_ebadf(rc_pair: Pair) -> None:
    a, _ = rc_pair
    a.ctx.close()
    with pytest.raises(PyverbsRDMAError) as raised:
        a.ctx.get_async_event()
    assert raised.value.error_code == errno.EBADF


def test_watch_stops_at_its_count_or_its_timeout(rc_pair: Pair) -> None:
    a, _ = rc_pair
    FaultPlan(a.ctx.device).qp_error(a.qp, "injected")
    lines = [describe(got) for got in watch(a.ctx, count=1)]
    assert lines == [f"  event_type IBV_EVENT_QP_FATAL (1), qp 0x{a.qp.qp_num:x}: injected"]
    assert list(watch(a.ctx, timeout_s=0.01)) == []


def test_pyroce_events_prints_what_ibv_asyncwatch_prints(rc_pair: Pair) -> None:
    """In this process, whose device the command opens too (one pyroce0 per process), as a
    context of its own: it sees the port events raised once it is open."""
    a, _ = rc_pair
    out = io.StringIO()
    status: list[int] = []
    command = threading.Thread(target=lambda: status.append(main(["events", "--count", "2", "--timeout",
                                                                 str(DEADLINE_S)], out)), daemon=True)  # fmt: skip
    command.start()
    spin_until(lambda: bool(out.getvalue()), "the command's header")
    plan = FaultPlan(a.ctx.device)
    plan.port_down()
    plan.port_up()
    command.join(DEADLINE_S)
    assert status == [0]
    header, *lines = out.getvalue().splitlines()
    assert re.fullmatch(r"pyroce0: async event FD \d+", header)
    assert lines == ["  event_type IBV_EVENT_PORT_ERR (10), port 1: port 1 down",
                     "  event_type IBV_EVENT_PORT_ACTIVE (9), port 1: port 1 active"]  # fmt: skip


def test_pyroce_events_on_no_such_device_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "-d", "mlx5_0", "--timeout", "0"]) == 1
    assert capsys.readouterr().err.startswith("pyroce events: error: Failed to open device mlx5_0")
