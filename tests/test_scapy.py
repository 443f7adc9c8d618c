"""Cross-check against scapy's RoCE layer, an independent implementation of the same spec."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("scapy")  # a declared test dependency: installed in CI, never skipped there

from scapy.contrib.roce import AETH as ScapyAETH
from scapy.contrib.roce import BTH as ScapyBTH
from scapy.contrib.roce import cnp as scapy_cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from strategies import packets

from pyroce.wire import (
    OPCODES,
    Frame,
    IPv4Header,
    IPv6Header,
    Opcode,
    UdpHeader,
    build_frame,
    parse_frame,
)

ETH = bytes.fromhex("020000000002 020000000001 0800")
ETH6 = bytes.fromhex("020000000002 020000000001 86dd")
# scapy 2.8 knows the IBTA 1.2 opcodes; FLUSH, ATOMIC_WRITE and the invalidate sends are newer
SCAPY_OPCODES = [
    info
    for info in OPCODES
    if info is not None
    and info.name.split("_", 1)[-1]
    not in ("FLUSH", "ATOMIC_WRITE", "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE")
]


def frame_for(pkt, v6: bool) -> bytes:
    if v6:
        ip = IPv6Header(
            bytes.fromhex("fd000000000000000000000000000001"),
            bytes.fromhex("fd000000000000000000000000000002"),
            traffic_class=0x22,
            flow_label=0x54321,
            hop_limit=7,
        )
        return bytes(build_frame(Frame(ETH6, ip, UdpHeader(0xC0DE), pkt, 0, False)))
    ip = IPv4Header(bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2]), tos=0x12, ident=0x4321, ttl=9)
    return bytes(build_frame(Frame(ETH, ip, UdpHeader(0xC0DE), pkt, 0, False)))


@settings(max_examples=300, deadline=None)
@given(packets(SCAPY_OPCODES), st.booleans())
def test_scapy_dissects_our_packets_and_agrees_on_the_icrc(pkt, v6):
    raw = frame_for(pkt, v6)
    theirs = Ether(raw)
    bth = theirs[ScapyBTH]
    ours = pkt.bth
    assert (bth.opcode, bth.solicited, bth.migreq, bth.padcount, bth.version) == (
        ours.opcode,
        ours.se,
        ours.mig,
        pkt.pad,
        0,
    )
    assert (bth.pkey, bth.fecn, bth.becn, bth.dqpn, bth.ackreq, bth.psn) == (
        ours.pkey,
        ours.fecn,
        ours.becn,
        ours.dqpn,
        ours.ackreq,
        ours.psn,
    )
    if ours.opcode == Opcode.RC_ACKNOWLEDGE:
        aeth = theirs[ScapyAETH]
        assert (aeth.syndrome, aeth.msn) == (pkt.aeth.syndrome, pkt.aeth.msn)
    # scapy's ICRC, computed afresh over the dissected packet, is byte for byte ours
    theirs[ScapyBTH].icrc = None
    assert bytes(theirs) == raw


@pytest.mark.parametrize("v6", [False, True])
def test_scapy_built_cnp_parses_with_a_valid_icrc(v6):
    ip = IPv6(src="fd00::1", dst="fd00::2", tc=0x03, fl=7) if v6 else IP(src="192.0.2.1", dst="192.0.2.2", tos=3)
    raw = bytes(Ether() / ip / UDP(sport=0xC000, dport=4791) / scapy_cnp(0xABCDE))
    frame = parse_frame(raw)
    assert frame.icrc_ok
    assert frame.packet.bth.opcode == Opcode.CNP and frame.packet.bth.becn and frame.packet.bth.dqpn == 0xABCDE
    assert frame.packet.cnp == bytes(16)
    assert bytes(build_frame(frame)) == raw


# A CNP sent by a ConnectX-4 Lx, from scapy's test/contrib/roce.uts (ICRC shown there as 0x82fd002a)
CONNECTX4_CNP = bytes.fromhex(
    "e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2"
    "003c 718c 4000 4011 9161 0a00 1101 0a00"
    "1201 0000 12b7 0028 0000 8100 ffff 4000"
    "0118 0000 0000 0000 0000 0000 0000 0000"
    "0000 0000 0000 82fd 002a"
)


def test_hardware_cnp_golden_vector():
    frame = parse_frame(CONNECTX4_CNP)
    assert frame.icrc_ok
    assert frame.packet.bth.opcode == Opcode.CNP and frame.packet.bth.becn and frame.packet.bth.dqpn == 0x118
    assert bytes(build_frame(frame)) == CONNECTX4_CNP
    theirs = Ether(CONNECTX4_CNP)
    theirs[ScapyBTH].icrc = None
    assert bytes(theirs) == CONNECTX4_CNP
