"""``pyroce.ib.counters.Counters``: a Counter whose increments stay on dict's C path."""

from __future__ import annotations

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.ib.counters import Counters, folded
from pyroce.transport import QpConfig, RcQp


def test_counters_count_as_a_counter_does() -> None:
    counters = Counters()
    counters["rcvd_pkts"] += 3
    counters["rcvd_pkts"] += 1
    counters.update({"sent_pkts": 2})
    assert counters["never_seen"] == 0 and "never_seen" not in counters
    assert counters.most_common(1) == [("rcvd_pkts", 4)] and counters.total() == 6
    del counters["sent_pkts"]
    with pytest.raises(KeyError):
        del counters["sent_pkts"]  # as a dict: Counter's own __delitem__ is what made increments slow


def test_item_assignment_is_dicts_own_slot() -> None:
    """CPython routes ``c[k] = v`` through a Python-level slot as soon as a class defines
    ``__setitem__`` or ``__delitem__`` in Python (``collections.Counter`` defines the latter);
    with both of dict's, the type's slot is dict's C function again."""
    assert Counters.__setitem__ is dict.__setitem__ and Counters.__delitem__ is dict.__delitem__


def test_the_per_packet_counters_are_counters() -> None:
    """The engine's (shared by its memory table, receive demux and transmit batch) and a QP's."""
    endpoint = RcEndpoint.open(4096)
    try:
        engine = endpoint.ctx.device.engine
        assert type(engine.counters) is Counters and engine.mrs.counters is engine.counters
        assert type(RcQp(QpConfig(qpn=0x11), engine.mrs).counters) is Counters
    finally:
        endpoint.close()


def test_folded_adds_the_counts_kept_outside() -> None:
    counters = Counters({"drop_pkey": 2, "sent_pkts": 1})
    total = folded(counters, sent_pkts=3, rcvd_pkts=0)
    assert total == {"drop_pkey": 2, "sent_pkts": 4} and type(total) is Counters
    assert counters == {"drop_pkey": 2, "sent_pkts": 1}  # the counters themselves unchanged
