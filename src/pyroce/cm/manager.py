"""The NIC's connection manager: rdma_cm's ids and ib_cm's exchanges on QP1, as commands.

What the kernel's rdma_cm, ib_cm and ucma are to a real NIC, this is to pyroce's: the one
place where ids are bound, listen and connect, where CM MADs are made and answered, and where
each command is checked (errnos as ucma answers them). Drivers reach it as ``device.cm``:
pyroce's Python verbs (``verbs.cmid``, librdmacm's user-space logic in Python) and, through
the shared NIC, the system's own librdmacm. It is sans-IO: packets come in through ``Qp1``,
time as ``now`` from the engine's passes, events leave on the channels' queues.

The flows, as Linux runs them for a librdmacm program (the consumer owns its QP and moves it
with ``init_qp_attr``'s values; the CM never touches a QP):

- active: ``resolve_addr`` (ADDR_RESOLVED), ``resolve_route`` (ROUTE_RESOLVED), ``connect``
  sends a REQ, retried until a REP, REJ or the retries run out (UNREACHABLE, -ETIMEDOUT; an
  MRA extends the wait). A REP raises CONNECT_RESPONSE; the consumer moves its QP to RTR and
  RTS and calls ``accept``, which sends the RTU (librdmacm reports ESTABLISHED itself, as the
  kernel raises no event there). A REJ raises REJECTED with its reason as the status.
- passive: a REQ to a listener's service ID makes a new id and raises CONNECT_REQUEST on the
  listener's channel; ``accept`` sends the REP, retried until the RTU (ESTABLISHED; a REP
  never answered is CONNECT_ERROR); ``reject`` a REJ with the consumer's private data. A REQ
  for a service nobody listens on is answered with REJ "invalid service ID".
- either side: ``disconnect`` sends a DREQ, answered by a DREP; both raise DISCONNECTED.
- UDP port space: SIDR_REQ / SIDR_REP instead, ESTABLISHED carries the peer's QPN and Q_Key.
- multicast (a bound or resolved UD id): ``join_multicast`` raises MULTICAST_JOIN at once, as
  RoCE has no SA to ask (``cm.multicast``); ``leave_multicast`` and ``destroy_id`` leave.

Duplicates are answered as ib_cm does: a REQ again while the consumer has not answered gets
an MRA, a REQ for a connection that is over gets REJ "stale connection", a REP again after the
RTU gets the RTU again, a DREQ for an unknown connection a DREP.
"""

from __future__ import annotations

import errno
import ipaddress
import random
from collections import Counter
from collections.abc import Callable
from typing import ClassVar

from pyroce.cm.errors import CmError
from pyroce.cm.exchanges import Exchange, Exchanges
from pyroce.cm.ids import CONNECTED, CmChannel, CmId, IdState
from pyroce.cm.messages import DEFAULT_PKEY, form_tid, make_rep, make_req
from pyroce.cm.multicast import McGroup, group_address
from pyroce.cm.ports import PortTable
from pyroce.cm.qp1 import Qp1, Route
from pyroce.cm.qp_attrs import qp_attributes
from pyroce.cm.records import Address, AhValues, CmEvent, CmRoute, ConnParam, PathValues, UdParam
from pyroce.cm.timing import (
    CM_RESPONSE_TIMEOUT,
    HOP_LIMIT,
    MAX_CM_RETRIES,
    MRA_SERVICE_TIMEOUT,
    PACKET_LIFE_TIME,
    TIMEWAIT_S,
    flow_label,
    time_of,
)
from pyroce.ib.addressing import node_guid_of, roce_gid
from pyroce.ib.cm import (
    ACCEPT_PRIVATE_DATA_MAX,
    DISCONNECT_PRIVATE_DATA_MAX,
    PRIVATE_DATA_MAX,
    QPT_UD,
    REJECT_PRIVATE_DATA_MAX,
    SIDR_REP_PRIVATE_DATA_MAX,
    UDP_QKEY,
    CmEventType,
    CmOption,
    PortSpace,
    RejectReason,
    SidrStatus,
)
from pyroce.ib.enums import ibv_mtu
from pyroce.nic.events import EventQueue
from pyroce.wire.cm import (
    CmaHeader,
    CmDrep,
    CmDreq,
    CmMessage,
    CmMra,
    CmMsgResponse,
    CmRej,
    CmRep,
    CmReq,
    CmRtu,
    CmSidrRep,
    CmSidrReq,
    encode_cm,
    port_space_and_port,
    service_id,
)
from pyroce.wire.errors import WireError
from pyroce.wire.mad import MadHeader

E = CmEventType
ANY_V4 = "0.0.0.0"


