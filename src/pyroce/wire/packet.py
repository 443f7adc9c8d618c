"""A RoCEv2 packet as a value: parse a UDP payload into one, build one back into bytes.

Contract: ``parse_packet`` accepts any bytes and either returns a ``Packet`` or raises a
``MalformedPacket`` subclass naming the problem; nothing else escapes. It checks what the
packet says about itself (TVer, opcode, header and pad lengths, payload allowed by the
opcode); rules that need QP state, such as the path MTU, belong to the transport
(``PayloadRule.allows``). The ICRC is not part of the value: it depends on the IP header and
is handled by ``pyroce.wire.icrc`` and ``pyroce.wire.framing``.
"""

from __future__ import annotations

import functools
import operator
import struct
from builtins import memoryview  # mypyc finds a NamedTuple field's type among the module's globals
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from pyroce.wire.bth import BTH, DEFAULT_PKEY, pack_bth, unpack_bth
from pyroce.wire.errors import BadPadCount, BuildError, LengthMismatch, TruncatedPacket, UnknownOpcode
from pyroce.wire.headers import CODECS, Aeth, AtomicAckEth, AtomicEth, Buffer, Deth, Feth, Reth
from pyroce.wire.icrc import ICRC_LEN, MEMORYVIEW
from pyroce.wire.opcodes import BTH_LEN, OPCODES, Flag, Opcode, OpInfo, PayloadRule
from pyroce.wire.psn import psn_add


class Packet(NamedTuple):
    """One RoCEv2 packet: BTH, the extension headers its opcode carries (others ``None``)
    and the payload without padding. A parsed payload is a view into the parsed buffer."""

    bth: BTH
    payload: Buffer = b""
    deth: Deth | None = None
    feth: Feth | None = None
    reth: Reth | None = None
    atomiceth: AtomicEth | None = None
    aeth: Aeth | None = None
    atomicacketh: AtomicAckEth | None = None
    immdt: int | None = None
    ieth: int | None = None
    cnp: bytes | None = None

    @property
    def info(self) -> OpInfo:
        """The opcode table row of this packet (``BuildError`` for an unknown opcode)."""
        return _info(self.bth.opcode)

    @property
    def pad(self) -> int:
        """PadCnt: zero bytes after the payload up to a 4-byte boundary."""
        return -len(self.payload) & 3


class PacketRun(NamedTuple):
    """Packets of one message that are a BTH and ``pmtu`` bytes of payload each, at
    consecutive PSNs from ``psn``: its MIDDLE packets, and its FIRST and LAST when they carry
    no other header (a SEND's FIRST; a LAST of a full PMTU without immediate or SE). A
    transport describes them this way and a link builds them in one loop
    (``RocePath.build_run_into``) instead of one ``Packet`` value per packet; ``packets()``
    spells the same packets out as values."""

    opcode: int  # of the packets between the first and the last
    dqpn: int
    psn: int
    pkey: int
    payload: memoryview  # count * pmtu bytes
    pmtu: int
    ackreq_last: bool  # AckReq on the last packet of the run
    first_opcode: int  # of the run's first packet (``opcode`` unless it is the message's FIRST)
    last_opcode: int  # of its last packet (``opcode`` unless it is the message's LAST)

    def opcode_at(self, index: int, count: int) -> int:
        """The opcode of packet ``index`` of the run's ``count``."""
        return self.first_opcode if index == 0 else self.last_opcode if index == count - 1 else self.opcode

    def packets(self) -> list[Packet]:
        count, pmtu = len(self.payload) // self.pmtu, self.pmtu
        packets = []
        for index in range(count):
            ackreq = self.ackreq_last and index == count - 1
            bth = BTH(self.opcode_at(index, count), self.dqpn, psn_add(self.psn, index), ackreq, pkey=self.pkey)
            packets.append(Packet(bth, self.payload[index * pmtu : (index + 1) * pmtu]))
        return packets


new_run: Final = functools.partial(tuple.__new__, PacketRun)  # NamedTuple.__new__ without its Python frame

