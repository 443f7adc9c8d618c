"""Watching a device's asynchronous events as ``ibv_asyncwatch`` does: the loop ``pyroce
events`` runs and the line it prints for each event.

A context reads the events of the QPs, CQs and SRQs created on it and every port and device
event, as each ``ibv_open_device`` does, and each process has its own pyroce0 (its own NIC and
engine): call ``watch`` with the context of the program (a thread of it) or test whose objects
raise the events; ``pyroce events``, a context of its own, sees the port and device events.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Iterator

from pyroce.ib.enums import CQ_EVENTS, QP_EVENTS, SRQ_EVENTS
from pyroce.verbs.device import AsyncEvent, Context, translate_event_type
from pyroce.verbs.enums import ibv_event_type as ev


def describe(event: AsyncEvent) -> str:
    """ibv_asyncwatch's line, ``  event_type IBV_EVENT_PORT_ERR (10), port 1``, for every
    event type (ibv_asyncwatch names port and device events only and prints a port number for
    all): a QP event names its QP, a CQ event its CQ; pyroce's reason follows."""
    kind = event.event_type
    if kind in QP_EVENTS:
        element = f"qp 0x{event.element:x}"
    elif kind in SRQ_EVENTS:
        element = f"srq {event.element}"
    elif kind in CQ_EVENTS:
        element = f"cq {event.element}"
    elif kind == ev.IBV_EVENT_DEVICE_FATAL:
        element = "device"
    else:
        element = f"port {event.element}"
    reason = f": {event.reason}" if event.reason else ""
    return f"  event_type {translate_event_type(kind)} ({kind}), {element}{reason}"


def watch(ctx: Context, count: int | None = None, timeout_s: float | None = None) -> Iterator[AsyncEvent]:
    """The context's asynchronous events as they come, each acknowledged, until ``count`` of
    them or ``timeout_s`` seconds from the first call (None: no limit). Waits in a selector on
    ``ctx.async_fd``; another reader of the same context's events may take one first."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seen = 0
    with selectors.DefaultSelector() as selector:
        selector.register(ctx.async_fd, selectors.EVENT_READ)
        while count is None or seen < count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            if selector.select(left):
                event = ctx.get_async_event()
                event.ack()
                seen += 1
                yield event
