"""Base Transport Header (IBA 9.2, 12 bytes): codec and value.

PadCnt is not part of the value: it follows from the payload length
(``(-len) & 3``), so ``pyroce.wire.packet`` reads and writes it. TVer must be 0; reserved bits
are ignored on receive and sent as zero, as rxe does.
"""

from __future__ import annotations

import functools
import struct
from typing import Final, NamedTuple

from pyroce.wire.errors import BadTransportVersion, BuildError

DEFAULT_PKEY: Final = 0xFFFF
MAX_QPN: Final = 0xFFFFFF
QP1: Final = 1  # the GSI QP that carries CM MADs
MULTICAST_QPN: Final = 0xFFFFFF  # the destination QP of a datagram to a multicast group (IBA 10.5.2.1)

BTH_STRUCT: Final = struct.Struct(">BBHII")  # opcode, SE|MigReq|PadCnt|TVer, P_Key, FECN|BECN|DestQP, AckReq|PSN
DEST_QP_WORD: Final = 4  # the offset of the word whose low 24 bits are DestQP
_WORD: Final = struct.Struct(">I")

_SE: Final = 0x80
_MIG: Final = 0x40
SE_MASK: Final = 0x80  # Solicited Event, in the flags byte
PAD_MASK: Final = 0x30  # PadCnt, in the flags byte
TVER_MASK: Final = 0x0F
_FECN: Final = 0x80000000
_BECN: Final = 0x40000000
ACKREQ: Final = 0x80000000
_LOW24: Final = 0xFFFFFF  # DestQP and PSN: the low 24 bits of their words


class BTH(NamedTuple):
    """BTH fields, with pyverbs/IBA names."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    se: bool = False  # solicited event
    mig: bool = False  # MigReq
    pkey: int = DEFAULT_PKEY
    fecn: bool = False
    becn: bool = False


new_bth: Final = functools.partial(tuple.__new__, BTH)  # BTH from all nine fields, without NamedTuple.__new__'s Python frame


def unpack_bth(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[BTH, int]:
    """Parse the BTH at ``offset``; returns the value and its PadCnt.

    Raises ``BadTransportVersion`` when TVer is not 0. The caller checks the length."""
    opcode, flags, pkey, word1, word2 = BTH_STRUCT.unpack_from(buf, offset)
    if flags & TVER_MASK:
        raise BadTransportVersion(f"BTH TVer is {flags & TVER_MASK}, must be 0")
    bth = new_bth(
        (
            opcode,
            word1 & _LOW24,
            word2 & _LOW24,
            word2 & ACKREQ != 0,
            flags & _SE != 0,
            flags & _MIG != 0,
            pkey,
            word1 & _FECN != 0,
            word1 & _BECN != 0,
        )
    )
    return bth, (flags >> 4) & 3


def peek_dqpn(buf: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """The DestQP of the BTH at ``offset``, read without decoding the rest (a datagram's
    engine: ``link.steering``)."""
    return int(_WORD.unpack_from(buf, offset + DEST_QP_WORD)[0]) & _LOW24


def pack_bth(buf: bytearray | memoryview, offset: int, bth: BTH, pad: int) -> None:
    """Write ``bth`` with PadCnt ``pad`` at ``offset``."""
    opcode, dqpn, psn, ackreq, se, mig, pkey, fecn, becn = bth
    if (dqpn | psn) & ~_LOW24:  # also catches negative values
        raise BuildError(f"BTH dqpn 0x{dqpn:x} or psn 0x{psn:x} does not fit 24 bits")
    try:
        BTH_STRUCT.pack_into(
            buf,
            offset,
            opcode,
            (se << 7) | (mig << 6) | (pad << 4),
            pkey,
            (fecn << 31) | (becn << 30) | dqpn,
            (ackreq << 31) | psn,
        )
    except struct.error as exc:
        raise BuildError(f"BTH field out of range: {exc}") from None


def run_length(
    segments: memoryview, step: int, opcode: int, pkey: int, dqpn: int, psn: int, limit: int
) -> tuple[int, bool]:
    """How many of the ``step``-byte segments at the start of ``segments`` (at most ``limit``)
    carry the BTH of the next packets of one message: ``opcode``, ``pkey``, ``dqpn`` and the
    PSNs from ``psn`` on, TVer 0 and no PadCnt; and whether one of them asks for an ACK.
    Header prediction's test for the rest of a GRO run, once its first packet passed in full."""
    unpack = BTH_STRUCT.unpack_from
    count = ackreq = 0
    seg_opcode: int  # typed, as each unpacked field below: compiled, the tests are on machine ints
    flags: int
    seg_pkey: int
    word1: int
    word2: int
    for at in range(0, min(limit, len(segments) // step) * step, step):
        seg_opcode, flags, seg_pkey, word1, word2 = unpack(segments, at)
        if (seg_opcode != opcode or flags & (TVER_MASK | PAD_MASK) or seg_pkey != pkey or word1 & _LOW24 != dqpn
                or word2 & _LOW24 != (psn + count) & _LOW24):  # fmt: skip
            break
        ackreq |= word2
        count += 1
    return count, bool(ackreq & ACKREQ)
