"""The NIC's connection manager (``pyroce.cm``) between two NICs on an in-memory wire, in
simulated time: the exchanges, the events in librdmacm's order, the QP attributes both sides
derive, and every way a connection fails."""

from __future__ import annotations

import errno
import select
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyroce.cm.manager import CmError
from pyroce.cm.records import CmEvent, ConnParam
from pyroce.host.assembly import build_device
from pyroce.ib.cm import UDP_QKEY, CmEventType, PortSpace, RejectReason
from pyroce.ib.enums import ibv_qp_attr_mask, ibv_qp_state
from pyroce.link.memory import MemoryWire
from pyroce.nic.device import NicDevice
from pyroce.wire import BTH, QP1, Deth, Opcode, Packet
from pyroce.wire.cm import CmaHeader, CmReq, encode_cm
from pyroce.wire.framing import RocePath

E = CmEventType
RC, UD = 2, 4
SERVER, CLIENT = "10.9.0.1", "10.9.0.2"
PORT = 7174
MAPPED = bytes(10) + b"\xff\xff"  # an IPv4-mapped GID's first 12 bytes


class Clock:
    """Simulated time: each ``run`` steps both NICs until neither has work left."""

    def __init__(self, devices: list[NicDevice]) -> None:
        self.devices = devices
        self.now = 0.0

    def run(self, seconds: float = 0.0) -> None:
        end = self.now + seconds
        while True:
            for _ in range(200):
                for device in self.devices:
                    device.step(self.now)
                links = [device.engine.port.link for device in self.devices]
                if (
                    not any(device.engine.has_work for device in self.devices)
                    and not select.select(links, [], [], 0)[0]
                ):
                    break
            deadlines = [d for d in (dev.engine.next_deadline() for dev in self.devices) if d is not None]
            upcoming = min(deadlines) if deadlines else None
            if upcoming is None or upcoming > end:
                self.now = max(self.now, end)
                return
            self.now = max(self.now, upcoming)


@pytest.fixture
def nics() -> Iterator[tuple[NicDevice, NicDevice, Clock]]:
    wire = MemoryWire()
    server = build_device("sim0", wire.link(SERVER), progress="host")
    client = build_device("sim1", wire.link(CLIENT), progress="host")
    yield server, client, Clock([server, client])
    server.close()
    client.close()


def events(device: NicDevice, channel: object) -> list[CmEvent]:
    got = []
    while (event := device.cm.get_event(channel)) is not None:
        got.append(event)
    return got


def kinds(found: list[CmEvent]) -> list[CmEventType]:
    return [event.event for event in found]


def listen(device: NicDevice, port: int = PORT, qp_type: int = RC, space: PortSpace = PortSpace.TCP, backlog: int = 16):
    channel = device.cm.open_channel()
    listener = device.cm.create_id(channel, 1, space, qp_type)
    device.cm.bind(listener, ("0.0.0.0", port))
    device.cm.listen(listener, backlog)
    return channel, listener


def resolve(device: NicDevice, clock: Clock, port: int = PORT, qp_type: int = RC, space: PortSpace = PortSpace.TCP):
    channel = device.cm.open_channel()
    cm_id = device.cm.create_id(channel, 2, space, qp_type)
    device.cm.resolve_addr(cm_id, None, (SERVER, port), 2000)
    device.cm.resolve_route(cm_id, 2000)
    clock.run()
    assert kinds(events(device, channel)) == [E.ADDR_RESOLVED, E.ROUTE_RESOLVED]
    return channel, cm_id


def connect_pair(nics, private: bytes = b"hello"):
    server, client, clock = nics
    s_channel, listener = listen(server)
    c_channel, active = resolve(client, clock)
    client.cm.connect(active, ConnParam(private, 1, 1, 0, 7, 7, 0, qp_num=0x21))
    clock.run()
    (request,) = events(server, s_channel)
    assert request.event is E.CONNECT_REQUEST and request.context == 1 and request.cm_id is not listener
    return s_channel, listener, request, c_channel, active


