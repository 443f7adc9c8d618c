"""ICRCs of IPv4 peers with any IPv4 ID verify through a UDP socket's view (no IP header):
the ID that makes the ICRC valid is solved for (``wire.ipv4_id``), and 16 of the 32 bits
still check the packet."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from pyroce.wire import NotRoce, parse_frame
from pyroce.wire.framing import IPV4_UDP_LEN, IPv4Header, RocePath, UdpHeader
from pyroce.wire.icrc import RESIDUE, residue_from_seed
from pyroce.wire.ipv4_id import id_solver
from tests.strategies import packets

SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


@given(packets(), st.integers(0, 0xFFFF), st.integers(1024, 65535))
def test_a_packet_sent_with_any_id_verifies_and_the_id_is_found(pkt, ident, sport):
    sender = RocePath(IPv4Header(SRC, DST, ident=ident), UdpHeader(sport))
    receiver = RocePath(IPv4Header(SRC, DST), UdpHeader(sport))  # what a UDP socket knows: ID unseen
    buf = bytearray(70000)
    size = sender.build_into(buf, 0, pkt)
    data = memoryview(buf)[:size]
    assert receiver.verify(data)
    residue = residue_from_seed(receiver.seed(size), data)
    found = 0 if residue == RESIDUE else id_solver(size, _headers(receiver)).solve(residue ^ RESIDUE)
    assert found == ident


def _headers(path: RocePath):
    return lambda size, ident: RocePath(path.ip._replace(ident=ident), path.udp).headers(size)


def test_every_rxe_packet_verifies_without_its_ip_header_and_damage_is_caught(capture_records):
    """Linux rxe counts its IPv4 IDs up: each of its captured IPv4 packets verifies as a UDP
    socket would see it (headers with ID 0), and a one-bit flip is caught but for the rare
    2**-16 that 16 checked bits let through."""
    rng = random.Random(5)
    checked = damaged = passed_damaged = 0
    idents = set()
    for linktype, records in capture_records.values():
        for record in records:
            try:
                frame = parse_frame(record.data, linktype)
            except NotRoce:
                continue
            if not isinstance(frame.ip, IPv4Header):
                continue
            idents.add(frame.ip.ident)
            payload = bytearray(record.data[len(frame.l2) + IPV4_UDP_LEN : len(record.data) - len(frame.trailer)])
            path = RocePath(frame.ip._replace(ident=0), frame.udp)
            assert path.verify(memoryview(payload)), frame
            checked += 1
            bit = rng.randrange(len(payload) * 8)
            if bit // 8 == 4:
                continue  # BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC
            payload[bit // 8] ^= 1 << bit % 8
            damaged += 1
            passed_damaged += path.verify(memoryview(payload))
    assert checked == 13437 and len(idents) > 1000  # real, varying IDs
    assert passed_damaged <= damaged // 1000, f"{passed_damaged} of {damaged} damaged packets verified"
