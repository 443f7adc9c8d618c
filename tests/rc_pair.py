"""Two connected RC endpoints on pyroce0 for tests: real verbs objects, engine and packets.

Both ends live in this process, as in rdma-core's own tests: two Contexts of one device
connected through the device's GID, so every packet takes the device's internal loopback
(built, ICRC'd, verified and parsed like any other). The PSNs start just below 2**24, so
every multi-packet message crosses the wrap.
"""

from __future__ import annotations

from pyroce.apps.rc_endpoint import ALL_ACCESS, RcEndpoint

MR_SIZE = 3 << 20
START_PSN = 0xFFFFF0

Endpoint = RcEndpoint
__all__ = ["ALL_ACCESS", "Endpoint", "connected_pair", "open_endpoint"]


def open_endpoint(events: bool = False) -> RcEndpoint:
    return RcEndpoint.open(MR_SIZE, psn=START_PSN, events=events)


def connected_pair(events: bool = False, **connect: int) -> tuple[RcEndpoint, RcEndpoint]:
    """``events``: each CQ reports to a completion channel (``Endpoint.channel``)."""
    a, b = open_endpoint(events), open_endpoint(events)
    a.connect(b.info(), **connect)
    b.connect(a.info(), **connect)
    return a, b
