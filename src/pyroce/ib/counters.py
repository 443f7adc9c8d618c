"""The counters a QP, a port and the NIC keep (rxe's ``hw_counters``, ``rdma statistic``):
named event counts. The few counted per packet (``sent_pkts``, ``rcvd_pkts``, ``sent_bytes``,
``rcvd_bytes``, ``predicted_pkts``) are int attributes of the objects that count them, folded
in when the counters are read (``folded``): compiled, ``self.sent_pkts += n`` is one machine
add, where ``counters["sent_pkts"] += n`` on a dict subclass is a generic get, add and set
(~600 instructions; 11 of them were 3% of a 2-byte SEND's round)."""

from __future__ import annotations

from collections import Counter


class Counters(Counter[str]):
    """A ``collections.Counter`` whose ``counters[name] += n`` runs at a dict's speed.
    ``Counter`` defines ``__delitem__`` in Python, and CPython then routes every item
    assignment through a Python-level slot (``__setitem__`` looked up and called: ~200 ns an
    increment here against ~75; 5% of a shared NIC's engine time under ``ib_write_bw``). With
    dict's own ``__delitem__`` the slot is dict's C function again; deleting a name that is not
    there raises ``KeyError``, as a dict does."""

    __delitem__ = dict.__delitem__  # type: ignore[assignment]


def folded(counters: Counter[str], **counts: int) -> Counters:
    """A copy of ``counters`` with the counts kept outside it added; a zero is left out, as a
    Counter leaves out a name never counted."""
    total = Counters(counters)
    for name, count in counts.items():
        if count:
            total[name] += count
    return total
