"""Frames: link types, VLAN tags, trailers, and IP/UDP lengths that disagree."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import packets

from pyroce.wire import (
    BTH,
    Frame,
    IPv4Header,
    IPv6Header,
    LengthMismatch,
    MalformedPacket,
    NotRoce,
    Opcode,
    Packet,
    TruncatedPacket,
    UdpHeader,
    build_datagram,
    build_frame,
    parse_frame,
)
from pyroce.wire.framing import LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, ipv4_checksum

ETH = bytes.fromhex("020000000002 020000000001 0800")
VLAN = bytes.fromhex("020000000002 020000000001 8100 0064 0800")
SLL = bytes.fromhex("0000 0001 0006 020000000001 0000 0800")
IP4 = IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
IP6 = IPv6Header(bytes.fromhex("fe800000000000000000000000000001"), bytes.fromhex("fe800000000000000000000000000002"))
PKT = Packet(BTH(Opcode.RC_SEND_ONLY, 0x11, 0x22, ackreq=True), b"hello")


def frame(l2=ETH, ip=IP4, pkt=PKT, trailer=b"") -> Frame:
    return Frame(l2, ip, UdpHeader(0xC000), pkt, 0, False, trailer)


@pytest.mark.parametrize(
    "l2, linktype, ip",
    [
        (ETH, LINKTYPE_ETHERNET, IP4),
        (VLAN, LINKTYPE_ETHERNET, IP4),
        (SLL, LINKTYPE_LINUX_SLL, IP4),
        (b"", LINKTYPE_RAW, IP4),
        (b"", LINKTYPE_IPV4, IP4),
        (b"", LINKTYPE_RAW, IP6),
        (ETH[:12] + b"\x86\xdd", LINKTYPE_ETHERNET, IP6),
    ],
)
def test_frame_round_trip_per_link_type(l2, linktype, ip):
    raw = bytes(build_frame(frame(l2, ip, trailer=b"\x00" * 3)))
    parsed = parse_frame(raw, linktype)
    assert parsed.icrc_ok
    assert parsed.l2 == l2 and parsed.ip == ip and parsed.trailer == b"\x00" * 3
    assert parsed.packet == PKT
    assert bytes(build_frame(parsed)) == raw


def test_ipv4_header_is_what_linux_sends():
    raw = bytes(build_frame(frame()))
    ip = raw[14:34]
    assert ip[0] == 0x45 and ip[6:8] == b"\x40\x00" and ip[8] == 64 and ip[9] == 17  # DF, TTL 64, UDP
    assert struct.unpack(">H", ip[2:4])[0] == len(raw) - 14
    assert ipv4_checksum(ip) == 0  # a valid header sums to zero
    udp = raw[34:42]
    assert struct.unpack(">HHHH", udp) == (0xC000, 4791, len(raw) - 34, 0)


def test_datagram_is_the_frame_after_the_udp_header():
    assert bytes(build_datagram(PKT, IP4, UdpHeader(0xC000))) == bytes(build_frame(frame(b"")))[28:]


def corrupt(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value) :]


RAW = bytes(build_frame(frame()))


@pytest.mark.parametrize(
    "data, error, message",
    [
        (corrupt(RAW, 12, b"\x08\x06"), NotRoce, "ethertype 0x0806 is not IP"),
        (corrupt(RAW, 14, b"\x46"), NotRoce, "IPv4 header of 24 bytes: RoCEv2 uses no IPv4 options"),
        (corrupt(RAW, 20, b"\x20\x00"), NotRoce, "IPv4 fragment: RoCEv2 packets are never fragmented"),
        (corrupt(RAW, 23, b"\x06"), NotRoce, "IP protocol 6 is not UDP"),
        (corrupt(RAW, 36, b"\x00\x35"), NotRoce, "UDP port 53 is not RoCEv2 (4791)"),
        (corrupt(RAW, 16, b"\x01\x00"), TruncatedPacket, "IP says 256 bytes, the frame holds 52"),
        (corrupt(RAW, 16, b"\x00\x10"), LengthMismatch, "IPv4 total length 16 is shorter than its header"),
        (corrupt(RAW, 38, b"\x00\x30"), LengthMismatch, "UDP length 48 disagrees with the IP length (32)"),
        (corrupt(RAW, 38, b"\x00\x08"), LengthMismatch, "UDP length 8 disagrees with the IP length (32)"),
        (RAW[:10], TruncatedPacket, "10-byte frame is shorter than an Ethernet header"),
        (RAW[:30], TruncatedPacket, "frame ends inside the IPv4 header"),
    ],
)
def test_bad_frames_name_their_problem(data, error, message):
    with pytest.raises(error) as info:
        parse_frame(data)
    assert str(info.value) == message


def test_every_truncation_of_a_frame_is_rejected():
    raw = bytes(build_frame(frame(pkt=Packet(BTH(Opcode.RC_SEND_ONLY, 1, 1), bytes(50)))))
    for cut in range(len(raw)):
        with pytest.raises(MalformedPacket):
            parse_frame(raw[:cut])


@settings(max_examples=2000)
@given(st.binary(max_size=100), st.sampled_from([LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, 228, 229, 7]))
def test_arbitrary_frames_raise_only_malformed_packet(data, linktype):
    try:
        parse_frame(data, linktype)
    except MalformedPacket:
        pass


@settings(max_examples=300)
@given(packets(), st.data())
def test_mutated_frames_raise_only_malformed_packet_or_fail_the_icrc(pkt, data):
    raw = bytearray(build_frame(frame(pkt=pkt)))
    offset = data.draw(st.integers(14, len(raw) - 1))
    raw[offset] ^= data.draw(st.integers(1, 255))
    try:
        parsed = parse_frame(bytes(raw))
    except MalformedPacket:
        return
    masked = {14 + 1, 14 + 8, 14 + 10, 14 + 11, 40, 41, 42 + 4}
    assert parsed.icrc_ok == (offset in masked)