_SLOT: Final = {field: index for index, field in enumerate(Packet._fields)}
_EMPTY_FIELDS: Final = (None,) * len(Packet._fields)
new_packet: Final = functools.partial(tuple.__new__, Packet)  # NamedTuple.__new__ without its Python frame
ACK_BYTES: Final = OPCODES[Opcode.RC_ACKNOWLEDGE].hdr_len  # type: ignore[union-attr]  # BTH and AETH: an ACK built, ICRC not yet
_LOW24: Final = 0xFFFFFF


class _Layout(NamedTuple):
    """Precomputed per opcode: where each header's value sits in ``Packet`` and in bytes."""

    info: OpInfo
    present: tuple[tuple[int, int, Callable[..., Any], Callable[..., Any]], ...]  # (slot, offset, unpack, pack)
    nones: int  # how many Packet fields are None in a well-formed packet of this opcode
    exact_payload: int  # the only payload length the opcode allows (0 or 8), or -1 for PMTU-bound ones


def _layout(info: OpInfo) -> _Layout:
    present = []
    for flag, offset in info.offsets:
        codec = CODECS[flag]
        present.append((_SLOT[codec.field], offset, codec.unpack, codec.pack))
    exact = {PayloadRule.NONE: 0, PayloadRule.FIXED8: 8}.get(info.payload, -1)
    return _Layout(info, tuple(present), len(CODECS) - len(present), exact)


_LAYOUTS: Final[tuple[_Layout | None, ...]] = tuple(_layout(info) if info else None for info in OPCODES)


def _info(opcode: int) -> OpInfo:
    layout = _LAYOUTS[opcode] if 0 <= opcode <= 0xFF else None
    if layout is None:
        raise BuildError(f"opcode 0x{opcode:x} is not a supported RoCEv2 opcode")
    return layout.info


def parse_packet(data: Buffer) -> Packet:
    """Parse a RoCEv2 UDP payload (BTH through ICRC) into a ``Packet``.

    Raises ``TruncatedPacket``, ``UnknownOpcode``, ``BadTransportVersion``, ``BadPadCount``
    or ``LengthMismatch``."""
    view = MEMORYVIEW(data)
    size = len(view)
    if size < BTH_LEN + ICRC_LEN:
        raise TruncatedPacket(f"{size} bytes is shorter than a BTH and ICRC ({BTH_LEN + ICRC_LEN})")
    layout = _LAYOUTS[view[0]]
    if layout is None:
        raise UnknownOpcode(f"opcode 0x{view[0]:02x} is reserved or unsupported")
    bth, pad = unpack_bth(view)
    info = layout.info
    payload_end = size - ICRC_LEN - pad
    payload_len = payload_end - info.hdr_len
    if size < info.hdr_len + ICRC_LEN:
        raise TruncatedPacket(f"{info.name} needs {info.hdr_len + ICRC_LEN} bytes of headers and ICRC, got {size}")
    if payload_len < 0:
        raise BadPadCount(f"PadCnt {pad} is larger than the {payload_len + pad}-byte payload of {info.name}")
    if pad != -payload_len & 3:
        raise BadPadCount(f"PadCnt {pad} does not pad a {payload_len}-byte payload to 4 bytes", bth)
    if layout.exact_payload >= 0 and payload_len != layout.exact_payload:
        raise LengthMismatch(f"{info.name} carries {info.payload.value} bytes of payload, got {payload_len}")
    fields: list[Any] = list(_EMPTY_FIELDS)
    fields[0] = bth
    fields[1] = view[info.hdr_len : payload_end]
    for slot, offset, unpack, _ in layout.present:
        fields[slot] = unpack(view, offset)  # type: ignore[operator]
    return new_packet(fields)


def packet_length(pkt: Packet) -> int:
    """Bytes of the UDP payload ``pkt`` builds to: headers, payload, pad and ICRC."""
    opcode = pkt.bth.opcode
    layout = _LAYOUTS[opcode] if 0 <= opcode <= 0xFF else None  # read inline: once per packet sent
    info = _info(opcode) if layout is None else layout.info  # (``_info`` raises the BuildError)
    return info.hdr_len + ((len(pkt.payload) + 3) & ~3) + ICRC_LEN