def test_a_connection_is_made_used_and_ended_in_librdmacms_order(nics) -> None:
    server, client, clock = nics
    s_channel, _listener, request, c_channel, active = connect_pair(nics)
    passive = request.cm_id
    assert request.conn.private_data[:5] == b"hello" and request.conn.qp_num == 0x21
    assert passive.remote[0] == CLIENT and passive.local == (SERVER, PORT)
    server.cm.accept(passive, ConnParam(b"welcome", 1, 1, 0, 7, 7, 0, qp_num=0x31))
    clock.run()
    (response,) = events(client, c_channel)
    assert response.event is E.CONNECT_RESPONSE and response.conn.qp_num == 0x31
    assert response.conn.private_data[:7] == b"welcome"
    # the QP attributes each side moves its QP with name the other's QPN and PSNs
    c_rtr, c_mask = client.cm.init_qp_attr(active, ibv_qp_state.IBV_QPS_RTR)
    s_rtr, _ = server.cm.init_qp_attr(passive, ibv_qp_state.IBV_QPS_RTR)
    c_rts, _ = client.cm.init_qp_attr(active, ibv_qp_state.IBV_QPS_RTS)
    s_rts, _ = server.cm.init_qp_attr(passive, ibv_qp_state.IBV_QPS_RTS)
    assert c_rtr["dest_qp_num"] == 0x31 and s_rtr["dest_qp_num"] == 0x21
    assert c_rtr["rq_psn"] == s_rts["sq_psn"] and s_rtr["rq_psn"] == c_rts["sq_psn"]
    assert c_mask & ibv_qp_attr_mask.IBV_QP_DEST_QPN
    assert c_rtr["ah_attr"].dgid == MAPPED + bytes([10, 9, 0, 1]) and s_rtr["ah_attr"].dgid == MAPPED + bytes(
        [10, 9, 0, 2]
    )
    client.cm.accept(active, None)  # the RTU: librdmacm reports ESTABLISHED itself
    clock.run()
    assert events(client, c_channel) == []
    assert kinds(events(server, s_channel)) == [E.ESTABLISHED]
    client.cm.disconnect(active)
    clock.run()
    assert kinds(events(server, s_channel)) == [E.DISCONNECTED]
    assert kinds(events(client, c_channel)) == [E.DISCONNECTED]
    server.cm.disconnect(passive)  # already over: harmless, as after rdma_disconnect's DISCONNECTED
    assert client.counters["cm_mads_sent"] == 3 and server.counters["cm_mads_sent"] == 2  # REQ RTU DREQ; REP DREP


def test_a_port_nobody_listens_on_is_rejected_with_invalid_service_id(nics) -> None:
    server, client, clock = nics
    channel, cm_id = resolve(client, clock, port=9999)
    client.cm.connect(cm_id, ConnParam(qp_num=0x21))
    clock.run()
    (event,) = events(client, channel)
    assert event.event is E.REJECTED and event.status == RejectReason.INVALID_SERVICE_ID
    assert server.counters["cm_req_no_listener"] == 1


def test_a_consumer_reject_carries_its_private_data(nics) -> None:
    server, client, clock = nics
    _s_channel, _listener, request, c_channel, _active = connect_pair(nics)
    server.cm.reject(request.cm_id, b"go away")
    clock.run()
    (event,) = events(client, c_channel)
    assert event.event is E.REJECTED and event.status == RejectReason.CONSUMER_DEFINED
    assert event.conn.private_data[:7] == b"go away"


def test_a_peer_that_never_answers_is_unreachable_after_the_retries(nics) -> None:
    server, client, clock = nics
    client.cm.max_retries = 2
    channel, cm_id = resolve(client, clock, port=PORT)
    server.engine.port.active = False  # the server's port is down: nothing reaches it
    client.cm.connect(cm_id, ConnParam(qp_num=0x21))
    clock.run(60.0)
    (event,) = events(client, channel)
    assert event.event is E.UNREACHABLE and event.status == -errno.ETIMEDOUT
    assert client.counters["cm_mads_resent"] == 2 and client.counters["cm_timeouts"] == 1


def test_a_slow_consumer_gets_an_mra_for_a_repeated_req_and_the_wait_goes_on(nics) -> None:
    server, client, clock = nics
    client.cm.max_retries = 3
    s_channel, _listener, request, c_channel, _active = connect_pair(nics)
    clock.run(7.0)  # the client resends its REQ; the server, not yet accepted, answers MRA
    assert client.counters["cm_mads_resent"] == 1 and server.counters["cm_duplicate_req"] == 1
    assert events(server, s_channel) == []  # a duplicate makes no second CONNECT_REQUEST
    clock.run(25.0)  # the MRA's service timeout keeps the client waiting past its retries
    assert events(client, c_channel) == []
    server.cm.accept(request.cm_id, ConnParam(qp_num=0x31))
    clock.run()
    assert kinds(events(client, c_channel)) == [E.CONNECT_RESPONSE]