class RdmaCm:
    """The connection manager of one NIC address (``device.cm``)."""

    def __init__(self, address: str, new_queue: Callable[[], EventQueue[CmEvent]], counters: Counter[str],
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.address = address
        self.gid = roce_gid(address)
        self.node_guid = node_guid_of(address)
        self.path_mtu = ibv_mtu.IBV_MTU_1024  # the port's active MTU (the host sets it from the netdev)
        self.response_timeout = CM_RESPONSE_TIMEOUT
        self.max_retries = MAX_CM_RETRIES
        self.counters = counters
        self.qp1 = Qp1(self._on_mad, counters)
        self._new_queue = new_queue
        self._rng = rng if rng is not None else random.Random()
        self.ports = PortTable(self._rng)
        self._by_comm_id: dict[int, CmId] = {}  # our comm ID (SIDR: request ID) -> id
        self._by_peer: dict[tuple[int, bytes], CmId] = {}  # (peer's comm ID, peer's GID) -> passive id
        self.exchanges: Exchanges[CmId] = Exchanges()  # resends and time waits (the engine reads its deadline)
        self._channels: set[CmChannel] = set()

    # --- channels and ids -------------------------------------------------------------------

    def open_channel(self) -> CmChannel:
        channel = CmChannel(self._new_queue())
        self._channels.add(channel)
        return channel

    def close_channel(self, channel: CmChannel) -> None:
        """Destroy the channel's ids (as closing ucma's file does) and its queue."""
        for cm_id in list(channel.ids):
            self.destroy_id(cm_id)
        channel.closed = True
        channel.events.close()
        self._channels.discard(channel)

    def close_all_channels(self) -> None:
        """Every channel closed, as the kernel closes a process's files when it ends: its
        connections get their DREQ, its unanswered requests their REJ."""
        for channel in list(self._channels):
            self.close_channel(channel)

    def create_id(self, channel: CmChannel, context: int, port_space: int, qp_type: int) -> CmId:
        if channel.closed:
            raise CmError(errno.EBADF, "the event channel is closed")
        try:
            space = PortSpace(port_space)
        except ValueError:
            raise CmError(errno.EINVAL, f"port space 0x{port_space:x} is not one of TCP, UDP, IB, IPoIB") from None
        expected = QPT_UD if space in (PortSpace.UDP, PortSpace.IPOIB) else None
        if expected is not None and qp_type != expected or expected is None and qp_type == QPT_UD:
            raise CmError(errno.EINVAL, f"QP type {qp_type} does not go with port space {space.name}")
        cm_id = CmId(channel, context, space, qp_type)
        cm_id.qkey = UDP_QKEY if space is PortSpace.UDP else 0
        channel.ids.add(cm_id)
        return cm_id

    def destroy_id(self, cm_id: CmId) -> int:
        """Destroy ``cm_id`` as the kernel does: a connection in progress is rejected, an
        established one disconnected (one DREQ), a listener's unanswered requests rejected.
        Its events not yet taken go. Returns how many events were reported on it."""
        if cm_id.destroyed:
            return cm_id.events_reported
        state = cm_id.state
        if state is IdState.ESTABLISHED:
            self._send(cm_id, self._dreq(cm_id), new_tid=True)
        elif state is IdState.REQ_SENT:
            self._reject(cm_id, RejectReason.TIMEOUT, b"", CmMsgResponse.REQ)
        elif state in (IdState.REQ_RCVD, IdState.REP_SENT, IdState.REP_RCVD):
            kind = CmMsgResponse.REP if state is IdState.REP_RCVD else CmMsgResponse.REQ
            self._reject(cm_id, RejectReason.CONSUMER_DEFINED, b"", kind)
        elif state is IdState.SIDR_REQ_RCVD:
            self._sidr_reply(cm_id, SidrStatus.REJECT, b"", 0, 0)
        for child in list(cm_id.pending):
            self.destroy_id(child)
        for group in cm_id.groups:
            group.destroyed = True
        cm_id.groups.clear()
        self._end(cm_id)
        cm_id.destroyed = True
        cm_id.channel.ids.discard(cm_id)
        if cm_id.bound:
            self.ports.release(cm_id)
        if cm_id.listener is not None:
            cm_id.listener.pending.discard(cm_id)
        cm_id.channel.events.discard(lambda event: event.cm_id is cm_id)
        return cm_id.events_reported

    def migrate_id(self, cm_id: CmId, channel: CmChannel) -> int:
        """Move ``cm_id`` and its waiting events to ``channel``; how many were reported on it."""
        self._check(cm_id)
        old = cm_id.channel
        if old is not channel:
            moving: list[CmEvent] = []
            old.events.discard(lambda event: event.cm_id is cm_id and not moving.append(event))
            old.ids.discard(cm_id)
            channel.ids.add(cm_id)
            cm_id.channel = channel
            for event in moving:
                channel.events.put(event)
        return cm_id.events_reported

    def get_event(self, channel: CmChannel) -> CmEvent | None:
        """The channel's oldest event (None if none waits: the caller waits on its fd)."""
        event = channel.events.take()
        if event is not None:
            reported = event.cm_id.listener if event.event is E.CONNECT_REQUEST else event.cm_id
            if reported is not None:
                reported.events_reported += 1
            if event.group is not None:
                event.group.events_reported += 1
        return event

    # --- addresses ----------------------------------------------------------------------------

    def bind(self, cm_id: CmId, address: Address) -> None:
        """Bind to ``address`` (the unspecified address: any of this NIC's; port 0: a free one; a
        loopback address not the NIC's: no device's, as Linux binds one, ``_on_device`` False)."""
        self._check(cm_id)
        if cm_id.state is not IdState.IDLE:
            raise CmError(errno.EINVAL, f"the id is already {cm_id.state.value}")
        host, port = address
        self._check_local(host)
        self.ports.take(cm_id, host, port)
        cm_id.state = IdState.BOUND

    def resolve_addr(self, cm_id: CmId, source: Address | None, dest: Address, timeout_ms: int) -> None:
        """Find the NIC and path to ``dest``: ADDR_RESOLVED, or ADDR_ERROR if the link cannot reach it."""
        self._check(cm_id)
        if cm_id.state not in (IdState.IDLE, IdState.BOUND, IdState.ADDR_RESOLVED):
            raise CmError(errno.EINVAL, f"cannot resolve an address while {cm_id.state.value}")
        host, port = dest
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise CmError(errno.EINVAL, f"{host!r} is not an IP address") from None
        if cm_id.state is IdState.IDLE:
            src_host = source[0] if source is not None else ANY_V4
            self._check_local(src_host)
            self.ports.take(cm_id, src_host, source[1] if source is not None else 0)
        if cm_id.local is not None and ipaddress.ip_address(cm_id.local[0]).is_unspecified:
            cm_id.local = (self.address, cm_id.local[1])  # the source is the address that reaches ``dest``
        cm_id.remote = (str(ip), port)
        dgid = roce_gid(str(ip))
        status = 0 if self._on_device(cm_id) else -errno.ENODEV
        # a multicast group has no one route to ask for (Linux resolves it to its multicast MAC)
        if status == 0 and not ip.is_multicast and self._route is not None and self._route(dgid) is None:
            status = -errno.EHOSTUNREACH
        cm_id.state = IdState.ADDR_RESOLVED if status == 0 else cm_id.state
        self._event(cm_id, E.ADDR_RESOLVED if status == 0 else E.ADDR_ERROR, status)

    def resolve_route(self, cm_id: CmId, timeout_ms: int) -> None:
        """The path to the resolved address (RoCE needs no path query): ROUTE_RESOLVED."""
        self._check(cm_id)
        if cm_id.state is not IdState.ADDR_RESOLVED or cm_id.remote is None or cm_id.local is None:
            raise CmError(errno.EINVAL, f"resolve the address first (the id is {cm_id.state.value})")
        cm_id.path = self._path(roce_gid(cm_id.remote[0]), cm_id.local[1], cm_id.remote[1], cm_id.tos, self.path_mtu)
        cm_id.state = IdState.ROUTE_RESOLVED
        self._event(cm_id, E.ROUTE_RESOLVED, 0)

    def listen(self, cm_id: CmId, backlog: int) -> None:
        self._check(cm_id)
        if cm_id.state is IdState.IDLE:
            self.ports.take(cm_id, ANY_V4, 0)
        elif cm_id.state is not IdState.BOUND:
            raise CmError(errno.EINVAL, f"cannot listen while {cm_id.state.value}")
        if self.ports.listener(cm_id.port_space, cm_id.local[1]) not in (None, cm_id):  # type: ignore[index]
            raise CmError(errno.EADDRINUSE, f"port {cm_id.local[1]} already has a listener")  # type: ignore[index]
        cm_id.backlog = backlog if backlog > 0 else 1024
        cm_id.state = IdState.LISTEN

    # --- multicast --------------------------------------------------------------------------

    def join_multicast(self, cm_id: CmId, address: str, join_flags: int, context: int) -> McGroup:
        """Join the group of multicast ``address`` (rdma_join_multicast_ex): a UD id bound or
        resolved to this NIC's address gets MULTICAST_JOIN with the group's AH, QPN and Q_Key;
        ``context`` comes back in the event. Each join is a group of its own (Linux takes the
        same address twice on one id)."""
        self._check(cm_id)
        host, flags = group_address(address, join_flags)
        has_device = cm_id.local is not None and self._is_local(ipaddress.ip_address(cm_id.local[0]).packed)
        if cm_id.state not in (IdState.BOUND, IdState.ADDR_RESOLVED) or not has_device:
            raise CmError(errno.EINVAL, f"a multicast join needs an id bound or resolved to this NIC's address "
                                        f"(the id is {cm_id.state.value} at {cm_id.local})")  # fmt: skip
        if cm_id.qp_type != QPT_UD:
            raise CmError(errno.EINVAL, "multicast is for UD ids (RDMA_PS_UDP, RDMA_PS_IPOIB)")
        group = McGroup(cm_id, host, flags, context)
        cm_id.groups.append(group)
        self._event(cm_id, E.MULTICAST_JOIN, 0, ud=group.joined(), context=context, group=group)
        return group

    def leave_multicast(self, group: McGroup) -> int:
        """Leave a group joined before (ENOENT if it was left or its id destroyed): its events
        not yet taken go. Returns how many of its events were reported."""
        if group.destroyed:
            raise CmError(errno.ENOENT, f"the multicast group {group.address} was left already")
        group.destroyed = True
        group.cm_id.groups.remove(group)
        group.cm_id.channel.events.discard(lambda event: event.group is group)
        return group.events_reported

    # --- connections ------------------------------------------------------------------------

    def connect(self, cm_id: CmId, param: ConnParam) -> None:
        """Send a REQ (a SIDR_REQ for a UDP id) to the resolved address."""
        self._check(cm_id)
        if cm_id.state is not IdState.ROUTE_RESOLVED or cm_id.path is None:
            raise CmError(errno.EINVAL, f"resolve the route first (the id is {cm_id.state.value})")
        limit = PRIVATE_DATA_MAX.get(cm_id.port_space, 92)
        if len(param.private_data) > limit:
            raise CmError(errno.EINVAL, f"{len(param.private_data)} bytes of private data exceed {limit}")
        local, remote = cm_id.local, cm_id.remote
        assert local is not None and remote is not None
        private = param.private_data
        if cm_id.port_space is not PortSpace.IB:
            private = self._cma_header(local, remote) + private
        cm_id.local_comm_id = self._new_comm_id(cm_id)
        cm_id.qp_num = param.qp_num
        sid = service_id(cm_id.port_space, remote[1])
        if cm_id.qp_type == QPT_UD:
            cm_id.state = IdState.SIDR_REQ_SENT
            self._send(
                cm_id,
                CmSidrReq(request_id=cm_id.local_comm_id, service_id=sid, private_data=private),
                new_tid=True,
                exchange=True,
            )
            return
        cm_id.seq_num = self._rng.getrandbits(24)
        cm_id.responder_resources, cm_id.initiator_depth = param.responder_resources, param.initiator_depth
        req = make_req(cm_id, param, self.node_guid, self.gid, private, self.response_timeout, self.max_retries)
        cm_id.req = req
        cm_id.state = IdState.REQ_SENT
        self._send(cm_id, req, new_tid=True, exchange=True)

    def accept(self, cm_id: CmId, param: ConnParam | None, context: int | None = None) -> None:
        """Passive: answer the REQ with a REP (SIDR: a SIDR_REP). Active, after
        CONNECT_RESPONSE: send the RTU; the connection is established."""
        self._check(cm_id)
        if context is not None:
            cm_id.context = context
        param = param if param is not None else ConnParam()
        state = cm_id.state
        if state is IdState.REP_RCVD:
            self._send(cm_id, CmRtu(local_comm_id=cm_id.local_comm_id, remote_comm_id=cm_id.remote_comm_id))
            cm_id.state = IdState.ESTABLISHED
            return
        if state is IdState.SIDR_REQ_RCVD:
            if len(param.private_data) > SIDR_REP_PRIVATE_DATA_MAX:
                raise CmError(errno.EINVAL, f"{len(param.private_data)} bytes of private data exceed "
                                            f"{SIDR_REP_PRIVATE_DATA_MAX}")  # fmt: skip
            cm_id.qp_num = param.qp_num
            self._sidr_reply(cm_id, SidrStatus.SUCCESS, param.private_data, param.qp_num, param.qkey or cm_id.qkey)
            cm_id.state = IdState.ESTABLISHED
            self._leave_listener(cm_id)
            return
        if state is not IdState.REQ_RCVD or cm_id.req is None:
            raise CmError(errno.EINVAL, f"nothing to accept: the id is {state.value}")
        if len(param.private_data) > ACCEPT_PRIVATE_DATA_MAX:
            raise CmError(
                errno.EINVAL, f"{len(param.private_data)} bytes of private data exceed {ACCEPT_PRIVATE_DATA_MAX}"
            )
        cm_id.qp_num = param.qp_num
        cm_id.responder_resources, cm_id.initiator_depth = param.responder_resources, param.initiator_depth
        rep = make_rep(cm_id, param, self.node_guid)
        cm_id.rep = rep
        cm_id.state = IdState.REP_SENT
        self._leave_listener(cm_id)
        self._send(cm_id, rep, exchange=True)

    def reject(self, cm_id: CmId, private_data: bytes = b"", reason: int | None = None) -> None:
        """Refuse a connection request (or, active, a REP) with the consumer's private data."""
        self._check(cm_id)
        if len(private_data) > REJECT_PRIVATE_DATA_MAX:
            raise CmError(errno.EINVAL, f"{len(private_data)} bytes of private data exceed {REJECT_PRIVATE_DATA_MAX}")
        state = cm_id.state
        if state is IdState.SIDR_REQ_RCVD:
            self._sidr_reply(cm_id, SidrStatus.REJECT, private_data, 0, 0)
        elif state in (IdState.REQ_RCVD, IdState.REP_RCVD):
            kind = CmMsgResponse.REP if state is IdState.REP_RCVD else CmMsgResponse.REQ
            self._reject(cm_id, reason if reason is not None else RejectReason.CONSUMER_DEFINED, private_data, kind)
        else:
            raise CmError(errno.EINVAL, f"nothing to reject: the id is {state.value}")
        cm_id.state = IdState.FAILED
        self._leave_listener(cm_id)

    def disconnect(self, cm_id: CmId, private_data: bytes = b"") -> None:
        """Send a DREQ; DISCONNECTED follows the DREP (or the DREQ's timeout). Once the
        connection is over, again is harmless."""
        self._check(cm_id)
        if len(private_data) > DISCONNECT_PRIVATE_DATA_MAX:
            raise CmError(
                errno.EINVAL, f"{len(private_data)} bytes of private data exceed {DISCONNECT_PRIVATE_DATA_MAX}"
            )
        state = cm_id.state
        if cm_id.qp_type == QPT_UD and state is IdState.ESTABLISHED:
            return  # a UD id has no connection to end (SIDR resolved a peer, nothing more)
        if state in (IdState.ESTABLISHED, IdState.REP_SENT):
            if state is IdState.REP_SENT:
                self._end_exchange(cm_id)
            cm_id.state = IdState.DREQ_SENT
            self._send(cm_id, self._dreq(cm_id, private_data), new_tid=True, exchange=True)
        elif state not in (IdState.DREQ_SENT, IdState.DREQ_RCVD, IdState.TIMEWAIT, IdState.FAILED):
            raise CmError(errno.EINVAL, f"not connected: the id is {state.value}")

    def establish(self, cm_id: CmId) -> None:
        """The QP took its first packet before the RTU came (ucma's NOTIFY of COMM_EST)."""
        self._check(cm_id)
        if cm_id.state is IdState.REP_SENT:
            self._established(cm_id)

    def init_qp_attr(self, cm_id: CmId, qp_state: int) -> tuple[dict[str, object], int]:
        """The ``ibv_qp_attr`` values (by field name) and mask that move the id's QP to
        ``qp_state`` for this connection (``rdma_init_qp_attr``)."""
        self._check(cm_id)
        return qp_attributes(cm_id, qp_state)

    def query(self, cm_id: CmId) -> CmRoute:
        """The id's route; an id bound to no device's address has no GID, port or node GUID (so
        librdmacm leaves its ``verbs`` NULL, as for a loopback bind on Linux)."""
        self._check(cm_id)
        if not self._on_device(cm_id):
            return CmRoute(cm_id.local, cm_id.remote, bytes(16), bytes(16), 0, 0, 0)
        path = cm_id.path
        dgid = path.dgid if path is not None else (roce_gid(cm_id.remote[0]) if cm_id.remote else bytes(16))
        return CmRoute(cm_id.local, cm_id.remote, self.gid, dgid, DEFAULT_PKEY, 1, self.node_guid,
                       [path] if path is not None else [])  # fmt: skip

    def set_option(self, cm_id: CmId, level: int, name: int, value: bytes) -> None:
        """``rdma_set_option``: the id's type of service, address reuse, IPv6-only, ACK timeout."""
        self._check(cm_id)
        if level != CmOption.LEVEL_ID:
            raise CmError(errno.ENOSYS, f"option level {level} is not supported")
        number = int.from_bytes(value[:4], "little") if value else 0
        if name == CmOption.ID_TOS:
            cm_id.tos = number & 0xFF
        elif name == CmOption.ID_REUSEADDR:
            if cm_id.state is not IdState.IDLE:
                raise CmError(errno.EINVAL, "address reuse must be set before binding")
            cm_id.reuse_address = bool(number)
        elif name == CmOption.ID_AFONLY:
            pass  # an IPv4 NIC has no IPv6 addresses to exclude
        elif name == CmOption.ID_ACK_TIMEOUT:
            cm_id.ack_timeout = min(number & 0xFF, 31)
        else:
            raise CmError(errno.ENOSYS, f"option {name} is not supported")

    # --- the engine's side ----------------------------------------------------------------

    _route: Route | None = None

    def attach(self, route: Route) -> None:
        """The engine's link reaches GIDs through ``route`` (resolve_addr asks it)."""
        self._route = route

    def handle_timer(self, now: float) -> None:
        """Resend what is still unanswered, give up what has run out of retries, forget
        connections whose time wait is over."""
        resend, expired = self.exchanges.due(now)
        for exchange in resend:
            self.counters["cm_mads_resent"] += 1
            self.qp1.send(exchange.gid, exchange.mad)
        for cm_id in expired:
            self._timed_out(cm_id)

    # --- MADs in ----------------------------------------------------------------------------

    def _on_mad(self, gid: bytes, header: MadHeader, message: CmMessage, now: float) -> None:
        self.exchanges.now = now
        handler = self._HANDLERS.get(type(message))
        if handler is None:
            self.counters["cm_drop_unhandled"] += 1
            return
        handler(self, gid, header, message, now)

    def _on_req(self, gid: bytes, header: MadHeader, req: CmReq, now: float) -> None:
        key = (req.local_comm_id, gid)
        known = self._by_peer.get(key)
        if known is not None:
            self.counters["cm_duplicate_req"] += 1
            if known.state is IdState.REQ_RCVD:  # the consumer has not answered yet: ask for patience
                self._send(
                    known,
                    CmMra(
                        local_comm_id=known.local_comm_id,
                        remote_comm_id=known.remote_comm_id,
                        message_mraed=CmMsgResponse.REQ,
                        service_timeout=MRA_SERVICE_TIMEOUT,
                    ),
                )
            return
        if self.exchanges.in_timewait(key):
            self.counters["cm_req_stale"] += 1
            self._answer_rej(gid, header.tid, req.local_comm_id, RejectReason.STALE_CONN, CmMsgResponse.REQ)
            return
        listener = self._listener(req.service_id)
        cma = None
        if listener is not None and listener.port_space is not PortSpace.IB:
            cma = self._cma_of(req.private_data)
            if cma is None or not self._is_local(cma.dst):
                listener = None
        if listener is None:
            self.counters["cm_req_no_listener"] += 1
            self._answer_rej(gid, header.tid, req.local_comm_id, RejectReason.INVALID_SERVICE_ID, CmMsgResponse.REQ)
            return
        if len(listener.pending) >= listener.backlog:
            self.counters["cm_req_backlog_full"] += 1
            self._answer_rej(gid, header.tid, req.local_comm_id, RejectReason.CONSUMER_DEFINED, CmMsgResponse.REQ)
            return
        child = self._child(listener, gid, header, cma, req.local_comm_id)
        child.req = req
        child.remote_ca_guid = req.local_ca_guid
        child.seq_num = self._rng.getrandbits(24)
        child.responder_resources, child.initiator_depth = req.initiator_depth, req.responder_resources
        child.path = PathValues(dgid=req.primary_local_gid, sgid=self.gid, flow_label=req.primary_flow_label,
                                hop_limit=req.primary_hop_limit or HOP_LIMIT,
                                traffic_class=req.primary_traffic_class, pkey=DEFAULT_PKEY, mtu=req.path_mtu,
                                rate=0, packet_life_time=PACKET_LIFE_TIME)  # fmt: skip
        child.state = IdState.REQ_RCVD
        data = req.private_data[36:] if cma is not None else req.private_data
        conn = ConnParam(bytes(data), req.initiator_depth, req.responder_resources, req.end_to_end_flow_control,
                         req.retry_count, req.rnr_retry_count, req.srq, req.local_qpn)  # fmt: skip
        self._event(child, E.CONNECT_REQUEST, 0, conn=conn, context=listener.context)

    def _on_sidr_req(self, gid: bytes, header: MadHeader, sreq: CmSidrReq, now: float) -> None:
        key = (sreq.request_id, gid)
        if key in self._by_peer:
            self.counters["cm_duplicate_sidr_req"] += 1
            return
        listener = self._listener(sreq.service_id)
        cma = self._cma_of(sreq.private_data)
        if listener is None or listener.qp_type != QPT_UD or cma is None or not self._is_local(cma.dst):
            self.counters["cm_req_no_listener"] += 1
            rep = CmSidrRep(request_id=sreq.request_id, status=SidrStatus.UNSUPPORTED, service_id=sreq.service_id)
            self.qp1.send(gid, encode_cm(header.tid, rep))
            return
        child = self._child(listener, gid, header, cma, sreq.request_id)
        child.path = self._path(gid, child.local[1] if child.local else 0, cma.port, 0, self.path_mtu)
        child.state = IdState.SIDR_REQ_RCVD
        ud = UdParam(bytes(sreq.private_data[36:]), AhValues(gid), 0, 0)
        self._event(child, E.CONNECT_REQUEST, 0, ud=ud, context=listener.context)

    def _on_mra(self, gid: bytes, header: MadHeader, mra: CmMra, now: float) -> None:
        cm_id = self._mine(mra.remote_comm_id, gid)
        waiting = {CmMsgResponse.REQ: IdState.REQ_SENT, CmMsgResponse.REP: IdState.REP_SENT}.get(mra.message_mraed)
        if cm_id is None or not self.exchanges.waiting(cm_id) or cm_id.state is not waiting:
            self.counters["cm_drop_stray_mra"] += 1
            return
        # the peer needs longer: wait what it asks, then go on resending as before
        self.exchanges.extend(cm_id, now + time_of(mra.service_timeout) + time_of(PACKET_LIFE_TIME))

    def _on_rej(self, gid: bytes, header: MadHeader, rej: CmRej, now: float) -> None:
        cm_id = self._mine(rej.remote_comm_id, gid)
        if cm_id is None or cm_id.state not in (IdState.REQ_SENT, IdState.REP_SENT, IdState.REP_RCVD):
            self.counters["cm_drop_stray_rej"] += 1
            return
        self._end_exchange(cm_id)
        cm_id.state = IdState.FAILED
        self._forget_comm_id(cm_id)
        self._event(cm_id, E.REJECTED, rej.reason, conn=ConnParam(bytes(rej.private_data)))

    def _on_rep(self, gid: bytes, header: MadHeader, rep: CmRep, now: float) -> None:
        cm_id = self._mine(rep.remote_comm_id, gid)
        if cm_id is None:
            self.counters["cm_drop_stray_rep"] += 1
            self._answer_rej(gid, header.tid, rep.local_comm_id, RejectReason.INVALID_COMM_ID, CmMsgResponse.REP)
            return
        if cm_id.state is IdState.ESTABLISHED and cm_id.rep is not None:
            self.counters["cm_duplicate_rep"] += 1  # our RTU was lost: again
            self._send(cm_id, CmRtu(local_comm_id=cm_id.local_comm_id, remote_comm_id=cm_id.remote_comm_id))
            return
        if cm_id.state is not IdState.REQ_SENT:
            self.counters["cm_drop_stray_rep"] += 1
            return
        self._end_exchange(cm_id)
        cm_id.rep = rep
        cm_id.remote_comm_id = rep.local_comm_id
        cm_id.remote_ca_guid = rep.local_ca_guid
        cm_id.initiator_depth, cm_id.responder_resources = rep.responder_resources, rep.initiator_depth
        cm_id.state = IdState.REP_RCVD
        conn = ConnParam(bytes(rep.private_data), rep.initiator_depth, rep.responder_resources,
                         rep.end_to_end_flow_control, 0, rep.rnr_retry_count, rep.srq, rep.local_qpn)  # fmt: skip
        self._event(cm_id, E.CONNECT_RESPONSE, 0, conn=conn)

    def _on_rtu(self, gid: bytes, header: MadHeader, rtu: CmRtu, now: float) -> None:
        cm_id = self._mine(rtu.remote_comm_id, gid)
        if cm_id is None or cm_id.state is not IdState.REP_SENT:
            self.counters["cm_drop_stray_rtu"] += 1
            return
        self._established(cm_id)

    def _on_dreq(self, gid: bytes, header: MadHeader, dreq: CmDreq, now: float) -> None:
        cm_id = self._mine(dreq.remote_comm_id, gid)
        answer = CmDrep(local_comm_id=dreq.remote_comm_id, remote_comm_id=dreq.local_comm_id)
        if cm_id is None or cm_id.state not in (IdState.ESTABLISHED, IdState.REP_SENT, IdState.DREQ_SENT):
            self.counters["cm_dreq_answered_unknown"] += cm_id is None
            self.qp1.send(gid, encode_cm(header.tid, answer))  # a DREP for what is over or unknown
            return
        self._end_exchange(cm_id)
        self.qp1.send(gid, encode_cm(header.tid, answer))
        self._disconnected(cm_id, now, bytes(dreq.private_data))

    def _on_drep(self, gid: bytes, header: MadHeader, drep: CmDrep, now: float) -> None:
        cm_id = self._mine(drep.remote_comm_id, gid)
        if cm_id is None or cm_id.state is not IdState.DREQ_SENT:
            self.counters["cm_drop_stray_drep"] += 1
            return
        self._end_exchange(cm_id)
        self._disconnected(cm_id, now, bytes(drep.private_data))

    def _on_sidr_rep(self, gid: bytes, header: MadHeader, srep: CmSidrRep, now: float) -> None:
        cm_id = self._mine(srep.request_id, gid)
        if cm_id is None or cm_id.state is not IdState.SIDR_REQ_SENT or cm_id.path is None:
            self.counters["cm_drop_stray_sidr_rep"] += 1
            return
        self._end_exchange(cm_id)
        self._forget_comm_id(cm_id)
        if srep.status != SidrStatus.SUCCESS:
            cm_id.state = IdState.FAILED
            self._event(cm_id, E.UNREACHABLE, srep.status, ud=UdParam(bytes(srep.private_data), AhValues(gid), 0, 0))
            return
        cm_id.state = IdState.ESTABLISHED
        path = cm_id.path
        ah = AhValues(path.dgid, hop_limit=path.hop_limit, traffic_class=path.traffic_class, flow_label=path.flow_label)
        self._event(cm_id, E.ESTABLISHED, 0, ud=UdParam(bytes(srep.private_data), ah, srep.qpn, srep.qkey))

    _HANDLERS: ClassVar[dict[type, Callable[..., None]]] = {
        CmReq: _on_req, CmMra: _on_mra, CmRej: _on_rej, CmRep: _on_rep, CmRtu: _on_rtu, CmDreq: _on_dreq,
        CmDrep: _on_drep, CmSidrReq: _on_sidr_req, CmSidrRep: _on_sidr_rep,
    }  # fmt: skip

    # --- state changes ----------------------------------------------------------------------

    def _established(self, cm_id: CmId) -> None:
        self._end_exchange(cm_id)
        cm_id.state = IdState.ESTABLISHED
        self._event(cm_id, E.ESTABLISHED, 0)

    def _disconnected(self, cm_id: CmId, now: float, private_data: bytes = b"") -> None:
        was_connected = cm_id.state in CONNECTED or cm_id.state is IdState.REP_SENT
        cm_id.state = IdState.TIMEWAIT
        self.exchanges.enter_timewait((cm_id.remote_comm_id, self._peer_gid(cm_id)), TIMEWAIT_S, now)
        if was_connected:
            self._event(cm_id, E.DISCONNECTED, 0, conn=ConnParam(private_data))

    def _timed_out(self, cm_id: CmId) -> None:
        """An exchange ran out of retries: the event librdmacm reports for it."""
        state = cm_id.state
        self.counters["cm_timeouts"] += 1
        if state in (IdState.REQ_SENT, IdState.SIDR_REQ_SENT):
            cm_id.state = IdState.FAILED
            self._forget_comm_id(cm_id)
            self._event(cm_id, E.UNREACHABLE, -errno.ETIMEDOUT)
        elif state is IdState.REP_SENT:
            cm_id.state = IdState.FAILED
            self._event(cm_id, E.CONNECT_ERROR, -errno.ETIMEDOUT)
        elif state is IdState.DREQ_SENT:
            cm_id.state = IdState.TIMEWAIT
            self._event(cm_id, E.DISCONNECTED, 0)

    def _end(self, cm_id: CmId) -> None:
        """Forget everything the id had in flight (it is being destroyed)."""
        self._end_exchange(cm_id)
        self._forget_comm_id(cm_id)
        if cm_id.state in CONNECTED and cm_id.remote_comm_id:
            self.exchanges.enter_timewait((cm_id.remote_comm_id, self._peer_gid(cm_id)), TIMEWAIT_S)

    def _end_exchange(self, cm_id: CmId) -> None:
        self.exchanges.end(cm_id)

    def _forget_comm_id(self, cm_id: CmId) -> None:
        if self._by_comm_id.get(cm_id.local_comm_id) is cm_id:
            del self._by_comm_id[cm_id.local_comm_id]
        key = (cm_id.remote_comm_id, self._peer_gid(cm_id))
        if self._by_peer.get(key) is cm_id:
            del self._by_peer[key]

    def _leave_listener(self, cm_id: CmId) -> None:
        if cm_id.listener is not None:
            cm_id.listener.pending.discard(cm_id)

    # --- MADs out ---------------------------------------------------------------------------

    def _send(self, cm_id: CmId, message: CmMessage, new_tid: bool = False, exchange: bool = False) -> None:
        """Send ``message`` to the id's peer; with ``exchange``, resend it until answered."""
        if new_tid:
            cm_id.tid = form_tid(cm_id.local_comm_id)
        gid = self._peer_gid(cm_id)
        mad = encode_cm(cm_id.tid, message)
        self.qp1.send(gid, mad)
        if exchange:
            timeout = 2 * time_of(PACKET_LIFE_TIME) + time_of(self.response_timeout)
            self.exchanges.start(cm_id, Exchange(gid, mad, timeout, self.max_retries))

    def _dreq(self, cm_id: CmId, private_data: bytes = b"") -> CmDreq:
        return CmDreq(local_comm_id=cm_id.local_comm_id, remote_comm_id=cm_id.remote_comm_id,
                      remote_qpn=cm_id.peer_qpn, private_data=private_data)  # fmt: skip

    def _reject(self, cm_id: CmId, reason: int, private_data: bytes, kind: CmMsgResponse) -> None:
        self._end_exchange(cm_id)
        rej = CmRej(local_comm_id=cm_id.local_comm_id, remote_comm_id=cm_id.remote_comm_id, message_rejected=kind,
                    reason=reason, private_data=private_data)  # fmt: skip
        self.qp1.send(self._peer_gid(cm_id), encode_cm(cm_id.tid, rej))
        self._forget_comm_id(cm_id)

    def _answer_rej(self, gid: bytes, tid: int, remote_comm_id: int, reason: RejectReason, kind: CmMsgResponse) -> None:
        """A REJ for a message no id takes (no listener, a stale or unknown connection)."""
        rej = CmRej(local_comm_id=0, remote_comm_id=remote_comm_id, message_rejected=kind, reason=reason)
        self.qp1.send(gid, encode_cm(tid, rej))

    def _sidr_reply(self, cm_id: CmId, status: SidrStatus, private_data: bytes, qpn: int, qkey: int) -> None:
        assert cm_id.req is None
        rep = CmSidrRep(request_id=cm_id.remote_comm_id, status=status, qpn=qpn,
                        service_id=service_id(cm_id.port_space, cm_id.local[1] if cm_id.local else 0),
                        qkey=qkey, private_data=private_data)  # fmt: skip
        self.qp1.send(self._peer_gid(cm_id), encode_cm(cm_id.tid, rep))
        self._forget_comm_id(cm_id)

    # --- helpers ----------------------------------------------------------------------------

    def _event(self, cm_id: CmId, event: CmEventType, status: int, conn: ConnParam | None = None,
               ud: UdParam | None = None, context: int | None = None, group: McGroup | None = None) -> None:  # fmt: skip
        if cm_id.destroyed:
            return
        context = cm_id.context if context is None else context
        cm_id.channel.events.put(CmEvent(event, context, cm_id, status, conn, ud, group))

    def _child(self, listener: CmId, gid: bytes, header: MadHeader, cma: CmaHeader | None, peer_comm_id: int) -> CmId:
        """A new passive id for a request to ``listener``."""
        child = CmId(listener.channel, listener.context, listener.port_space, listener.qp_type)
        child.listener = listener
        child.qkey = listener.qkey
        child.tid = header.tid
        local_host = self.address if listener.local is None or listener.local[0] == ANY_V4 else listener.local[0]
        child.local = (local_host, listener.local[1] if listener.local else 0)
        peer_host = str(ipaddress.IPv6Address(gid).ipv4_mapped or ipaddress.IPv6Address(gid))
        child.remote = (peer_host, cma.port if cma is not None else 0)
        child.remote_comm_id = peer_comm_id
        child.local_comm_id = self._new_comm_id(child)
        child.peer_gid = gid
        listener.pending.add(child)
        listener.channel.ids.add(child)
        self._by_peer[(peer_comm_id, gid)] = child
        return child

    def _peer_gid(self, cm_id: CmId) -> bytes:
        if cm_id.peer_gid is not None:
            return cm_id.peer_gid
        if cm_id.path is not None:
            return cm_id.path.dgid
        return roce_gid(cm_id.remote[0]) if cm_id.remote else bytes(16)

    def _mine(self, comm_id: int, gid: bytes) -> CmId | None:
        """The id whose comm ID (or SIDR request ID) a message names, if its peer sent it."""
        cm_id = self._by_comm_id.get(comm_id)
        if cm_id is None or self._peer_gid(cm_id) != gid:
            return None
        return cm_id

    def _new_comm_id(self, cm_id: CmId) -> int:
        while True:
            comm_id = self._rng.getrandbits(32)
            if comm_id and comm_id not in self._by_comm_id:
                self._by_comm_id[comm_id] = cm_id
                return comm_id

    def _path(self, dgid: bytes, source_port: int, dest_port: int, tos: int, mtu: int) -> PathValues:
        return PathValues(dgid=dgid, sgid=self.gid, flow_label=flow_label(source_port, dest_port), hop_limit=HOP_LIMIT,
                          traffic_class=tos, pkey=DEFAULT_PKEY, mtu=mtu, rate=0,
                          packet_life_time=PACKET_LIFE_TIME)  # fmt: skip

    def _cma_header(self, local: Address, remote: Address) -> bytes:
        src = ipaddress.ip_address(self.address if local[0] == ANY_V4 else local[0])
        return CmaHeader(src.version, local[1], src.packed, ipaddress.ip_address(remote[0]).packed).encode()

    @staticmethod
    def _cma_of(private_data: bytes) -> CmaHeader | None:
        """rdma_cm's header at the start of a request's private data, None if there is none."""
        try:
            return CmaHeader.parse(private_data)
        except WireError:
            return None

    def _is_local(self, packed: bytes) -> bool:
        return ipaddress.ip_address(packed) == ipaddress.ip_address(self.address)

    def _check(self, cm_id: CmId) -> None:
        if cm_id.destroyed:
            raise CmError(errno.EINVAL, "the id was destroyed")

    def _listener(self, sid: int) -> CmId | None:
        """The id listening on service ID ``sid``, if any."""
        try:
            space, port = port_space_and_port(sid)
        except ValueError:
            return None
        listener = self.ports.listener(PortSpace(space), port)
        return listener if listener is not None and self._on_device(listener) else None

    def _on_device(self, cm_id: CmId) -> bool:
        """Whether the id is bound to this NIC (its address or the wildcard), not to a loopback
        address of no device's (Linux's ``rdma_bind_addr`` of 127.0.0.1 on a host whose RDMA
        devices are on other interfaces: bound, ``verbs`` NULL, reached by no REQ)."""
        return cm_id.local is None or self._is_mine(ipaddress.ip_address(cm_id.local[0]))

    def _is_mine(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return ip.is_unspecified or ip == ipaddress.ip_address(self.address)

    def _check_local(self, host: str) -> None:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise CmError(errno.EINVAL, f"{host!r} is not an IP address") from None
        if not self._is_mine(ip) and not ip.is_loopback:
            raise CmError(errno.EADDRNOTAVAIL, f"{host} is not this NIC's address ({self.address})")
