"""Classic pcap files (tcpdump.org/manpages/pcap-savefile.5): read and write.

Both byte orders and both timestamp resolutions are read; files are written little-endian
with microsecond or nanosecond timestamps. A file that is not a pcap, or ends inside a
record, raises ``PcapError`` with the offset where it went wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from pyroce.wire.errors import PcapError
from pyroce.wire.framing import LINKTYPE_ETHERNET

_MAGIC_USEC = 0xA1B2C3D4
_MAGIC_NSEC = 0xA1B23C4D
_MAGIC_PCAPNG = 0x0A0D0D0A
_FILE_HDR_LEN = 24
_REC_HDR_LEN = 16
_SNAPLEN = 262144


class PcapRecord(NamedTuple):
    """One captured frame."""

    timestamp: float  # seconds since the epoch
    data: bytes  # the captured bytes (may be fewer than orig_len)
    orig_len: int  # the frame's length on the wire


class PcapReader:
    """Iterate over the records of a pcap file: ``for rec in PcapReader(f): ...``."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        header = stream.read(_FILE_HDR_LEN)
        if len(header) < 4:
            raise PcapError("not a pcap file: shorter than its magic number")
        magic_le = struct.unpack("<I", header[:4])[0]
        magic_be = struct.unpack(">I", header[:4])[0]
        if _MAGIC_PCAPNG in (magic_le, magic_be):
            raise PcapError("pcapng files are not supported: convert with 'editcap -F pcap IN OUT'")
        for order, magic in (("<", magic_le), (">", magic_be)):
            if magic in (_MAGIC_USEC, _MAGIC_NSEC):
                self._order = order
                self._ticks = 1e9 if magic == _MAGIC_NSEC else 1e6
                break
        else:
            raise PcapError(f"not a pcap file: magic number 0x{magic_be:08x}")
        if len(header) < _FILE_HDR_LEN:
            raise PcapError(f"truncated pcap file header: {len(header)} of {_FILE_HDR_LEN} bytes")
        _, _, _, _, self.snaplen, self.linktype = struct.unpack(self._order + "HHiIII", header[4:])
        self._record = struct.Struct(self._order + "IIII")

    def __iter__(self) -> Iterator[PcapRecord]:
        offset = _FILE_HDR_LEN
        read = self._stream.read
        while True:
            header = read(_REC_HDR_LEN)
            if not header:
                return
            if len(header) < _REC_HDR_LEN:
                raise PcapError(f"truncated pcap record header at byte {offset}")
            sec, frac, incl_len, orig_len = self._record.unpack(header)
            if incl_len > max(self.snaplen, _SNAPLEN):
                raise PcapError(f"pcap record at byte {offset} claims {incl_len} bytes: corrupt file")
            data = read(incl_len)
            if len(data) < incl_len:
                raise PcapError(f"truncated pcap record at byte {offset}: {len(data)} of {incl_len} bytes")
            yield PcapRecord(sec + frac / self._ticks, data, orig_len)
            offset += _REC_HDR_LEN + incl_len


class PcapWriter:
    """Write frames to a pcap file of one link type."""

    def __init__(self, stream: BinaryIO, linktype: int = LINKTYPE_ETHERNET, nanoseconds: bool = False) -> None:
        self._stream = stream
        self._ticks = 1_000_000_000 if nanoseconds else 1_000_000
        magic = _MAGIC_NSEC if nanoseconds else _MAGIC_USEC
        stream.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, _SNAPLEN, linktype))

    def write(self, data: bytes | bytearray | memoryview, timestamp: float = 0.0) -> None:
        ticks = round(timestamp * self._ticks)
        sec, frac = divmod(ticks, self._ticks)
        self._stream.write(struct.pack("<IIII", sec, frac, len(data), len(data)))
        self._stream.write(data)


def read_pcap(path: str | Path) -> tuple[int, list[PcapRecord]]:
    """The link type and all records of the pcap file at ``path``."""
    with open(path, "rb") as stream:
        reader = PcapReader(stream)
        return reader.linktype, list(reader)