def test_udp_ids_resolve_their_peer_through_sidr(nics) -> None:
    server, client, clock = nics
    s_channel, _listener = listen(server, qp_type=UD, space=PortSpace.UDP)
    c_channel, active = resolve(client, clock, qp_type=UD, space=PortSpace.UDP)
    init, mask = client.cm.init_qp_attr(active, ibv_qp_state.IBV_QPS_INIT)
    assert init["qkey"] == UDP_QKEY and mask & ibv_qp_attr_mask.IBV_QP_QKEY
    client.cm.connect(active, ConnParam(b"ud?", qp_num=0x22))
    clock.run()
    (request,) = events(server, s_channel)
    assert request.event is E.CONNECT_REQUEST and request.ud.private_data[:3] == b"ud?"
    server.cm.accept(request.cm_id, ConnParam(qp_num=0x32))
    clock.run()
    (established,) = events(client, c_channel)
    assert established.event is E.ESTABLISHED
    assert (established.ud.qp_num, established.ud.qkey) == (0x32, UDP_QKEY)
    assert established.ud.ah.dgid[-4:] == bytes([10, 9, 0, 1])
    client.cm.disconnect(active)  # a UD id has no connection: nothing is sent
    clock.run()
    assert client.counters["cm_mads_sent"] == 1 and events(server, s_channel) == []


def test_sidr_to_a_port_nobody_listens_on_is_unreachable(nics) -> None:
    _server, client, clock = nics
    channel, cm_id = resolve(client, clock, port=9, qp_type=UD, space=PortSpace.UDP)
    client.cm.connect(cm_id, ConnParam(qp_num=0x22))
    clock.run()
    (event,) = events(client, channel)
    assert event.event is E.UNREACHABLE and event.status == 1  # SIDR "unsupported": no such service


def test_command_errors_have_ucmas_errnos(nics) -> None:
    server, client, clock = nics
    s_channel, _listener = listen(server)
    other = server.cm.create_id(s_channel, 3, PortSpace.TCP, RC)
    with pytest.raises(CmError) as busy:
        server.cm.bind(other, ("0.0.0.0", PORT))
    assert busy.value.errno == errno.EADDRINUSE
    with pytest.raises(CmError) as foreign:
        server.cm.bind(other, ("10.9.0.77", 5000))
    assert foreign.value.errno == errno.EADDRNOTAVAIL
    c_channel, active = resolve(client, clock)
    with pytest.raises(CmError) as long_data:
        client.cm.connect(active, ConnParam(bytes(57), qp_num=1))
    assert long_data.value.errno == errno.EINVAL
    with pytest.raises(CmError) as early:
        client.cm.accept(client.cm.create_id(c_channel, 4, PortSpace.TCP, RC), None)
    assert early.value.errno == errno.EINVAL
    with pytest.raises(CmError) as mismatched:
        client.cm.create_id(c_channel, 5, PortSpace.UDP, RC)
    assert mismatched.value.errno == errno.EINVAL


def test_destroying_a_listener_rejects_what_it_had_not_answered(nics) -> None:
    server, client, clock = nics
    _s_channel, listener, request, c_channel, _active = connect_pair(nics)
    server.cm.destroy_id(listener)
    clock.run()
    (event,) = events(client, c_channel)
    assert event.event is E.REJECTED and event.status == RejectReason.CONSUMER_DEFINED
    assert request.cm_id.destroyed


def test_destroying_a_connected_id_disconnects_its_peer(nics) -> None:
    server, client, clock = nics
    s_channel, _listener, request, c_channel, active = connect_pair(nics)
    server.cm.accept(request.cm_id, ConnParam(qp_num=0x31))
    clock.run()
    events(client, c_channel)
    client.cm.accept(active, None)
    clock.run()
    assert kinds(events(server, s_channel)) == [E.ESTABLISHED]
    assert client.cm.destroy_id(active) == 3  # ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_RESPONSE
    clock.run()
    assert kinds(events(server, s_channel)) == [E.DISCONNECTED]


