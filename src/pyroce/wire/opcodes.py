"""The one opcode table of pyroce (IBA 9.2, table 35; rxe's ``rxe_opcode[]``).

Rule: code never lists opcodes. It looks up ``OPCODES[opcode]`` and tests ``OpFlag``s
(``info.flags & OpFlag.END``), so a property of an opcode lives here and nowhere else.
Names are generated as scapy does: transport prefix plus operation, e.g. ``RC_SEND_FIRST``,
``UC_RDMA_WRITE_ONLY``, ``UD_SEND_ONLY``.
"""

from __future__ import annotations

import enum
from typing import Any, Final, NamedTuple, cast


class Transport(enum.IntEnum):
    """BTH opcode bits 7:5."""

    RC = 0x00
    UC = 0x20
    RD = 0x40
    UD = 0x60
    CNP = 0x80
    XRC = 0xA0


class Flag:
    """Headers an opcode carries and what kind of packet it is (rxe's ``RXE_*_MASK``), as plain
    ints to test against ``OPCODE_FLAGS`` (``flags & Flag.END``): class constants, which the
    compiled build reads as C constants, where arithmetic on an ``IntFlag`` builds a member."""

    NONE: Final = 0
    # extension headers, in wire order (their codecs: wire.headers.CODECS)
    DETH: Final = 1 << 0
    FETH: Final = 1 << 1
    RETH: Final = 1 << 2
    ATMETH: Final = 1 << 3
    AETH: Final = 1 << 4
    ATMACK: Final = 1 << 5
    IMMDT: Final = 1 << 6
    IETH: Final = 1 << 7
    CNP: Final = 1 << 8
    # what the packet is
    REQ: Final = 1 << 10  # a request (requester -> responder)
    ACK: Final = 1 << 11  # a response (ACK, read response, atomic ACK)
    SEND: Final = 1 << 12
    WRITE: Final = 1 << 13
    READ: Final = 1 << 14  # read request or read response
    ATOMIC: Final = 1 << 15  # compare-and-swap or fetch-and-add request
    FLUSH: Final = 1 << 16
    ATOMIC_WRITE: Final = 1 << 17
    START: Final = 1 << 18  # first packet of a message (FIRST or ONLY)
    MIDDLE: Final = 1 << 19
    END: Final = 1 << 20  # last packet of a message (LAST or ONLY)
    RWR: Final = 1 << 21  # consumes a receive WQE at the responder
    COMP: Final = 1 << 22  # completes a receive WQE at the responder


class OpFlag(enum.IntFlag):
    """``Flag``'s bits as an ``IntFlag``, for the opcode table and the names its values print."""

    NONE = Flag.NONE
    DETH = Flag.DETH
    FETH = Flag.FETH
    RETH = Flag.RETH
    ATMETH = Flag.ATMETH
    AETH = Flag.AETH
    ATMACK = Flag.ATMACK
    IMMDT = Flag.IMMDT
    IETH = Flag.IETH
    CNP = Flag.CNP
    REQ = Flag.REQ
    ACK = Flag.ACK
    SEND = Flag.SEND
    WRITE = Flag.WRITE
    READ = Flag.READ
    ATOMIC = Flag.ATOMIC
    FLUSH = Flag.FLUSH
    ATOMIC_WRITE = Flag.ATOMIC_WRITE
    START = Flag.START
    MIDDLE = Flag.MIDDLE
    END = Flag.END
    RWR = Flag.RWR
    COMP = Flag.COMP


HEADER_FLAGS: Final = (
    OpFlag.DETH,
    OpFlag.FETH,
    OpFlag.RETH,
    OpFlag.ATMETH,
    OpFlag.AETH,
    OpFlag.ATMACK,
    OpFlag.IMMDT,
    OpFlag.IETH,
    OpFlag.CNP,
)
"""Extension headers in the order they follow the BTH (IBA 9.2)."""


