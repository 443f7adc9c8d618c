"""pyroce against a foreign RoCEv2 peer over the real UDP link, with default settings.

The peer is built the way another stack builds its packets: whole IPv4 frames sent from a raw
socket (an IPv4 ID that counts up, as Linux rxe's does; any source address), and a UDP socket
on its own address for what pyroce answers. pyroce checks every ICRC whatever the ID, takes
packets for a connected QP only from that QP's peer, and never lets a response of the wrong
kind complete a request.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
from collections.abc import Iterator

import pytest

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_mtu, ibv_send_flags, ibv_wc_status
from pyroce.verbs.wr import SGE, SendWR
from pyroce.wire import Aeth, AtomicAckEth, Opcode, Packet, Reth, parse_packet
from pyroce.wire.aeth import ack_syndrome
from pyroce.wire.bth import BTH
from pyroce.wire.framing import ROCE_UDP_PORT, Frame, IPv4Header, UdpHeader, build_frame

PEER_QPN, PEER_PSN = 0x77, 0x1000
NET = f"127.63.{os.getpid() % 250 + 1}"  # this run's own addresses (another run may be going on)
SPORT = 49152


class ForeignPeer:
    """A RoCEv2 peer at ``address`` that sends raw IPv4 frames with IDs counting up."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.ids = itertools.count(27571)  # rxe's IDs count up from wherever they are
        self.raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP_HDRINCL
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((address, ROCE_UDP_PORT))

    def send(self, pkt: Packet, to: str, source: str | None = None, damage: int | None = None) -> None:
        """One frame from ``source`` (default: this peer's address); ``damage`` flips that
        byte of the packet after its ICRC is computed."""
        ip = IPv4Header(socket.inet_aton(source or self.address), socket.inet_aton(to), ident=next(self.ids))
        frame = build_frame(Frame(b"", ip, UdpHeader(SPORT, ROCE_UDP_PORT), pkt, 0, True))
        if damage is not None:
            frame[28 + damage] ^= 0x01
        self.raw.sendto(bytes(frame), (to, 0))

    def answers(self, timeout: float = 2.0) -> list[Packet]:
        """What pyroce sent this peer until ``timeout`` passes with nothing more."""
        got = []
        while select.select([self.udp], [], [], timeout)[0]:
            got.append(parse_packet(self.udp.recv(65536)))
            timeout = 0.3
        return got

    def close(self) -> None:
        self.raw.close()
        self.udp.close()


@pytest.fixture
def peer_and_endpoint() -> Iterator[tuple[ForeignPeer, RcEndpoint]]:
    peer = ForeignPeer(f"{NET}.1")
    ep = RcEndpoint.open(1 << 16)
    gid = socket.inet_pton(socket.AF_INET6, "::ffff:" + peer.address)
    ep.connect(PeerInfo(gid, PEER_QPN, PEER_PSN, 0, 0), path_mtu=ibv_mtu.IBV_MTU_1024, timeout=18)
    yield peer, ep
    ep.close()
    peer.close()


def write(ep: RcEndpoint, psn: int, offset: int, data: bytes) -> Packet:
    bth = BTH(Opcode.RC_RDMA_WRITE_ONLY, ep.qp.qp_num, psn, ackreq=True)
    return Packet(bth, data, reth=Reth(ep.mr.buf + offset, ep.mr.rkey, len(data)))


def counters(ep: RcEndpoint) -> dict[str, int]:
    return ep.ctx.device.stats()


def test_icrcs_with_counting_ipv4_ids_verify_and_damage_is_dropped(peer_and_endpoint) -> None:
    peer, ep = peer_and_endpoint
    address = ep.ctx.device.address
    before = counters(ep).get("icrc_errors", 0)
    for index in range(5):
        peer.send(write(ep, psn=PEER_PSN + index, offset=64 * index, data=b"rxe-%d!!" % index), address)
        ep.cq.poll()  # lets the caller's thread run the engine too (inline progress)
    acks = [p for p in peer.answers() if p.bth.opcode == Opcode.RC_ACKNOWLEDGE]
    assert acks and acks[-1].bth.psn == PEER_PSN + 4  # every WRITE acknowledged
    assert [ep.mr.read(7, 64 * index) for index in range(5)] == [b"rxe-%d!!" % index for index in range(5)]
    assert counters(ep).get("icrc_errors", 0) == before
    peer.send(write(ep, psn=PEER_PSN + 5, offset=1024, data=b"damaged"), address, damage=20)
    assert peer.answers(0.5) == []
    assert counters(ep)["icrc_errors"] == before + 1 and ep.mr.read(7, 1024) == bytes(7)