def test_a_hundred_connections_to_one_listener(nics) -> None:
    server, client, clock = nics
    s_channel, _listener = listen(server, backlog=200)
    actives = []
    for index in range(100):
        c_channel, active = resolve(client, clock)
        client.cm.connect(active, ConnParam(qp_num=0x100 + index))
        actives.append((c_channel, active))
    clock.run()
    requests = events(server, s_channel)
    assert len(requests) == 100 and {r.conn.qp_num for r in requests} == {0x100 + i for i in range(100)}
    for index, request in enumerate(requests):
        server.cm.accept(request.cm_id, ConnParam(qp_num=0x1000 + index))
    clock.run()
    for c_channel, active in actives:
        assert kinds(events(client, c_channel)) == [E.CONNECT_RESPONSE]
        client.cm.accept(active, None)
    clock.run()
    assert kinds(events(server, s_channel)) == [E.ESTABLISHED] * 100


def test_malformed_and_stray_mads_are_dropped_and_counted_and_qp1_keeps_serving(nics) -> None:
    server, client, clock = nics
    s_channel, _listener = listen(server)
    link = client.engine.port.link
    path: RocePath = link.tx_path(SERVER)

    def send(payload: bytes, qkey: int = 0x80010000) -> None:
        buf = memoryview(bytearray(4096))
        packet = Packet(BTH(Opcode.UD_SEND_ONLY, QP1, 0), payload, deth=Deth(qkey, QP1))
        size = path.build_into(buf, 0, packet, 0)
        link.send(buf[:size], SERVER)

    send(bytes(10))  # short
    send(bytes(256))  # base version 0
    send(b"\x01\x04\x02\x03" + bytes(252))  # not the CM class
    send(encode_cm(1, CmReq(local_comm_id=5, service_id=0x1061C06, local_qpn=1, starting_psn=0)), qkey=1)
    send(encode_cm(2, CmReq(local_comm_id=6, service_id=0x1061C06, local_qpn=1, starting_psn=0)))  # no cma_hdr
    clock.run()
    counters = server.counters
    assert counters["cm_drop_mad_length"] == 1 and counters["cm_drop_qkey_or_pkey"] == 1
    assert counters["cm_drop_BadMadVersion"] == 1 and counters["cm_drop_WrongMgmtClass"] == 1
    assert counters["cm_req_no_listener"] == 1  # a REQ without rdma_cm's header reaches no listener
    assert events(server, s_channel) == []
    # the listener still serves
    _c_channel, active = resolve(client, clock)
    client.cm.connect(active, ConnParam(qp_num=0x21))
    clock.run()
    assert kinds(events(server, s_channel)) == [E.CONNECT_REQUEST]


def test_a_flood_of_requests_fills_the_backlog_and_no_more(nics) -> None:
    server, client, clock = nics
    s_channel, listener = listen(server, backlog=8)
    cma = CmaHeader(4, 40000, bytes([10, 9, 0, 2]), bytes([10, 9, 0, 1])).encode()
    for comm_id in range(1, 1001):
        req = CmReq(local_comm_id=comm_id, service_id=0x1061C06, local_qpn=comm_id, starting_psn=0, private_data=cma)
        deliver(server, encode_cm(comm_id, req), CLIENT)
    clock.run()
    assert len(listener.pending) == 8 and server.counters["cm_req_backlog_full"] == 992
    requests = events(server, s_channel)
    assert len(requests) == 8
    for request in requests:  # the consumer catches up: the backlog empties
        server.cm.reject(request.cm_id)
    _c_channel, active = resolve(client, clock)
    client.cm.connect(active, ConnParam(qp_num=0x21))
    clock.run()
    assert kinds(events(server, s_channel)) == [E.CONNECT_REQUEST]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attr=st.sampled_from([0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]), body=st.binary(min_size=232,
       max_size=232))  # fmt: skip
def test_any_cm_message_a_peer_sends_is_handled_or_dropped_never_raises(nics, attr: int, body: bytes) -> None:
    server, _client, clock = nics
    if not hasattr(server, "fuzz_listeners"):  # a connected and a UD listener, for the messages to reach
        server.fuzz_listeners = (listen(server), listen(server, PORT + 1, UD, PortSpace.UDP))  # type: ignore[attr-defined]
    header = bytes([1, 7, 2, 3, 0, 0, 0, 0]) + (7).to_bytes(8, "big") + attr.to_bytes(2, "big") + bytes(6)
    deliver(server, header + body, CLIENT)
    clock.run()
    assert server.engine.last_error == "" and server.counters["engine_errors"] == 0


