"""Extension headers that follow the BTH (IBA 9.3-9.6, rocev2.md): one codec each.

Each codec is a ``HeaderCodec``: which ``OpFlag`` it answers to, which ``Packet`` field holds
its value, its size, and ``unpack(buf, offset)`` / ``pack(buf, offset, value)``. Values are
small immutable tuples (``Reth``, ``Aeth`` ...) or, for the one-word ImmDt and IETH, plain
ints. The meaning of an AETH syndrome lives in ``pyroce.wire.aeth``; this file only lays
out bytes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from pyroce.wire.opcodes import HEADER_LEN, OpFlag

Buffer = bytes | bytearray | memoryview

_LOW24: Final = 0xFFFFFF


class Reth(NamedTuple):
    """RDMA Extended Transport Header: where a WRITE or READ goes."""

    va: int
    rkey: int
    dma_len: int


RETH_STRUCT: Final = struct.Struct(">QII")
"""The RETH's layout (va, rkey, dma_len): its codec's, and header prediction's, which reads a
WRITE's RETH as three ints (a ``Reth`` built per packet cost ~1 500 instructions compiled)."""


class Aeth(NamedTuple):
    """ACK Extended Transport Header: syndrome (see ``pyroce.wire.aeth``) and MSN."""

    syndrome: int
    msn: int


class Deth(NamedTuple):
    """Datagram Extended Transport Header (UD): Q_Key and source QP."""

    qkey: int
    src_qp: int


class Feth(NamedTuple):
    """Flush Extended Transport Header (IBA 1.5): placement type and selectivity level."""

    placement_type: int
    selectivity_level: int


class AtomicEth(NamedTuple):
    """Atomic Extended Transport Header: compare-and-swap or fetch-and-add operands."""

    va: int
    rkey: int
    swap_add: int
    compare: int


class AtomicAckEth(NamedTuple):
    """Atomic ACK Extended Transport Header: the value memory held before the atomic."""

    orig: int


class HeaderCodec(NamedTuple):
    """Byte layout of one extension header."""

    flag: OpFlag
    field: str  # the Packet field that holds the value
    size: int
    unpack: Callable[[Buffer, int], Any]
    pack: Callable[[bytearray | memoryview, int, Any], None]  # raises struct.error or ValueError


def _tuple_codec(flag: OpFlag, field: str, layout: struct.Struct, cls: type) -> HeaderCodec:
    assert layout.size == HEADER_LEN[flag]

    new = functools.partial(tuple.__new__, cls)  # NamedTuple.__new__ without its Python frame

    def unpack(buf: Buffer, offset: int) -> Any:
        return new(layout.unpack_from(buf, offset))

    def pack(buf: bytearray | memoryview, offset: int, value: Any) -> None:
        layout.pack_into(buf, offset, *value)

    return HeaderCodec(flag, field, layout.size, unpack, pack)


_U32: Final = struct.Struct(">I")
_DETH: Final = struct.Struct(">II")


def _unpack_u32(buf: Buffer, offset: int) -> int:
    return _U32.unpack_from(buf, offset)[0]


def _pack_u32(buf: bytearray | memoryview, offset: int, value: int) -> None:
    _U32.pack_into(buf, offset, value)


def _unpack_aeth(buf: Buffer, offset: int) -> Aeth:
    word = _U32.unpack_from(buf, offset)[0]
    return Aeth(word >> 24, word & _LOW24)


def _pack_aeth(buf: bytearray | memoryview, offset: int, aeth: Aeth) -> None:
    if not 0 <= aeth.msn <= _LOW24:
        raise struct.error("MSN does not fit 24 bits")
    _U32.pack_into(buf, offset, (aeth.syndrome << 24) | aeth.msn)


def _unpack_deth(buf: Buffer, offset: int) -> Deth:
    qkey, word = _DETH.unpack_from(buf, offset)
    return Deth(qkey, word & _LOW24)


def _pack_deth(buf: bytearray | memoryview, offset: int, deth: Deth) -> None:
    if not 0 <= deth.src_qp <= _LOW24:
        raise struct.error("source QP does not fit 24 bits")
    _DETH.pack_into(buf, offset, deth.qkey, deth.src_qp)


_FETH_PLT: Final = 0x0F
_FETH_SEL_SHIFT: Final = 4
_FETH_SEL: Final = 0x03


def _unpack_feth(buf: Buffer, offset: int) -> Feth:
    word = _U32.unpack_from(buf, offset)[0]
    return Feth(word & _FETH_PLT, (word >> _FETH_SEL_SHIFT) & _FETH_SEL)


def _pack_feth(buf: bytearray | memoryview, offset: int, feth: Feth) -> None:
    if not (0 <= feth.placement_type <= _FETH_PLT and 0 <= feth.selectivity_level <= _FETH_SEL):
        raise struct.error("FETH field out of range")
    _U32.pack_into(buf, offset, feth.placement_type | (feth.selectivity_level << _FETH_SEL_SHIFT))


CNP_RESERVED: Final = bytes(HEADER_LEN[OpFlag.CNP])


def _unpack_cnp(buf: Buffer, offset: int) -> bytes:
    return bytes(buf[offset : offset + len(CNP_RESERVED)])


def _pack_cnp(buf: bytearray | memoryview, offset: int, reserved: bytes) -> None:
    if len(reserved) != len(CNP_RESERVED):
        raise ValueError(f"CNP body is {len(CNP_RESERVED)} bytes")
    buf[offset : offset + len(CNP_RESERVED)] = reserved


CODECS: Final[dict[OpFlag, HeaderCodec]] = {
    OpFlag.DETH: HeaderCodec(OpFlag.DETH, "deth", 8, _unpack_deth, _pack_deth),
    OpFlag.FETH: HeaderCodec(OpFlag.FETH, "feth", 4, _unpack_feth, _pack_feth),
    OpFlag.RETH: _tuple_codec(OpFlag.RETH, "reth", RETH_STRUCT, Reth),
    OpFlag.ATMETH: _tuple_codec(OpFlag.ATMETH, "atomiceth", struct.Struct(">QIQQ"), AtomicEth),
    OpFlag.AETH: HeaderCodec(OpFlag.AETH, "aeth", 4, _unpack_aeth, _pack_aeth),
    OpFlag.ATMACK: _tuple_codec(OpFlag.ATMACK, "atomicacketh", struct.Struct(">Q"), AtomicAckEth),
    OpFlag.IMMDT: HeaderCodec(OpFlag.IMMDT, "immdt", 4, _unpack_u32, _pack_u32),
    OpFlag.IETH: HeaderCodec(OpFlag.IETH, "ieth", 4, _unpack_u32, _pack_u32),
    OpFlag.CNP: HeaderCodec(OpFlag.CNP, "cnp", 16, _unpack_cnp, _pack_cnp),
}
"""The codec of every extension header, keyed by its ``OpFlag``."""
