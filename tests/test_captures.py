"""Golden vectors: every RoCEv2 packet Linux rxe sent in ../shared/data/rxe-captures parses,
its ICRC verifies, and building the parsed value again gives the identical frame."""

from __future__ import annotations

import pytest

from pyroce.wire import NotRoce, build_frame, opcode_name, parse_frame

# RoCEv2 packets per capture, from the captures' README
EXPECTED = {
    "atomic_cas.pcap": 40,
    "exchange_only.pcap": 0,
    "guest2guest.pcap": 3898,
    "rc_pingpong.pcap": 50,
    "rc_pingpong_peer.pcap": 200,
    "read_bw_64k.pcap": 1300,
    "read_bw_loss3.pcap": 3254,
    "rping.pcap": 65,
    "uc_pingpong.pcap": 40,
    "udaddy.pcap": 8,
    "write_bw_loss3.pcap": 4582,
}


def roce_frames(linktype, records):
    for number, record in enumerate(records, start=1):
        try:
            yield number, record, parse_frame(record.data, linktype)
        except NotRoce:
            continue


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_packet_parses_verifies_and_rebuilds(capture_records, name):
    linktype, records = capture_records[name]
    count = 0
    for number, record, frame in roce_frames(linktype, records):
        count += 1
        assert frame.icrc_ok, f"{name} frame {number}: ICRC 0x{frame.icrc:08x} does not verify"
        assert bytes(build_frame(frame)) == record.data, f"{name} frame {number} rebuilt differently"
    assert count == EXPECTED[name]


def test_all_13437_packets_are_covered(capture_records):
    total = sum(1 for linktype, records in capture_records.values() for _ in roce_frames(linktype, records))
    assert total == 13437


def test_capture_opcodes_and_fields(capture_records):
    """Spot checks against what tshark shows for these captures."""
    linktype, records = capture_records["write_bw_loss3.pcap"]
    frames = [frame for _, _, frame in roce_frames(linktype, records)]
    first = frames[0].packet
    assert opcode_name(first.bth.opcode) == "RC_RDMA_WRITE_FIRST"
    assert first.reth.dma_len == 65536 and len(first.payload) == 1024
    naks = [f for f in frames if f.packet.aeth is not None and f.packet.aeth.syndrome == 0x60]
    assert len(naks) == 35  # the 35 PSN-sequence NAKs the README lists

    linktype, records = capture_records["udaddy.pcap"]
    frames = [frame for _, _, frame in roce_frames(linktype, records)]
    sidr = frames[0].packet
    assert opcode_name(sidr.bth.opcode) == "UD_SEND_ONLY" and sidr.bth.dqpn == 1
    assert sidr.deth.qkey == 0x80010000 and sidr.deth.src_qp == 1
    assert all(f.packet.immdt is not None for f in frames[2:])
