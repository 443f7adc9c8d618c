"""An rdma_cm id and the channel its events go to, as the NIC keeps them.

An id is rdma_cm's (addresses, port space, listener) and ib_cm's (the connection's comm IDs,
its state, the REQ and REP it was made of) in one object: a driver holds it and names it in
its commands, the connection manager (``cm.manager``) alone changes it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from pyroce.cm.records import Address, CmEvent, PathValues
from pyroce.ib.cm import PortSpace

if TYPE_CHECKING:
    from pyroce.cm.multicast import McGroup
    from pyroce.nic.events import EventQueue
    from pyroce.wire.cm import CmRep, CmReq


class IdState(enum.Enum):
    """rdma_cm's id states (``enum rdma_cm_state``) and ib_cm's connection states in one line:
    what the id is doing now."""

    IDLE = "idle"
    BOUND = "bound"
    ADDR_RESOLVED = "address resolved"
    ROUTE_RESOLVED = "route resolved"
    LISTEN = "listening"
    REQ_SENT = "REQ sent"  # active: waiting for a REP (an MRA extends the wait)
    SIDR_REQ_SENT = "SIDR_REQ sent"
    REQ_RCVD = "REQ received"  # passive: the consumer has the CONNECT_REQUEST
    SIDR_REQ_RCVD = "SIDR_REQ received"
    REP_SENT = "REP sent"  # passive: waiting for the RTU
    REP_RCVD = "REP received"  # active: the consumer has the CONNECT_RESPONSE
    ESTABLISHED = "established"
    DREQ_SENT = "DREQ sent"
    DREQ_RCVD = "DREQ received"
    TIMEWAIT = "disconnected"  # the connection is over; its comm ID still answers stale messages
    FAILED = "failed"  # rejected, unreachable or timed out


CONNECTING = frozenset({IdState.REQ_SENT, IdState.REQ_RCVD, IdState.REP_SENT, IdState.REP_RCVD})
CONNECTED = frozenset({IdState.ESTABLISHED, IdState.DREQ_SENT, IdState.DREQ_RCVD})


class CmChannel:
    """An event channel (ucma's file): its events, readable on ``fileno()`` while some wait."""

    def __init__(self, events: EventQueue[CmEvent]) -> None:
        self.events = events
        self.ids: set[CmId] = set()
        self.closed = False

    def fileno(self) -> int:
        return self.events.fileno()


class CmId:
    """One rdma_cm id. Drivers read it; ``RdmaCm`` changes it."""

    def __init__(self, channel: CmChannel, context: int, port_space: PortSpace, qp_type: int) -> None:
        self.channel = channel
        self.context = context
        self.port_space = port_space
        self.qp_type = qp_type
        self.state = IdState.IDLE
        self.local: Address | None = None
        self.remote: Address | None = None
        self.bound = False  # holds its local port in the port space
        self.reuse_address = False
        self.tos = 0
        self.ack_timeout: int | None = None  # RDMA_OPTION_ID_ACK_TIMEOUT
        self.path: PathValues | None = None
        self.backlog = 0
        self.listener: CmId | None = None  # a passive id: the listener its REQ came to
        self.pending: set[CmId] = set()  # a listener: its children not yet accepted or rejected
        self.groups: list[McGroup] = []  # the multicast groups it joined and has not left
        self.qp_num = 0
        self.qkey = 0
        self.seq_num = 0  # this side's starting PSN
        self.local_comm_id = 0
        self.remote_comm_id = 0
        self.remote_ca_guid = 0
        self.peer_gid: bytes | None = None  # a passive id: the GID its REQ came from, where answers go
        self.tid = 0  # the transaction of the exchange in progress (REQ: REP and RTU answer it)
        self.req: CmReq | None = None  # passive: the REQ; active: the REQ sent
        self.rep: CmRep | None = None  # active: the REP; passive: the REP sent
        self.responder_resources = 0
        self.initiator_depth = 0
        self.events_reported = 0
        self.destroyed = False

    @property
    def peer_qpn(self) -> int:
        """The QPN the peer's REQ (passive) or REP (active) named."""
        message = self.rep if self.listener is None else self.req
        return message.local_qpn if message is not None else 0

    def __repr__(self) -> str:
        return f"<CmId {self.port_space.name} {self.state.value} local={self.local} remote={self.remote}>"