def build_packet_into(buf: bytearray | memoryview, offset: int, pkt: Packet) -> int:
    """Write ``pkt`` from BTH through padding at ``offset``; returns the bytes written.

    The 4-byte ICRC slot that follows is left to the caller (``framing.RocePath`` fills it).
    Raises ``BuildError`` when the headers present do not match the opcode, a field is out of
    range, or the packet and its ICRC slot do not fit in ``buf``."""
    bth = pkt.bth
    layout = _LAYOUTS[bth.opcode] if 0 <= bth.opcode <= 0xFF else None
    if layout is None:
        raise BuildError(f"opcode 0x{bth.opcode:x} is not a supported RoCEv2 opcode")
    info = layout.info
    payload = pkt.payload
    payload_len = len(payload)
    if layout.exact_payload >= 0 and payload_len != layout.exact_payload:
        raise BuildError(f"{info.name} payload must be {info.payload.value} bytes, not {payload_len}")
    pad = -payload_len & 3
    written = info.hdr_len + payload_len + pad
    if offset < 0 or len(buf) < offset + written + ICRC_LEN:
        raise BuildError(f"{info.name}: {written + ICRC_LEN} bytes do not fit at offset {offset} of {len(buf)}")
    pack_bth(buf, offset, bth, pad)
    for slot, hdr_offset, _, pack in layout.present:
        value = pkt[slot]
        if value is None:
            raise BuildError(f"{info.name} needs a {Packet._fields[slot]} header")
        try:
            pack(buf, offset + hdr_offset, value)
        except (struct.error, TypeError, ValueError) as exc:
            raise BuildError(f"{info.name}: cannot pack {Packet._fields[slot]} {value!r}: {exc}") from None
    if pkt.count(None) != layout.nones:
        extra = [
            f
            for f, v in zip(Packet._fields[2:], pkt[2:])
            if v is not None and _SLOT[f] not in {slot for slot, *_ in layout.present}
        ]
        raise BuildError(f"{info.name} carries no {extra[0]} header")
    start = offset + info.hdr_len
    end = start + payload_len
    buf[start:end] = payload
    if pad:
        buf[end : end + pad] = _PADDING[pad]
    return written


_PADDING: Final = (b"", b"\0", b"\0\0", b"\0\0\0")

_ACK_TAIL: Final = struct.Struct(">II")  # an ACK's last BTH word (AckReq 0 | PSN) and its AETH word (syndrome | MSN)
_PSN_WORD_AT: Final = 8  # BTH bytes 8-11 (AckReq | PSN): a template's heads end there (an ACK's AETH follows)


class AckTemplate:
    """A connected QP's ACKs (IBA 9.7.5.1: BTH and AETH, no payload) as bytes, built once by
    the codecs above for its destination QP, syndrome and P_Key; each ACK patches what changes, the
    PSN and the MSN, instead of building ``Packet``, ``BTH`` and ``Aeth`` values. Its ICRC is
    the link's to add (``RocePath.seal``), as for any packet."""

    __slots__ = ("_head", "_syndrome", "dqpn", "pkey")

    def __init__(self, dqpn: int, syndrome: int, pkey: int = DEFAULT_PKEY) -> None:
        buf = bytearray(ACK_BYTES + ICRC_LEN)
        build_packet_into(buf, 0, Packet(BTH(Opcode.RC_ACKNOWLEDGE, dqpn, 0, pkey=pkey), aeth=Aeth(syndrome, 0)))
        self.dqpn = dqpn
        self.pkey = pkey
        self._head = bytes(buf[:_PSN_WORD_AT])  # opcode, flags, P_Key, DestQP: the same in every ACK
        self._syndrome = syndrome << 24

    def ack(self, psn: int, msn: int) -> bytes:
        """The ACK of ``psn`` carrying ``msn`` (24 bits each), BTH through AETH."""
        return self._head + _ACK_TAIL.pack(psn & _LOW24, self._syndrome | (msn & _LOW24))


_PSN_WORD: Final = struct.Struct(">I")  # AckReq | PSN
_EXTENSION_HEADERS: Final = functools.reduce(operator.or_, map(int, CODECS))  # every header besides the BTH
_PSN_RETH: Final = struct.Struct(">IQII")  # AckReq | PSN, then a RETH: virtual address, R_Key, DMA length


