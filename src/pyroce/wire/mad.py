"""The management datagram (IBA 13.4): the 24-byte common header every MAD on QP0/QP1 starts with.

A MAD is always 256 bytes; what follows the header belongs to its management class (the
connection manager's messages are in ``pyroce.wire.cm``). The two reserved header bytes after
the attribute ID are sent as zero and ignored on receive.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from pyroce.wire.errors import BadMadLength, BuildError

MAD_LEN = 256
MAD_HEADER_LEN = 24
MAD_BASE_VERSION = 1

_HEADER = struct.Struct(">BBBBHHQH2xI")
assert _HEADER.size == MAD_HEADER_LEN


class MgmtClass(enum.IntEnum):
    """Management classes (IBA table 127) pyroce names."""

    SUBN_LID_ROUTED = 0x01
    SUBN_ADM = 0x03
    PERF_MGMT = 0x04
    BM = 0x05
    DEVICE_MGMT = 0x06
    CM = 0x07
    SNMP = 0x08
    SUBN_DIRECTED_ROUTE = 0x81


class MadMethod(enum.IntEnum):
    """MAD methods (IBA table 129); the response bit 0x80 makes GET_RESP and friends."""

    GET = 0x01
    SET = 0x02
    SEND = 0x03
    TRAP = 0x05
    REPORT = 0x06
    TRAP_REPRESS = 0x07
    GET_RESP = 0x81
    REPORT_RESP = 0x86


@dataclass(frozen=True, slots=True)
class MadHeader:
    """The common MAD header, field for field (``method`` includes the response bit)."""

    base_version: int
    mgmt_class: int
    class_version: int
    method: int
    status: int
    class_specific: int
    tid: int
    attr_id: int
    attr_mod: int

    def encode(self) -> bytes:
        """The 24 header bytes; raises ``BuildError`` for a field that does not fit."""
        try:
            return _HEADER.pack(
                self.base_version, self.mgmt_class, self.class_version, self.method, self.status,
                self.class_specific, self.tid, self.attr_id, self.attr_mod,
            )  # fmt: skip
        except struct.error as exc:
            raise BuildError(f"MAD header field out of range: {exc}") from None

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview) -> MadHeader:
        """The header of the whole MAD ``data``; raises ``BadMadLength`` unless it is 256 bytes."""
        if len(data) != MAD_LEN:
            raise BadMadLength(f"MAD is {len(data)} bytes, must be {MAD_LEN}")
        return cls(*_HEADER.unpack_from(data))
