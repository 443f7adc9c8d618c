"""What an AETH syndrome means (IBA 9.7.5.2.x, table 45): ACK, RNR NAK or NAK.

Syndrome bits 6:5 give the kind; bits 4:0 the credit count (ACK), the RNR timer code
(RNR NAK) or the NAK code. rxe always advertises unlimited credits (0x1F).
"""

from __future__ import annotations

import enum
from typing import Final


class AethKind(enum.IntEnum):
    ACK = 0
    RNR_NAK = 1
    RESERVED = 2
    NAK = 3


_KINDS: Final = tuple(AethKind)  # by value 0..3: a tuple index, not an enum call per response


class NakCode(enum.IntEnum):
    """NAK codes (IBA table 46)."""

    PSN_SEQ_ERR = 0
    INVALID_REQUEST = 1
    REMOTE_ACCESS_ERR = 2
    REMOTE_OP_ERR = 3
    INVALID_RD_REQUEST = 4


CREDITS_UNLIMITED: Final = 0x1F
_KIND_SHIFT: Final = 5
_VALUE_MASK: Final = 0x1F

RNR_TIMER_US: Final[tuple[int, ...]] = (
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
)  # fmt: skip
"""Microseconds of each RNR NAK timer code 0..31 (IBA table 47); code 0 is the longest."""


def ack_syndrome(credits: int = CREDITS_UNLIMITED) -> int:
    """Syndrome of a positive ACK advertising ``credits`` (0x1F: unlimited)."""
    return (AethKind.ACK << _KIND_SHIFT) | _in_range(credits, "credit count")


def rnr_nak_syndrome(timer_code: int) -> int:
    """Syndrome of an RNR NAK asking the requester to wait ``timer_code``."""
    return (AethKind.RNR_NAK << _KIND_SHIFT) | _in_range(timer_code, "RNR timer code")


def nak_syndrome(code: NakCode | int) -> int:
    """Syndrome of a NAK with ``code`` (0x60 PSN sequence error ... 0x63 remote op error)."""
    return (AethKind.NAK << _KIND_SHIFT) | _in_range(int(code), "NAK code")


SYNDROME_KINDS: Final = tuple(_KINDS[(syndrome >> _KIND_SHIFT) & 3] for syndrome in range(256))
"""The kind of each syndrome byte, for per-packet code: an index, not a call per response."""


def syndrome_kind(syndrome: int) -> AethKind:
    return SYNDROME_KINDS[syndrome & 0xFF]


def syndrome_value(syndrome: int) -> int:
    """Bits 4:0: credits, RNR timer code or NAK code, depending on the kind."""
    return syndrome & _VALUE_MASK


def rnr_timer_to_us(code: int) -> int:
    """Microseconds an RNR NAK with timer ``code`` asks the requester to wait."""
    return RNR_TIMER_US[_in_range(code, "RNR timer code")]


def rnr_timer_from_us(us: float) -> int:
    """The code of the shortest RNR timer of at least ``us`` microseconds (code 0, the
    longest, when nothing else is long enough)."""
    fitting = [code for code in range(1, 32) if RNR_TIMER_US[code] >= us]
    return fitting[0] if fitting else 0


def describe_syndrome(syndrome: int) -> str:
    """``ACK credits=31``, ``RNR_NAK timer=14 (1.28 ms)``, ``NAK REMOTE_ACCESS_ERR``."""
    kind, value = syndrome_kind(syndrome), syndrome_value(syndrome)
    if kind is AethKind.ACK:
        return f"ACK credits={value}"
    if kind is AethKind.RNR_NAK:
        return f"RNR_NAK timer={value} ({RNR_TIMER_US[value] / 1000:g} ms)"
    if kind is AethKind.NAK:
        name = NakCode(value).name if value in NakCode._value2member_map_ else f"code {value}"
        return f"NAK {name}"
    return f"RESERVED 0x{syndrome:02x}"


def _in_range(value: int, what: str) -> int:
    if not 0 <= value <= _VALUE_MASK:
        raise ValueError(f"{what} {value} outside 0..31")
    return value
