"""``wire.gso``: a GSO super-datagram seen by a capture on the sending host is split back into
its packets, each with the IPv4 ID of its place, so every ICRC verifies."""

from __future__ import annotations

import os

import pytest

from pyroce.wire import BTH, IPv4Header, IPv6Header, Opcode, Packet, UdpHeader, parse_frame, parse_packet
from pyroce.wire.aeth import ack_syndrome
from pyroce.wire.framing import LINKTYPE_ETHERNET, LINKTYPE_RAW, RocePath
from pyroce.wire.gso import gso_segment_size, split_gso_frame
from pyroce.wire.headers import Aeth

IP4 = IPv4Header(bytes([127, 0, 0, 1]), bytes([127, 0, 0, 2]), ident=0x1234)
IP6 = IPv6Header(bytes(15) + b"\x01", bytes(15) + b"\x02")
ETH = bytes(12) + b"\x08\x00"


def super_datagram(path: RocePath, packets: list[Packet]) -> tuple[bytes, int]:
    """The IP datagram of a GSO send of ``packets`` (as the sender's tap sees it: one header,
    the first segment's ID), and the size of its first segment."""
    buf = bytearray(65536)
    end = first = 0
    for k, pkt in enumerate(packets):
        end += path.build_into(buf, end, pkt, k)
        first = first or end
    return bytes(path.headers(end)) + bytes(buf[:end]), first


def write_run(pmtu: int, count: int, tail: bytes = b"tail") -> list[Packet]:
    middles = [Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, 0xFFFFFE + k & 0xFFFFFF), os.urandom(pmtu))
               for k in range(count)]  # fmt: skip
    return [*middles, Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x11, count + 0xFFFFFE & 0xFFFFFF, True), tail)]


@pytest.mark.parametrize("ip", [IP4, IP6])
@pytest.mark.parametrize("pmtu", [256, 1024, 4096])
def test_a_write_run_splits_into_packets_that_verify(ip, pmtu):
    packets = write_run(pmtu, 7)
    datagram, first = super_datagram(RocePath(ip, UdpHeader(0xC001)), packets)
    header_len = 28 if ip is IP4 else 48
    assert gso_segment_size(datagram[header_len:]) == first == 12 + pmtu + 4
    assert not parse_frame(datagram, LINKTYPE_RAW).icrc_ok  # whole, it is one oversized packet
    frames = [parse_frame(frame, LINKTYPE_RAW) for frame in split_gso_frame(datagram, LINKTYPE_RAW)]
    assert [frame.packet for frame in frames] == packets  # the last segment is the short one
    assert all(frame.icrc_ok for frame in frames)
    assert all(frame.udp.sport == 0xC001 and frame.ip.src == ip.src for frame in frames)
    if ip is IP4:
        assert [frame.ip.ident for frame in frames] == [0x1234 + k for k in range(8)]


def test_acks_without_payload_split_whatever_their_qps():
    path = RocePath(IP4, UdpHeader(0xC002))
    acks = [Packet(BTH(Opcode.RC_ACKNOWLEDGE, qpn, 100 + qpn), aeth=Aeth(ack_syndrome(31), qpn)) for qpn in (5, 9, 7)]
    datagram, first = super_datagram(path, acks)
    assert first == 20
    frames = [parse_frame(frame) for frame in split_gso_frame(ETH + datagram, LINKTYPE_ETHERNET)]
    assert [frame.packet for frame in frames] == acks and all(frame.icrc_ok for frame in frames)
    assert all(frame.l2 == ETH for frame in frames)


@pytest.mark.parametrize(
    "pkt",
    [
        Packet(BTH(Opcode.RC_SEND_ONLY, 0x11, 3), os.urandom(3000)),  # shorter than a 4096 PMTU: one packet
        Packet(BTH(Opcode.RC_SEND_ONLY, 0x11, 3), os.urandom(4096)),
        Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, 3), bytes(1024)),  # zeros: no BTH at any cut
        Packet(BTH(Opcode.RC_ACKNOWLEDGE, 0x11, 3), aeth=Aeth(ack_syndrome(31), 1)),
    ],
)
def test_a_single_packet_is_left_whole(pkt):
    datagram, _ = super_datagram(RocePath(IP4, UdpHeader(0xC003)), [pkt])
    assert gso_segment_size(datagram[28:]) is None
    assert split_gso_frame(datagram, LINKTYPE_RAW) == [datagram]


def test_packets_that_do_not_follow_each_other_are_not_split():
    """Cut at a PMTU, the pieces must be one QP's consecutive PSNs: a payload that happens to
    hold a BTH at the cut is not a second packet."""
    packets = write_run(256, 3)
    packets[2] = packets[2]._replace(bth=packets[2].bth._replace(psn=7))
    datagram, _ = super_datagram(RocePath(IP4, UdpHeader(0xC004)), packets)
    assert gso_segment_size(datagram[28:]) is None
    assert len(split_gso_frame(datagram, LINKTYPE_RAW)) == 1
    assert [parse_packet(datagram[28 + k * 272 : 28 + (k + 1) * 272]).bth.psn for k in range(3)] == [
        0xFFFFFE, 0xFFFFFF, 7]  # fmt: skip
