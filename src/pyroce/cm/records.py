"""What the connection manager takes from its drivers and hands back: parameters, routes, events.

Each record is the kernel's ``rdma_ucm_*`` structure of the same meaning, so the C driver
fills librdmacm's answers from it field by field and the Python driver gives pyverbs' objects
the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from pyroce.ib.addressing import ROCE_V2_INDEX
from pyroce.ib.cm import CmEventType

if TYPE_CHECKING:
    from pyroce.cm.ids import CmId
    from pyroce.cm.multicast import McGroup

Address = tuple[str, int]  # (IP address, port)


@dataclass
class ConnParam:
    """``rdma_conn_param``: what a connect or accept offers, and what an event reports of the peer's."""

    private_data: bytes = b""
    responder_resources: int = 0
    initiator_depth: int = 0
    flow_control: int = 0
    retry_count: int = 0
    rnr_retry_count: int = 0
    srq: int = 0
    qp_num: int = 0
    qkey: int = 0  # a UD id's accept: the Q_Key its SIDR_REP names (0: the port space's)


@dataclass
class AhValues:
    """The ``ibv_ah_attr`` a peer is reached by over RoCEv2 (always with a GRH)."""

    dgid: bytes
    sgid_index: int = ROCE_V2_INDEX  # the CM's GID is the address's, RoCE v2 (as the kernel's cma_bind picks)
    hop_limit: int = 64
    traffic_class: int = 0
    flow_label: int = 0
    sl: int = 0
    port_num: int = 1
    is_global: int = 1
    dlid: int = 0


@dataclass
class UdParam:
    """``rdma_ud_param``: a UD peer as SIDR found it."""

    private_data: bytes
    ah: AhValues
    qp_num: int
    qkey: int


@dataclass
class PathValues:
    """One path record (``ibv_path_rec``'s fields as ``rdma_route`` carries them)."""

    dgid: bytes
    sgid: bytes
    flow_label: int
    hop_limit: int
    traffic_class: int
    pkey: int
    mtu: int  # ibv_mtu
    rate: int
    packet_life_time: int
    sl: int = 0
    reversible: int = 1
    numb_path: int = 1


@dataclass
class CmRoute:
    """What QUERY_ROUTE answers: the id's addresses, GIDs, P_Key, port, and its path once resolved."""

    src: Address | None
    dst: Address | None
    sgid: bytes
    dgid: bytes
    pkey: int
    port_num: int
    node_guid: int
    paths: list[PathValues] = field(default_factory=list)


class CmEvent(NamedTuple):
    """``rdma_ucm_event_resp``: one event, on the channel of the id it is for."""

    event: CmEventType
    context: int  # the uid of the id it is for (CONNECT_REQUEST: the listener's; MULTICAST_*: the join's)
    cm_id: CmId  # CONNECT_REQUEST: the new id, a child of the listener
    status: int  # 0, -errno, or a REJECTED event's reason
    conn: ConnParam | None = None
    ud: UdParam | None = None
    group: McGroup | None = None  # MULTICAST_JOIN and MULTICAST_ERROR: the join it is for