class PayloadRule(enum.Enum):
    """How many payload bytes a packet of an opcode carries, given the path MTU."""

    NONE = "0"  # no payload at all
    FULL = "PMTU"  # FIRST and MIDDLE: exactly PMTU
    TAIL = "1..PMTU"  # LAST: at least one byte, at most PMTU
    ANY = "0..PMTU"  # ONLY: zero up to PMTU
    FIXED8 = "8"  # ATOMIC_WRITE: exactly 8 bytes

    def allows(self, length: int, pmtu: int) -> bool:
        """Whether ``length`` payload bytes are legal for this rule at path MTU ``pmtu``."""
        if self is PayloadRule.NONE:
            return length == 0
        if self is PayloadRule.FULL:
            return length == pmtu
        if self is PayloadRule.TAIL:
            return 0 < length <= pmtu
        if self is PayloadRule.ANY:
            return length <= pmtu
        return length == 8


class OpInfo(NamedTuple):
    """One row of the opcode table."""

    opcode: int
    name: str
    flags: OpFlag
    payload: PayloadRule
    hdr_len: int  # BTH plus extension headers, in bytes
    offsets: tuple[tuple[OpFlag, int], ...]  # (header flag, byte offset from BTH start)

    @property
    def transport(self) -> Transport:
        return Transport(self.opcode & 0xE0)


BTH_LEN: Final = 12

HEADER_LEN: Final = {
    OpFlag.DETH: 8,
    OpFlag.FETH: 4,
    OpFlag.RETH: 16,
    OpFlag.ATMETH: 28,
    OpFlag.AETH: 4,
    OpFlag.ATMACK: 8,
    OpFlag.IMMDT: 4,
    OpFlag.IETH: 4,
    OpFlag.CNP: 16,
}

F = OpFlag
_SEND_REQ: Final = F.REQ | F.SEND
_WRITE_REQ: Final = F.REQ | F.WRITE
_READ_RESP: Final = F.ACK | F.READ

