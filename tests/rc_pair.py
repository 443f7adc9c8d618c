"""Two connected RC endpoints on pyroce0 for tests: real verbs objects, engine and packets.

Both ends live in this process, as in rdma-core's own tests: two Contexts of one device
connected through the device's GID, so every packet takes the device's internal loopback
(built, ICRC'd, verified and parsed like any other). The PSNs start just below 2**24, so
every multi-packet message crosses the wrap.
"""

from __future__ import annotations

from pyroce.apps.rc_endpoint import ALL_ACCESS, RcEndpoint
from pyroce.verbs.enums import ibv_qp_type

MR_SIZE = 3 << 20
START_PSN = 0xFFFFF0

Endpoint = RcEndpoint
__all__ = ["ALL_ACCESS", "Endpoint", "connected_pair", "open_endpoint"]


def open_endpoint(events: bool = False, qp_type: int = ibv_qp_type.IBV_QPT_RC, send_ops_flags: int = 0) -> RcEndpoint:
    return RcEndpoint.open(MR_SIZE, psn=START_PSN, events=events, qp_type=qp_type, send_ops_flags=send_ops_flags)


def connected_pair(events: bool = False, qp_type: int = ibv_qp_type.IBV_QPT_RC, send_ops_flags: int = 0,
                   **connect: int) -> tuple[RcEndpoint, RcEndpoint]:  # fmt: skip
    """``events``: each CQ reports to a completion channel (``Endpoint.channel``); ``qp_type``:
    RC or UC; ``send_ops_flags``: extended QPs (``QPEx``) over extended CQs (``CQEX``)."""
    a, b = open_endpoint(events, qp_type, send_ops_flags), open_endpoint(events, qp_type, send_ops_flags)
    a.connect(b.info(), **connect)
    b.connect(a.info(), **connect)
    return a, b