class BthTemplate:
    """A connected QP's packets that are a BTH and payload alone (a SEND ONLY, FIRST, MIDDLE
    or LAST without immediate; a WRITE MIDDLE or LAST), a BTH, a RETH and payload (a WRITE
    ONLY or FIRST without immediate) or a BTH, an AETH and payload (a READ response ONLY,
    FIRST or LAST), as bytes: the first two BTH words of each opcode, SE and pad count are
    built once by ``build_packet_into`` for the QP's destination and P_Key, and each packet
    adds its AckReq and PSN word (and RETH or AETH) and its payload, without ``Packet``,
    ``BTH``, ``Reth`` and ``Aeth`` values or header packing. Its ICRC is the link's to add
    (``RocePath.seal``), as for any packet."""

    __slots__ = ("_heads", "dqpn", "pkey")

    def __init__(self, dqpn: int, pkey: int) -> None:
        self.dqpn = dqpn
        self.pkey = pkey
        # by (opcode << 3 | SE << 2 | pad count) << 5 | the headers besides the BTH (``Flag``:
        # none, RETH or AETH), so a method never takes a head another method built
        self._heads: dict[int, bytes] = {}

    def packet(self, opcode: int, psn: int, ackreq: bool, solicited: bool, payload: Buffer) -> bytes:
        """Packet ``opcode`` at ``psn`` carrying ``payload``, BTH through padding
        (``BuildError`` for an opcode with more headers than the BTH)."""
        pad = -len(payload) & 3
        key = (opcode << 3 | solicited << 2 | pad) << 5  # the headers besides the BTH below: none
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = self._head(opcode, solicited, pad)
        return head + _PSN_WORD.pack(ackreq << 31 | (psn & _LOW24)) + payload + _PADDING[pad]

    def write_packet(self, opcode: int, psn: int, ackreq: bool, solicited: bool, raddr: int, rkey: int, length: int,
                     payload: Buffer) -> bytes:  # fmt: skip
        """WRITE ONLY or FIRST ``opcode`` at ``psn``: its RETH (``length`` bytes to ``raddr``
        under ``rkey``), then ``payload``, BTH through padding (``BuildError`` for an opcode
        with other headers than the BTH and RETH)."""
        pad = -len(payload) & 3
        key = (opcode << 3 | solicited << 2 | pad) << 5 | Flag.RETH
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = self._head(opcode, solicited, pad, Flag.RETH)
        return head + _PSN_RETH.pack(ackreq << 31 | (psn & _LOW24), raddr, rkey, length) + payload + _PADDING[pad]

    def read_response(self, opcode: int, psn: int, syndrome: int, msn: int, payload: Buffer) -> bytes:
        """READ response ONLY, FIRST or LAST ``opcode`` at ``psn``: its AETH (``syndrome``,
        ``msn``), then ``payload``, BTH through padding (``BuildError`` for an opcode with
        other headers than the BTH and AETH)."""
        pad = -len(payload) & 3
        key = (opcode << 3 | pad) << 5 | Flag.AETH
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = self._head(opcode, False, pad, Flag.AETH)
        return head + _ACK_TAIL.pack(psn & _LOW24, syndrome << 24 | (msn & _LOW24)) + payload + _PADDING[pad]

    def _head(self, opcode: int, solicited: bool, pad: int, headers: int = 0) -> bytes:
        """The first two BTH words of ``opcode``, whose headers besides the BTH must be ``headers``."""
        info = _info(opcode)
        if info.flags & _EXTENSION_HEADERS != headers:
            carries = ("headers besides the BTH" if not headers else
                       f"other headers than {'a RETH' if headers == Flag.RETH else 'an AETH'} beside the BTH")  # fmt: skip
            raise BuildError(f"{info.name} carries {carries}: no template builds it")
        buf = bytearray(info.hdr_len + 4 + ICRC_LEN)
        bth = BTH(opcode, self.dqpn, 0, se=solicited, pkey=self.pkey)
        build_packet_into(buf, 0, Packet(bth, bytes(-pad & 3), reth=Reth(0, 0, 0) if headers == Flag.RETH else None,
                                         aeth=Aeth(0, 0) if headers == Flag.AETH else None))  # fmt: skip
        return bytes(buf[:_PSN_WORD_AT])
