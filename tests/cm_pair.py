"""rdma_cm connections between two asynchronous CMIDs of this process (one device): events taken
with a deadline, so a CM that loses one fails the test instead of hanging it."""

from __future__ import annotations

from pyroce.verbs.addrinfo import AddrInfo
from pyroce.verbs.cm_enums import RAI_PASSIVE, rdma_cm_event_type, rdma_event_str, rdma_port_space
from pyroce.verbs.cmid import CMID, CMEvent, CMEventChannel, ConnParam
from pyroce.verbs.enums import ibv_qp_type
from pyroce.verbs.qp import QPCap, QPInitAttr
from tests.waiting import readable

E = rdma_cm_event_type


def expect(channel: CMEventChannel, kind: int, timeout_s: float = 10) -> CMEvent:
    """The channel's next event, which must be ``kind`` and come within ``timeout_s``."""
    assert readable(channel.fd, timeout_s), f"no CM event within {timeout_s} s ({rdma_event_str(kind)} awaited)"
    event = CMEvent(channel)
    assert event.event_type == kind, f"{event.event_str()} (status {event.status}), not {rdma_event_str(kind)}"
    return event


def qp_attr(port_space: int = rdma_port_space.RDMA_PS_TCP, depth: int = 4) -> QPInitAttr:
    qp_type = ibv_qp_type.IBV_QPT_UD if port_space == rdma_port_space.RDMA_PS_UDP else ibv_qp_type.IBV_QPT_RC
    return QPInitAttr(qp_type=qp_type, cap=QPCap(max_send_wr=depth, max_recv_wr=depth))


def listen(channel: CMEventChannel, port: int, port_space: int = rdma_port_space.RDMA_PS_TCP) -> CMID:
    listener = CMID(channel, port_space=port_space)
    listener.bind_addr(AddrInfo(src=channel.device.address, src_service=str(port), port_space=port_space,
                                flags=RAI_PASSIVE))  # fmt: skip
    listener.listen()
    return listener


def resolved(channel: CMEventChannel, address: str, port: int,
             port_space: int = rdma_port_space.RDMA_PS_TCP) -> CMID:  # fmt: skip
    """An active id with its address and route resolved and a QP."""
    cmid = CMID(channel, port_space=port_space)
    cmid.resolve_addr(AddrInfo(dst=address, dst_service=str(port), port_space=port_space))
    expect(channel, E.RDMA_CM_EVENT_ADDR_RESOLVED).ack_cm_event()
    cmid.resolve_route()
    expect(channel, E.RDMA_CM_EVENT_ROUTE_RESOLVED).ack_cm_event()
    cmid.create_qp(qp_attr(port_space))
    return cmid


def request(server: CMEventChannel, listener: CMID, port_space: int = rdma_port_space.RDMA_PS_TCP) -> CMID:
    """The next CONNECT_REQUEST's new id, with a QP."""
    event = expect(server, E.RDMA_CM_EVENT_CONNECT_REQUEST)
    child = CMID(event, listen_id=listener)
    event.ack_cm_event()
    child.create_qp(qp_attr(port_space))
    return child


def connected(server: CMEventChannel, client: CMEventChannel, port: int) -> tuple[CMID, CMID, CMID]:
    """(listener, its connected id, the client's connected id) over RC."""
    listener = listen(server, port)
    cmid = resolved(client, server.device.address, port)
    cmid.connect(ConnParam())
    child = request(server, listener)
    child.accept(ConnParam())
    expect(client, E.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
    expect(server, E.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
    return listener, child, cmid