def test_packets_from_another_address_than_the_qps_peer_are_dropped(peer_and_endpoint) -> None:
    peer, ep = peer_and_endpoint
    address = ep.ctx.device.address
    before = counters(ep).get("drop_wrong_source", 0)
    peer.send(write(ep, psn=PEER_PSN, offset=0, data=b"spoofed"), address, source=f"{NET}.2")
    assert peer.answers(0.5) == []  # no ACK, to anyone
    assert counters(ep)["drop_wrong_source"] == before + 1 and ep.mr.read(7, 0) == bytes(7)
    peer.send(write(ep, psn=PEER_PSN, offset=0, data=b"genuine"), address)
    assert [p.bth.opcode for p in peer.answers()] == [Opcode.RC_ACKNOWLEDGE]
    assert ep.mr.read(7, 0) == b"genuine"


def test_responses_of_the_wrong_kind_complete_nothing(peer_and_endpoint) -> None:
    peer, ep = peer_and_endpoint
    address = ep.ctx.device.address
    ep.qp.post_send(SendWR(wr_id=9, sg=[SGE(ep.mr.buf, 8, ep.mr.lkey)], send_flags=ibv_send_flags.IBV_SEND_SIGNALED))
    (send,) = peer.answers()
    assert send.bth.opcode == Opcode.RC_SEND_ONLY and send.bth.dqpn == PEER_QPN
    psn = send.bth.psn
    before = counters(ep).get("bad_response", 0)
    atomic_ack = Packet(BTH(Opcode.RC_ATOMIC_ACKNOWLEDGE, ep.qp.qp_num, psn), aeth=Aeth(ack_syndrome(), 1),
                        atomicacketh=AtomicAckEth(0x1234))  # fmt: skip
    read_response = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_ONLY, ep.qp.qp_num, psn), b"12345678",
                           aeth=Aeth(ack_syndrome(), 1))  # fmt: skip
    for response in (atomic_ack, read_response):
        peer.send(response, address)
        assert ep.cq.poll() == (0, [])
    assert peer.answers(0.5) == []
    assert counters(ep)["bad_response"] == before + 2
    peer.send(Packet(BTH(Opcode.RC_ACKNOWLEDGE, ep.qp.qp_num, psn), aeth=Aeth(ack_syndrome(), 1)), address)
    wcs = ep.poll(1, 5)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [(9, ibv_wc_status.IBV_WC_SUCCESS)]


@pytest.mark.embedded_nic  # PYROCE_GSO is the setting of a program's own NIC
@pytest.mark.parametrize("gso", ["1", "0"])
def test_a_raw_socket_on_the_host_sees_gso_sends_whole_unless_gso_is_off(monkeypatch, gso: str) -> None:
    """A receiver that reads raw IP on the same host (a capture, a test harness) gets a GSO
    send as one super-datagram: the kernel segments it only for UDP sockets. ``PYROCE_GSO=0``
    makes every packet a datagram of its own."""
    monkeypatch.setenv("PYROCE_GSO", gso)
    peer = ForeignPeer(f"{NET}.1")
    sniffer = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    ep = RcEndpoint.open(1 << 16)
    try:
        gid = socket.inet_pton(socket.AF_INET6, "::ffff:" + peer.address)
        # a 17 s ACK timeout: the peer never answers, and no retransmission may come in the test
        ep.connect(PeerInfo(gid, PEER_QPN, PEER_PSN, 0, 0), path_mtu=ibv_mtu.IBV_MTU_1024, timeout=22)
        ep.qp.post_send(SendWR(wr_id=1, sg=[SGE(ep.mr.buf, 8192, ep.mr.lkey)]))
        assert len(peer.answers()) == 8  # the UDP socket gets eight packets either way
        sizes = []
        while select.select([sniffer], [], [], 0.2)[0]:
            datagram = sniffer.recv(65536)
            if datagram[16:20] == socket.inet_aton(peer.address) and datagram[22:24] == b"\x12\xb7":  # to :4791
                sizes.append(len(datagram) - 28)
        if gso == "1":
            assert sizes == [8 * (12 + 1024 + 4)], sizes  # one datagram: BTH, payload, ICRC, eight times
        else:
            assert sizes[:1] == [12 + 1024 + 4] and len(sizes) == 8, sizes
    finally:
        ep.close()
        sniffer.close()
        peer.close()
