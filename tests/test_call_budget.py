"""The fast path's cost in Python calls, counted (``benchmarks/calls_per_msg.py``): a change that
adds calls to a 2-byte SEND's hops fails here, deterministically, with no timing. The budgets are
today's counts; a change that removes calls lowers them. The goal is at most 40 calls per side."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from calls_per_msg import calls_per_msg

# a send on the in-memory wire is a call to its peer link (QueuedLink.deliver); the send hop's two
# SendWqes and its SendWork are classes whose __init__ is a call here (a NamedTuple built through
# functools.partial was none), taken for the compiled build, where they cost a fifth as much; so are
# the Cqe each poll reads (one a receive, one an ACK's send completion) and the Sge each WQE fetched
# holds (the SEND's, the receive's), a quarter as much compiled
BUDGET = {"send": 49, "receive": 59, "ack": 36}


def test_a_two_byte_send_stays_within_its_call_budget() -> None:
    figures = calls_per_msg(rounds=40)
    over = {hop: calls for hop, calls in figures.items() if calls > BUDGET[hop]}
    assert not over, f"calls per message over budget {BUDGET}: {figures}"
    assert all(calls > 0 for calls in figures.values()), f"nothing counted: {figures}"
