"""parse_packet / build: round trips over every opcode and field, and hostile bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import packets

from pyroce.wire import (
    BTH,
    OPCODES,
    BadPadCount,
    BadTransportVersion,
    BuildError,
    IPv4Header,
    IPv6Header,
    LengthMismatch,
    MalformedPacket,
    Opcode,
    Packet,
    Reth,
    TruncatedPacket,
    UdpHeader,
    UnknownOpcode,
    build_datagram,
    build_packet_into,
    packet_length,
    parse_packet,
    verify_icrc,
)
from pyroce.wire.framing import RocePath, pack_ip_udp
from pyroce.wire.headers import Aeth
from pyroce.wire.packet import ACK_BYTES, AckTemplate, BthTemplate

IP4 = IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
IP6 = IPv6Header(bytes(15) + b"\x01", bytes(15) + b"\x02", traffic_class=3, flow_label=0x12345)
UDP = UdpHeader(0xC001)
PATH = RocePath(IP4, UDP)


def datagram(pkt: Packet) -> bytes:
    return bytes(build_datagram(pkt, IP4, UDP))


def headers_for(pkt: Packet, ip=IP4) -> bytes:
    buf = bytearray(48)
    n = pack_ip_udp(buf, 0, ip, UDP, packet_length(pkt))
    return bytes(buf[:n])


@settings(max_examples=600)
@given(packets(), st.sampled_from([IP4, IP6]))
def test_round_trip_every_opcode(pkt, ip):
    data = bytes(build_datagram(pkt, ip, UDP))
    assert len(data) == packet_length(pkt)
    assert len(data) % 4 == 0  # padding keeps the ICRC aligned
    assert parse_packet(data) == pkt
    assert verify_icrc(headers_for(pkt, ip), data)


@given(packets())
def test_build_into_offset_matches_build(pkt):
    data = datagram(pkt)
    buf = bytearray(7 + len(data))
    written = build_packet_into(buf, 7, pkt)
    assert written == len(data) - 4
    assert buf[7 : 7 + written] == data[:-4]


def test_padding_bytes_and_padcnt():
    pkt = Packet(BTH(Opcode.RC_SEND_ONLY, dqpn=0x11, psn=5), b"abcde")
    data = datagram(pkt)
    assert (data[1] >> 4) & 3 == 3
    assert data[12:20] == b"abcde\x00\x00\x00"
    assert pkt.pad == 3


def test_bth_bytes_are_laid_out_as_the_spec():
    pkt = Packet(
        BTH(
            Opcode.RC_RDMA_WRITE_FIRST,
            dqpn=0xABCDEF,
            psn=0x123456,
            ackreq=True,
            se=True,
            mig=True,
            pkey=0x8001,
            fecn=True,
            becn=True,
        ),
        bytes(4),
        reth=Reth(va=0x1122334455667788, rkey=0x99AABBCC, dma_len=0x1000),
    )
    data = datagram(pkt)
    assert data[:12] == bytes.fromhex("06 c0 8001 c0abcdef 80123456")
    assert data[12:28] == bytes.fromhex("1122334455667788 99aabbcc 00001000")


def test_all_256_opcodes_known_or_rejected():
    supported = {info.opcode for info in OPCODES if info is not None}
    assert len(supported) == 40
    for opcode in range(256):
        data = bytes([opcode]) + bytes(47)
        if opcode in supported:
            continue
        with pytest.raises(UnknownOpcode, match=f"opcode 0x{opcode:02x} is reserved or unsupported"):
            parse_packet(data)


@pytest.mark.parametrize(
    "data, error, message",
    [
        (bytes(15), TruncatedPacket, "15 bytes is shorter than a BTH and ICRC (16)"),
        (
            bytes.fromhex("0c00ffff00000011 00000001") + bytes(4),
            TruncatedPacket,
            "RC_RDMA_READ_REQUEST needs 32 bytes of headers and ICRC, got 16",
        ),
        (bytes.fromhex("0401ffff00000011 00000001") + bytes(4), BadTransportVersion, "BTH TVer is 1, must be 0"),
        (
            bytes.fromhex("0430ffff00000011 00000001") + bytes(4),
            BadPadCount,
            "PadCnt 3 is larger than the 0-byte payload of RC_SEND_ONLY",
        ),
        (
            bytes.fromhex("0410ffff00000011 00000001") + bytes(7),
            BadPadCount,
            "PadCnt 1 does not pad a 2-byte payload to 4 bytes",
        ),
        (
            bytes.fromhex("1100ffff00000011 00000001 00000000") + bytes(4) + bytes(4),
            LengthMismatch,
            "RC_ACKNOWLEDGE carries 0 bytes of payload, got 4",
        ),
        (
            bytes.fromhex("1d00ffff00000011 00000001") + bytes(16) + bytes(4) + bytes(4),
            LengthMismatch,
            "RC_ATOMIC_WRITE carries 8 bytes of payload, got 4",
        ),
    ],
)
def test_malformed_packets_name_their_problem(data, error, message):
    with pytest.raises(error) as info:
        parse_packet(data)
    assert str(info.value) == message


@settings(max_examples=3000)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_raise_only_malformed_packet(data):
    try:
        pkt = parse_packet(data)
    except MalformedPacket:
        return
    assert packet_length(pkt) == len(data)


@settings(max_examples=500)
@given(packets(), st.data())
def test_mutated_packets_raise_only_malformed_packet(pkt, data):
    raw = bytearray(datagram(pkt))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        parse_packet(bytes(raw[:cut]))
    except MalformedPacket:
        pass


def test_every_truncation_of_a_packet_is_caught_or_fails_the_icrc():
    pkt = Packet(BTH(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 7), bytes(range(37)), reth=Reth(0x1000, 0x42, 37))
    data = datagram(pkt)
    hdrs = headers_for(pkt)
    for cut in range(len(data)):
        try:
            parse_packet(data[:cut])
        except MalformedPacket:
            continue
        assert not verify_icrc(hdrs, data[:cut]), f"a {cut}-byte cut parsed with a valid ICRC"


@pytest.mark.parametrize(
    "pkt, message",
    [
        (Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 1, 1), bytes(4)), "RC_RDMA_WRITE_FIRST needs a reth header"),
        (Packet(BTH(Opcode.RC_SEND_ONLY, 1, 1), reth=Reth(0, 0, 0)), "RC_SEND_ONLY carries no reth header"),
        (Packet(BTH(Opcode.RC_ACKNOWLEDGE, 1, 1), b"x"), "RC_ACKNOWLEDGE payload must be 0 bytes, not 1"),
        (Packet(BTH(0x15, 1, 1)), "opcode 0x15 is not a supported RoCEv2 opcode"),
        (Packet(BTH(Opcode.RC_SEND_ONLY, 1 << 24, 1)), "BTH dqpn 0x1000000 or psn 0x1 does not fit 24 bits"),
    ],
)
def test_build_rejects_inconsistent_values(pkt, message):
    with pytest.raises(BuildError) as info:
        build_datagram(pkt, IP4, UDP)
    assert str(info.value) == message


def test_build_rejects_out_of_range_header_fields():
    pkt = Packet(BTH(Opcode.RC_RDMA_WRITE_ONLY, 1, 1), b"", reth=Reth(1 << 64, 0, 0))
    with pytest.raises(BuildError, match=r"RC_RDMA_WRITE_ONLY: cannot pack reth Reth\(va=18446744073709551616"):
        datagram(pkt)


def test_build_into_a_short_buffer_is_refused():
    pkt = Packet(BTH(Opcode.RC_SEND_ONLY, 1, 1), bytes(100))
    buf = bytearray(64)
    with pytest.raises(BuildError, match="do not fit"):
        build_packet_into(buf, 0, pkt)
    assert len(buf) == 64


def test_parsed_payload_is_a_view_not_a_copy():
    data = bytearray(datagram(Packet(BTH(Opcode.RC_SEND_ONLY, 1, 1), b"abcd")))
    pkt = parse_packet(memoryview(data))
    assert isinstance(pkt.payload, memoryview)
    data[12] = ord("z")
    assert bytes(pkt.payload) == b"zbcd"


@given(st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF), st.integers(0, 0xFF),
       st.integers(0, 3))  # fmt: skip
def test_an_ack_template_patches_the_bytes_the_codecs_build(dqpn, psn, msn, syndrome, segment):
    """The responder's ACKs are a template patched per ACK: the same bytes as an ACK ``Packet``
    built by the BTH and AETH codecs, and the same ICRC once a path seals them."""
    pkt = Packet(BTH(Opcode.RC_ACKNOWLEDGE, dqpn, psn), aeth=Aeth(syndrome, msn))
    built = bytearray(64)
    size = PATH.build_into(built, 0, pkt, segment)
    ack = AckTemplate(dqpn, syndrome).ack(psn, msn)
    assert len(ack) == ACK_BYTES == size - 4
    sealed = bytearray(64)
    sealed[: len(ack)] = ack
    assert PATH.seal(sealed, 0, len(ack), segment) == size and sealed[:size] == built[:size]
    assert parse_packet(sealed[:size]) == pkt


_ENDS = ["RC_SEND_LAST", "RC_SEND_ONLY", "RC_RDMA_WRITE_LAST", "UC_SEND_LAST", "UC_SEND_ONLY", "UC_RDMA_WRITE_LAST"]
_WHOLE = ["RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_RDMA_WRITE_MIDDLE", "UC_SEND_FIRST", "UC_RDMA_WRITE_MIDDLE"]


@given(st.one_of(st.tuples(st.sampled_from(_ENDS), st.integers(0, 64)),
                 st.tuples(st.sampled_from(_WHOLE), st.integers(1, 16).map(lambda words: 4 * words))),
       st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF), st.booleans(), st.booleans(), st.integers(0, 0xFFFF),
       st.integers(0, 3))  # fmt: skip
def test_a_bth_template_builds_the_bytes_the_codecs_build(shape, dqpn, psn, ackreq, solicited, pkey, segment):
    """A SEND ONLY (and any packet that is a BTH and payload alone) from the requester's
    template: the same bytes as the ``Packet`` the BTH codec builds, pad included, and the same
    ICRC once a path seals them; one template serves every opcode, length and PSN."""
    name, length = shape
    payload = bytes(range(length))
    pkt = Packet(BTH(Opcode[name], dqpn, psn, ackreq, solicited, pkey=pkey), payload)
    built = bytearray(128)
    size = PATH.build_into(built, 0, pkt, segment)
    template = BthTemplate(dqpn, pkey)
    template.packet(Opcode.RC_SEND_ONLY, psn ^ 1, not ackreq, False, b"x")  # another head first: kept apart
    data = template.packet(Opcode[name], psn, ackreq, solicited, memoryview(payload))
    assert len(data) == size - 4
    sealed = bytearray(128)
    sealed[: len(data)] = data
    assert PATH.seal(sealed, 0, len(data), segment) == size and sealed[:size] == built[:size]
    assert parse_packet(sealed[:size]) == pkt


_WRITE_STARTS = ["RC_RDMA_WRITE_ONLY", "RC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_FIRST"]


@given(st.sampled_from(_WRITE_STARTS), st.integers(0, 64), st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF),
       st.booleans(), st.booleans(), st.integers(0, 0xFFFF), st.integers(0, (1 << 64) - 1), st.integers(0, 0xFFFFFFFF),
       st.integers(0, 0xFFFFFFFF), st.integers(0, 3))  # fmt: skip
def test_a_write_from_the_template_is_the_packet_the_codecs_build(name, length, dqpn, psn, ackreq, solicited, pkey,
                                                                   raddr, rkey, dma_length, segment):  # fmt: skip
    """A WRITE ONLY or FIRST from the template (its RETH packed with the PSN): the bytes and
    ICRC the BTH and RETH codecs give the same ``Packet``; the template's SEND heads and WRITE
    heads are kept apart."""
    payload = bytes(range(length))
    pkt = Packet(BTH(Opcode[name], dqpn, psn, ackreq, solicited, pkey=pkey), payload,
                 reth=Reth(raddr, rkey, dma_length))  # fmt: skip
    built = bytearray(160)
    size = PATH.build_into(built, 0, pkt, segment)
    template = BthTemplate(dqpn, pkey)
    template.packet(Opcode.RC_SEND_ONLY, psn ^ 1, not ackreq, False, b"x")  # another head first: kept apart
    data = template.write_packet(Opcode[name], psn, ackreq, solicited, raddr, rkey, dma_length, memoryview(payload))
    sealed = bytearray(160)
    sealed[: len(data)] = data
    assert PATH.seal(sealed, 0, len(data), segment) == size and sealed[:size] == built[:size]
    assert parse_packet(sealed[:size]) == pkt


_RESPONSES = ["RC_RDMA_READ_RESPONSE_ONLY", "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_LAST"]


@given(st.sampled_from(_RESPONSES), st.integers(0, 64), st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF),
       st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0xFFFFFF), st.integers(0, 3))  # fmt: skip
def test_a_read_response_from_the_template_is_the_packet_the_codecs_build(name, length, dqpn, psn, pkey, syndrome,
                                                                          msn, segment):  # fmt: skip
    """A READ response ONLY, FIRST or LAST from the template (its AETH packed with the PSN):
    the bytes and ICRC the BTH and AETH codecs give the same ``Packet``."""
    payload = bytes(range(length))
    pkt = Packet(BTH(Opcode[name], dqpn, psn, pkey=pkey), payload, aeth=Aeth(syndrome, msn))
    built = bytearray(128)
    size = PATH.build_into(built, 0, pkt, segment)
    template = BthTemplate(dqpn, pkey)
    template.packet(Opcode.RC_SEND_ONLY, psn ^ 1, True, False, b"x")  # another head first: kept apart
    data = template.read_response(Opcode[name], psn, syndrome, msn, memoryview(payload))
    sealed = bytearray(128)
    sealed[: len(data)] = data
    assert PATH.seal(sealed, 0, len(data), segment) == size and sealed[:size] == built[:size]
    assert parse_packet(sealed[:size]) == pkt


def test_a_bth_template_refuses_an_opcode_with_other_headers() -> None:
    template = BthTemplate(1, 0xFFFF)
    with pytest.raises(BuildError, match="RC_RDMA_WRITE_ONLY carries headers besides the BTH"):
        template.packet(Opcode.RC_RDMA_WRITE_ONLY, 0, True, False, b"ab")
    with pytest.raises(BuildError, match="RC_SEND_ONLY carries other headers than a RETH beside the BTH"):
        template.write_packet(Opcode.RC_SEND_ONLY, 0, True, False, 0x1000, 1, 2, b"ab")
    with pytest.raises(BuildError, match="RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE carries other headers than a RETH"):
        template.write_packet(Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0, True, False, 0x1000, 1, 2, b"ab")
    with pytest.raises(BuildError, match="RC_RDMA_READ_RESPONSE_MIDDLE carries other headers than an AETH"):
        template.read_response(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0, 0x1F, 1, b"ab")
    template.write_packet(Opcode.RC_RDMA_WRITE_ONLY, 0, True, False, 0x1000, 1, 2, b"ab")  # its head is kept,
    with pytest.raises(BuildError, match="RC_RDMA_WRITE_ONLY carries headers besides the BTH"):  # for its own kind
        template.packet(Opcode.RC_RDMA_WRITE_ONLY, 0, True, False, b"ab")
