"""ICRC: any flipped bit in the covered region is caught; the masked fields are not covered."""

from __future__ import annotations

import zlib

import pytest

from pyroce.wire import (
    BTH,
    Aeth,
    Frame,
    IPv4Header,
    IPv6Header,
    Opcode,
    Packet,
    UdpHeader,
    build_frame,
    compute_icrc,
    parse_frame,
    verify_icrc,
)
from pyroce.wire.framing import LINKTYPE_RAW

PKT = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_ONLY, 0x123, 0x456, ackreq=True), bytes(range(21)), aeth=Aeth(0x1F, 9))
IP4 = IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), tos=0x02, ttl=64)
IP6 = IPv6Header(bytes(15) + b"\x01", bytes(15) + b"\x02", traffic_class=0x02, flow_label=0xABCDE)


def raw_ip_frame(ip) -> bytes:
    return bytes(build_frame(Frame(b"", ip, UdpHeader(0xC123), PKT, 0, False)))


def split(raw: bytes, hdr_len: int) -> tuple[bytes, bytes, int]:
    return raw[:hdr_len], raw[hdr_len:-4], int.from_bytes(raw[-4:], "little")


# byte offsets in IP+UDP+BTH that routers may change, as (offset, bit mask)
MASKED_V4 = {1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF, 26: 0xFF, 27: 0xFF, 28 + 4: 0xFF}
MASKED_V6 = {0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, 7: 0xFF, 46: 0xFF, 47: 0xFF, 48 + 4: 0xFF}


@pytest.mark.parametrize("ip, hdr_len, masked", [(IP4, 28, MASKED_V4), (IP6, 48, MASKED_V6)])
def test_single_bit_flips(ip, hdr_len, masked):
    raw = raw_ip_frame(ip)
    hdrs, roce, icrc = split(raw, hdr_len)
    assert compute_icrc(hdrs, roce) == icrc
    covered = hdrs + roce
    for offset in range(len(covered)):
        for bit in range(8):
            flipped = bytearray(covered)
            flipped[offset] ^= 1 << bit
            result = compute_icrc(flipped[:hdr_len], flipped[hdr_len:])
            if masked.get(offset, 0) & (1 << bit):
                assert result == icrc, f"masked byte {offset} bit {bit} changed the ICRC"
            else:
                assert result != icrc, f"byte {offset} bit {bit} is not covered"


def test_router_changes_keep_the_frame_valid():
    raw = bytearray(raw_ip_frame(IP4))
    raw[1] = 0xB8  # DSCP/ECN rewritten
    raw[8] = 3  # TTL decremented on the way
    raw[26:28] = b"\x12\x34"  # a UDP checksum filled in
    raw[28 + 4] |= 0xC0  # FECN and BECN set by a switch
    frame = parse_frame(bytes(raw), LINKTYPE_RAW)  # (the IPv4 checksum is not ours to check)
    assert frame.icrc_ok and frame.packet.bth.fecn and frame.packet.bth.becn


def test_a_flipped_icrc_byte_fails():
    raw = bytearray(raw_ip_frame(IP4))
    for offset in range(len(raw) - 4, len(raw)):
        bad = bytearray(raw)
        bad[offset] ^= 0x10
        assert not parse_frame(bytes(bad), LINKTYPE_RAW).icrc_ok
        assert not verify_icrc(bad[:28], bad[28:])


def test_icrc_is_zlib_crc32_of_the_masked_pseudo_packet_little_endian():
    """rocev2.md's definition written out the slow way."""
    raw = raw_ip_frame(IP4)
    masked = bytearray(raw)
    masked[1] = masked[8] = 0xFF
    masked[10:12] = masked[26:28] = b"\xff\xff"
    masked[32] = 0xFF
    expected = zlib.crc32(b"\xff" * 8 + bytes(masked[:-4]))
    assert raw[-4:] == expected.to_bytes(4, "little")
