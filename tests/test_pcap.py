"""pcap reading and writing."""

from __future__ import annotations

import io
import struct

import pytest

from pyroce.wire import PcapError, PcapReader, PcapWriter
from pyroce.wire.framing import LINKTYPE_RAW


@pytest.mark.parametrize("nanoseconds", [False, True])
def test_write_then_read(nanoseconds):
    stream = io.BytesIO()
    writer = PcapWriter(stream, LINKTYPE_RAW, nanoseconds=nanoseconds)
    writer.write(b"first", timestamp=1700000000.25)
    writer.write(bytes(range(200)), timestamp=1700000001.000001)
    stream.seek(0)
    reader = PcapReader(stream)
    assert reader.linktype == LINKTYPE_RAW
    records = list(reader)
    assert [r.data for r in records] == [b"first", bytes(range(200))]
    assert records[0].timestamp == pytest.approx(1700000000.25, abs=1e-6)
    assert records[1].timestamp == pytest.approx(1700000001.000001, abs=1e-6)
    assert records[1].orig_len == 200


def test_big_endian_files_are_read():
    header = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack(">IIII", 5, 7, 3, 3) + b"abc"
    records = list(PcapReader(io.BytesIO(header + record)))
    assert records[0].data == b"abc" and records[0].timestamp == pytest.approx(5.000007)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "not a pcap file: shorter than its magic number"),
        (b"# README\nhello world, this is text", "not a pcap file: magic number 0x23205245"),
        (
            bytes.fromhex("0a0d0d0a") + bytes(20),
            "pcapng files are not supported: convert with 'editcap -F pcap IN OUT'",
        ),
        (bytes.fromhex("d4c3b2a1") + bytes(4), "truncated pcap file header: 8 of 24 bytes"),
    ],
)
def test_not_a_pcap(data, message):
    with pytest.raises(PcapError) as info:
        PcapReader(io.BytesIO(data))
    assert str(info.value) == message


def test_truncated_records():
    stream = io.BytesIO()
    PcapWriter(stream).write(bytes(100))
    whole = stream.getvalue()
    with pytest.raises(PcapError, match="truncated pcap record at byte 24: 50 of 100 bytes"):
        list(PcapReader(io.BytesIO(whole[:-50])))
    with pytest.raises(PcapError, match="truncated pcap record header at byte 24"):
        list(PcapReader(io.BytesIO(whole[:30])))


def test_absurd_record_length_is_refused():
    stream = io.BytesIO()
    PcapWriter(stream).write(b"x")
    data = bytearray(stream.getvalue())
    data[24 + 8 : 24 + 12] = struct.pack("<I", 1 << 30)
    with pytest.raises(PcapError, match="claims 1073741824 bytes: corrupt file"):
        list(PcapReader(io.BytesIO(bytes(data))))