def deliver(device: NicDevice, mad: bytes, source: str) -> None:
    """A MAD to ``device``'s QP1 as if ``source`` had sent it (straight onto the wire)."""
    link = device.engine.port.link
    sender = link._wire.links[source]  # the wire's other end, to send as it
    buf = memoryview(bytearray(4096))
    packet = Packet(BTH(Opcode.UD_SEND_ONLY, QP1, 0), mad, deth=Deth(0x80010000, QP1))
    size = sender.tx_path(link.address).build_into(buf, 0, packet, 0)
    sender.send(buf[:size], link.address)


def test_a_req_for_a_connection_that_is_over_is_rejected_as_stale(nics) -> None:
    server, client, clock = nics
    s_channel, _listener, request, c_channel, active = connect_pair(nics)
    server.cm.accept(request.cm_id, ConnParam(qp_num=0x31))
    clock.run()
    events(client, c_channel)
    client.cm.accept(active, None)
    clock.run()
    server.cm.destroy_id(request.cm_id)  # established: one DREQ, and the connection's comm IDs wait out time wait
    clock.run()
    assert kinds(events(client, c_channel)) == [E.DISCONNECTED]
    deliver(server, encode_cm(active.tid, active.req), CLIENT)  # the old REQ again, as a restarted peer's might come
    clock.run()
    assert server.counters["cm_req_stale"] == 1 and events(server, s_channel) == []
    clock.run(3.0)  # time wait over: the comm ID is forgotten
    deliver(server, encode_cm(active.tid, active.req), CLIENT)
    clock.run()
    assert kinds(events(server, s_channel)) == [E.CONNECT_REQUEST]


def test_a_loopback_address_binds_to_no_device_as_on_linux(nics) -> None:
    """Linux binds 127.0.0.1 on a host whose RDMA device is on another interface (rxe on eth0:
    bound, ``verbs`` NULL; libfabric's verbs provider binds localhost so): the id holds its port
    but has no GID, port or node GUID, no REQ reaches it, and it resolves no route."""
    server, client, clock = nics
    channel = server.cm.open_channel()
    loopback = server.cm.create_id(channel, 1, PortSpace.TCP, RC)
    server.cm.bind(loopback, ("127.0.0.1", PORT))
    route = server.cm.query(loopback)
    assert route.node_guid == route.port_num == 0 and route.sgid == bytes(16) and route.src == ("127.0.0.1", PORT)
    server.cm.listen(loopback, 4)
    c_channel, active = resolve(client, clock)
    client.cm.connect(active, ConnParam(b"", 1, 1, 0, 7, 7, 0, qp_num=0x21))
    clock.run()
    (rejected,) = events(client, c_channel)
    assert rejected.event is E.REJECTED and rejected.status == RejectReason.INVALID_SERVICE_ID
    assert events(server, channel) == []
    other = client.cm.create_id(c_channel, 3, PortSpace.TCP, RC)
    client.cm.resolve_addr(other, ("127.0.0.2", 0), (SERVER, PORT), 2000)
    clock.run()
    (error,) = events(client, c_channel)
    assert error.event is E.ADDR_ERROR and error.status == -errno.ENODEV


def test_retry_counts_beyond_three_bits_are_clamped_as_rdma_cm_does(nics) -> None:
    """libfabric connects with retry_count and rnr_retry_count 15: the REQ carries 7 (ib_cma's
    ``min(7, ...)``), and so do the QP attributes both sides derive."""
    server, client, clock = nics
    s_channel, _listener = listen(server)
    c_channel, active = resolve(client, clock)
    client.cm.connect(active, ConnParam(b"", 1, 1, 0, 15, 15, 0, qp_num=0x21))
    assert active.req.retry_count == 7 and active.req.rnr_retry_count == 7
    clock.run()
    (request,) = events(server, s_channel)
    assert request.conn.retry_count == request.conn.rnr_retry_count == 7
    server.cm.accept(request.cm_id, ConnParam(b"", 1, 1, 0, 15, 15, 0, qp_num=0x31))
    clock.run()
    (response,) = events(client, c_channel)
    assert response.conn.rnr_retry_count == 7
