"""pyroce's CM speaks as Linux's: given the choices rxe made in a real rping exchange (comm IDs,
PSNs, the client's port), pyroce's REQ, REP, RTU, DREQ and DREP are the captured MADs byte for
byte, transaction IDs included, but for the CA GUIDs (rxe derives its GUID from a MAC address,
pyroce from the IP address)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from pyroce.cm.manager import RdmaCm
from pyroce.cm.records import ConnParam
from pyroce.host.notify import EventFdQueue
from pyroce.ib.cm import QPT_RC, CmEventType, PortSpace
from pyroce.wire import BTH, QP1, Deth, Opcode, Packet, PcapReader
from pyroce.wire.cm import CmRep, CmReq, parse_cm
from pyroce.wire.framing import IPv4Header, network_header
from pyroce.wire.mad import MAD_HEADER_LEN

CAPTURES = Path(__file__).resolve().parent / "data"
CLIENT, SERVER = "10.77.0.3", "10.77.0.2"
REQ_GUID = slice(MAD_HEADER_LEN + 16, MAD_HEADER_LEN + 24)  # the REQ's local CA GUID
REP_GUID = slice(MAD_HEADER_LEN + 28, MAD_HEADER_LEN + 36)  # the REP's


class Choices(random.Random):
    """The random choices rxe made in the capture, in the order the CM asks for them."""

    def __init__(self, bits: list[int], port: int = 0) -> None:
        super().__init__(0)
        self.bits, self.port = list(bits), port

    def getrandbits(self, k: int) -> int:
        return self.bits.pop(0)

    def randint(self, a: int, b: int) -> int:
        return self.port


def captured_mads(name: str) -> list[bytes]:
    with (CAPTURES / name).open("rb") as fh:
        frames = [record.data for record in PcapReader(fh)]
    roce = 14 + 20 + 8  # Ethernet, IPv4, UDP
    return [bytes(f[roce + 20 : roce + 20 + 256]) for f in frames if f[roce + 5 : roce + 8] == b"\0\0\1"]


def deliver(cm: RdmaCm, mad: bytes, source: str, dest: str) -> None:
    ip = IPv4Header(bytes(map(int, source.split("."))), bytes(map(int, dest.split("."))))
    packet = Packet(BTH(Opcode.UD_SEND_ONLY, QP1, 0), mad, deth=Deth(0x80010000, QP1))
    cm.qp1.receive(packet, 0.0, network_header(ip, 12 + 8 + 256 + 4))


def sent(cm: RdmaCm) -> bytes:
    (item,) = cm.qp1.outbox
    cm.qp1.outbox.clear()
    return item[1]


def without(mad: bytes, guid: slice) -> bytes:
    return mad[: guid.start] + mad[guid.stop :]


def test_an_rping_exchange_is_rxes_byte_for_byte() -> None:
    req, rep, rtu, dreq, drep = captured_mads("rping.pcap")
    client = RdmaCm(CLIENT, EventFdQueue, Counter(), Choices([0x763308A0, 0x7B91F5], port=0xB556))
    server = RdmaCm(SERVER, EventFdQueue, Counter(), Choices([0x69F49A45, 0x2FD57F]))
    s_channel, c_channel = server.open_channel(), client.open_channel()
    listener = server.create_id(s_channel, 0, PortSpace.TCP, QPT_RC)
    server.bind(listener, ("0.0.0.0", 7174))
    server.listen(listener, 1)
    active = client.create_id(c_channel, 0, PortSpace.TCP, QPT_RC)
    client.resolve_addr(active, None, (SERVER, 7174), 2000)
    client.resolve_route(active, 2000)
    client.connect(active, ConnParam(b"", 1, 1, 0, 7, 7, 0, qp_num=0x14))  # what rping asks for
    ours = sent(client)
    assert without(ours, REQ_GUID) == without(req, REQ_GUID)
    assert parse_cm(ours)[1].local_ca_guid == 0x00000AFFFE4D0003  # 10.77.0.3's: EUI-64 of MAC 02:00:0a:4d:00:03
    deliver(server, req, CLIENT, SERVER)
    request = server.get_event(s_channel) or pytest.fail("no CONNECT_REQUEST")
    assert request.event is CmEventType.CONNECT_REQUEST and isinstance(request.cm_id.req, CmReq)
    server.accept(request.cm_id, ConnParam(b"", 1, 1, 0, 0, 7, 0, qp_num=0x14))
    assert without(sent(server), REP_GUID) == without(rep, REP_GUID)
    deliver(client, rep, SERVER, CLIENT)
    response = client.get_event(c_channel)
    while response is not None and response.event is not CmEventType.CONNECT_RESPONSE:
        response = client.get_event(c_channel)
    assert response is not None and isinstance(active.rep, CmRep)
    # each side sends from the PSN the other's message named, as the capture's data packets do
    assert client.init_qp_attr(active, 3)[0]["sq_psn"] == 0x2FD57F
    assert server.init_qp_attr(request.cm_id, 3)[0]["sq_psn"] == 0x7B91F5
    assert client.init_qp_attr(active, 2)[0]["rq_psn"] == 0x7B91F5
    client.accept(active, None)
    assert sent(client) == rtu
    deliver(server, rtu, CLIENT, SERVER)
    client.disconnect(active)
    assert sent(client) == dreq
    deliver(server, dreq, CLIENT, SERVER)
    assert sent(server) == drep


def test_udaddys_sidr_exchange_is_rxes_byte_for_byte() -> None:
    sidr_req, sidr_rep = captured_mads("udaddy.pcap")
    client = RdmaCm(CLIENT, EventFdQueue, Counter(), Choices([0x773308A0], port=0x8824))
    server = RdmaCm(SERVER, EventFdQueue, Counter(), Choices([0x11111111]))
    s_channel, c_channel = server.open_channel(), client.open_channel()
    listener = server.create_id(s_channel, 0, PortSpace.UDP, 4)
    server.bind(listener, ("0.0.0.0", 7174))
    server.listen(listener, 1)
    active = client.create_id(c_channel, 0, PortSpace.UDP, 4)
    client.resolve_addr(active, None, (SERVER, 7174), 2000)
    client.resolve_route(active, 2000)
    client.connect(active, ConnParam(qp_num=0x17))
    assert sent(client) == sidr_req
    deliver(server, sidr_req, CLIENT, SERVER)
    request = server.get_event(s_channel)
    assert request is not None and request.event is CmEventType.CONNECT_REQUEST
    server.accept(request.cm_id, ConnParam(qp_num=0x18))
    assert sent(server) == sidr_rep