# (low 5 bits, operation, flags, payload rule) for RC; UC takes the SEND and WRITE rows.
_RC_OPS: Final = (
    (0x00, "SEND_FIRST", _SEND_REQ | F.START | F.RWR, PayloadRule.FULL),
    (0x01, "SEND_MIDDLE", _SEND_REQ | F.MIDDLE, PayloadRule.FULL),
    (0x02, "SEND_LAST", _SEND_REQ | F.END | F.COMP, PayloadRule.TAIL),
    (0x03, "SEND_LAST_WITH_IMMEDIATE", _SEND_REQ | F.IMMDT | F.END | F.COMP, PayloadRule.TAIL),
    (0x04, "SEND_ONLY", _SEND_REQ | F.START | F.END | F.RWR | F.COMP, PayloadRule.ANY),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE", _SEND_REQ | F.IMMDT | F.START | F.END | F.RWR | F.COMP, PayloadRule.ANY),
    (0x06, "RDMA_WRITE_FIRST", _WRITE_REQ | F.RETH | F.START, PayloadRule.FULL),
    (0x07, "RDMA_WRITE_MIDDLE", _WRITE_REQ | F.MIDDLE, PayloadRule.FULL),
    (0x08, "RDMA_WRITE_LAST", _WRITE_REQ | F.END, PayloadRule.TAIL),
    (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", _WRITE_REQ | F.IMMDT | F.END | F.RWR | F.COMP, PayloadRule.TAIL),
    (0x0A, "RDMA_WRITE_ONLY", _WRITE_REQ | F.RETH | F.START | F.END, PayloadRule.ANY),
    (
        0x0B,
        "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        _WRITE_REQ | F.RETH | F.IMMDT | F.START | F.END | F.RWR | F.COMP,
        PayloadRule.ANY,
    ),
    (0x0C, "RDMA_READ_REQUEST", F.REQ | F.READ | F.RETH | F.START | F.END, PayloadRule.NONE),
    (0x0D, "RDMA_READ_RESPONSE_FIRST", _READ_RESP | F.AETH | F.START, PayloadRule.FULL),
    (0x0E, "RDMA_READ_RESPONSE_MIDDLE", _READ_RESP | F.MIDDLE, PayloadRule.FULL),
    (0x0F, "RDMA_READ_RESPONSE_LAST", _READ_RESP | F.AETH | F.END, PayloadRule.TAIL),
    (0x10, "RDMA_READ_RESPONSE_ONLY", _READ_RESP | F.AETH | F.START | F.END, PayloadRule.ANY),
    (0x11, "ACKNOWLEDGE", F.ACK | F.AETH | F.START | F.END, PayloadRule.NONE),
    (0x12, "ATOMIC_ACKNOWLEDGE", F.ACK | F.AETH | F.ATMACK | F.START | F.END, PayloadRule.NONE),
    (0x13, "COMPARE_SWAP", F.REQ | F.ATOMIC | F.ATMETH | F.START | F.END, PayloadRule.NONE),
    (0x14, "FETCH_ADD", F.REQ | F.ATOMIC | F.ATMETH | F.START | F.END, PayloadRule.NONE),
    (0x16, "SEND_LAST_WITH_INVALIDATE", _SEND_REQ | F.IETH | F.END | F.COMP, PayloadRule.TAIL),
    (
        0x17,
        "SEND_ONLY_WITH_INVALIDATE",
        _SEND_REQ | F.IETH | F.START | F.END | F.RWR | F.COMP,
        PayloadRule.ANY,
    ),
    (0x1C, "FLUSH", F.REQ | F.FLUSH | F.FETH | F.RETH | F.START | F.END, PayloadRule.NONE),
    (0x1D, "ATOMIC_WRITE", F.REQ | F.ATOMIC_WRITE | F.RETH | F.START | F.END, PayloadRule.FIXED8),
)
_UC_LAST_OP: Final = 0x0B
_UD_OPS: Final = (
    (0x04, "SEND_ONLY", _SEND_REQ | F.DETH | F.START | F.END | F.RWR | F.COMP, PayloadRule.ANY),
    (
        0x05,
        "SEND_ONLY_WITH_IMMEDIATE",
        _SEND_REQ | F.DETH | F.IMMDT | F.START | F.END | F.RWR | F.COMP,
        PayloadRule.ANY,
    ),
)
_CNP_OPS: Final = ((0x01, "CNP", F.CNP, PayloadRule.NONE),)


def _row(transport: Transport, low: int, op: str, flags: OpFlag, rule: PayloadRule) -> OpInfo:
    offsets = []
    offset = BTH_LEN
    for header in HEADER_FLAGS:
        if flags & header:
            offsets.append((header, offset))
            offset += HEADER_LEN[header]
    name = op if transport is Transport.CNP else f"{transport.name}_{op}"
    return OpInfo(transport | low, name, flags, rule, offset, tuple(offsets))


def _table() -> tuple[OpInfo | None, ...]:
    table: list[OpInfo | None] = [None] * 256
    rows = [(Transport.RC, op) for op in _RC_OPS]
    rows += [(Transport.UC, op) for op in _RC_OPS if op[0] <= _UC_LAST_OP]
    rows += [(Transport.UD, op) for op in _UD_OPS]
    rows += [(Transport.CNP, op) for op in _CNP_OPS]
    for transport, (low, op, flags, rule) in rows:
        info = _row(transport, low, op, flags, rule)
        table[info.opcode] = info
    return tuple(table)


OPCODES: Final[tuple[OpInfo | None, ...]] = _table()
"""256 entries indexed by BTH opcode; ``None`` for opcodes pyroce does not accept."""

OPCODE_FLAGS: Final[tuple[int, ...]] = tuple(int(info.flags) if info is not None else 0 for info in OPCODES)
"""Each opcode's ``OpFlag`` bits as a plain int, for per-packet code: arithmetic on an
``IntFlag`` builds a new enum member each time (about 1 µs here), an int does not."""

OPCODE_HDR_LEN: Final[tuple[int, ...]] = tuple(info.hdr_len if info is not None else 0 for info in OPCODES)
"""Each opcode's ``hdr_len``, indexed by opcode: an int read from a tuple (a NamedTuple's field
read by name is a generic attribute lookup, compiled)."""

OPCODE_PAYLOAD: Final[tuple[PayloadRule, ...]] = tuple(
    info.payload if info is not None else PayloadRule.NONE for info in OPCODES
)
"""Each opcode's payload rule, indexed by opcode (a tuple index, not a property chain)."""

Opcode: Final[Any] = cast(Any, enum.IntEnum)("Opcode", [(info.name, info.opcode) for info in OPCODES if info is not None])
"""Every supported opcode by name: ``Opcode.RC_SEND_FIRST == 0x00``, ``Opcode.CNP == 0x81``."""


def opcode_name(opcode: int) -> str:
    """The table name of ``opcode``, or ``UNKNOWN_0xNN``."""
    info = OPCODES[opcode & 0xFF]
    return info.name if info is not None else f"UNKNOWN_0x{opcode & 0xFF:02x}"
