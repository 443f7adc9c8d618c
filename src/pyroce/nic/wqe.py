"""Work queue elements in mlx5's public layouts (rdma-core ``providers/mlx5/mlx5dv.h``).

A send WQE is a run of 16-byte segments in a ring of 64-byte basic blocks (WQEBBs):
control, then (a UD QP's) the datagram segment with the address vector, remote address (RDMA
and atomics), atomic operands, then data segments or one inline segment. A WQE may wrap from the ring's end to its start. A receive WQE is an array of
data segments, ended early by ``lkey = MLX5_INVALID_LKEY``.

Rule: the engine reads each field of a WQE from the ring once and validates what it read
(hostile-inputs.md, CVE-2026-74378: a count re-read from a shared ring overflowed rxe), so
nothing the posting side writes later can change a WQE being executed: the ring's fetch reads
``ds`` once, and the decoder copies the segments out in one ``struct`` call (a WQE that wraps
is first copied whole) and takes every field from that copy.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from pyroce.transport.work import Sge, SgeLike  # a data segment: byte_count, lkey, addr

WQEBB: Final = 64  # bytes in a send-queue basic block
SEG: Final = 16  # bytes in a segment; the control segment's ``ds`` counts these
MLX5_INVALID_LKEY: Final = 0x100
INLINE_FLAG: Final = 0x80000000


class WqeOpcode(enum.IntEnum):
    """``MLX5_OPCODE_*`` in the control segment."""

    NOP = 0x00
    SEND_INVAL = 0x01
    RDMA_WRITE = 0x08
    RDMA_WRITE_IMM = 0x09
    SEND = 0x0A
    SEND_IMM = 0x0B
    RDMA_READ = 0x10
    ATOMIC_CS = 0x11
    ATOMIC_FA = 0x12
    BIND_MW = 0x18
    LOCAL_INVAL = 0x1B


LOCAL_OPCODES: Final = frozenset({WqeOpcode.BIND_MW, WqeOpcode.LOCAL_INVAL})  # executed by the NIC, nothing sent


class FmCeSe(enum.IntFlag):
    """Control segment ``fm_ce_se`` bits."""

    NONE = 0
    SOLICITED = 0x02
    CQ_UPDATE = 0x08  # signaled: produce a CQE
    FENCE = 0x80


class WqeError(ValueError):
    """A WQE the engine cannot execute: bad opcode, size or segment counts."""


class MwBindSeg(NamedTuple):
    """A BIND_MW WQE's bind segment (pyroce's own layout; mlx5 binds through UMR segments):
    ``length`` bytes at ``addr`` of the MR ``mr_key``, granting ``access``. The window and its
    new key are the control segment's ``imm``."""

    addr: int
    length: int
    mr_key: int
    access: int


class AddressVector(NamedTuple):
    """A UD send's destination: mlx5's ``struct mlx5_wqe_av`` (48 bytes, the datagram
    segment), as libmlx5 fills it from an AH for RoCE: Q_Key, destination QPN (with the
    extended-AV bit), SL, the UDP source port in ``rlid``, traffic class, hop limit, the GRH
    flag with the source GID index and flow label, and the destination GID."""

    qkey: int
    dqpn: int
    rgid: bytes
    sgid_index: int = 0
    flow_label: int = 0
    tclass: int = 0
    hop_limit: int = 64
    sl: int = 0
    sport: int = 0


_SEND_WQE_FIELDS: Final = ("opcode", "wqe_index", "qpn", "fm_ce_se", "imm", "raddr", "rkey", "swap_add", "compare",
                           "sges", "inline", "opmod", "bind", "av")  # fmt: skip


class SendWqe:
    """A decoded send WQE. ``raddr``/``rkey`` are set for RDMA and atomics, ``swap_add`` and
    ``compare`` for atomics; ``inline`` holds inline data (then ``sges`` is empty).

    A class of fixed fields, not a NamedTuple: one is made for every WR posted and again for
    every WQE fetched, and the compiled build makes a native class in ~60 ns where a NamedTuple
    takes ~300-450 (docs/performance.md, "Records built per message"). Equal when every field
    is (the round trip the tests check)."""

    __slots__ = _SEND_WQE_FIELDS

    def __init__(self, opcode: WqeOpcode, wqe_index: int, qpn: int, fm_ce_se: int = FmCeSe.NONE, imm: int = 0,
                 raddr: int | None = None, rkey: int | None = None, swap_add: int | None = None,
                 compare: int | None = None, sges: tuple[SgeLike, ...] = (), inline: bytes | None = None,
                 opmod: int = 0, bind: MwBindSeg | None = None, av: AddressVector | None = None) -> None:  # fmt: skip
        """``fm_ce_se``: FmCeSe bits as a plain int (tested once per WQE); ``imm``: immediate
        data, or the rkey to invalidate; ``sges``: a verbs SGE as posted, or a decoded Sge; ``av``:
        a UD QP's WQEs have one, others none."""
        self.opcode = opcode
        self.wqe_index = wqe_index
        self.qpn = qpn
        self.fm_ce_se = fm_ce_se
        self.imm = imm
        self.raddr = raddr
        self.rkey = rkey
        self.swap_add = swap_add
        self.compare = compare
        self.sges = sges
        self.inline = inline
        self.opmod = opmod
        self.bind = bind
        self.av = av

    def fields(self) -> tuple[object, ...]:
        """Every field, in the constructor's order."""
        return (self.opcode, self.wqe_index, self.qpn, self.fm_ce_se, self.imm, self.raddr, self.rkey, self.swap_add,
                self.compare, self.sges, self.inline, self.opmod, self.bind, self.av)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SendWqe) and self.fields() == other.fields()

    def __repr__(self) -> str:
        return "SendWqe(" + ", ".join(f"{name}={value!r}" for name, value in zip(_SEND_WQE_FIELDS, self.fields())) + ")"


_CTRL: Final = struct.Struct(">IIBHBI")  # opmod|idx|opcode, qpn|ds, signature, stream id, fm_ce_se, imm
_RADDR: Final = struct.Struct(">QII")
_ATOMIC: Final = struct.Struct(">QQ")
_DATA: Final = struct.Struct(">IIQ")
# Byte offsets of the fields above, for writers that store a WQE word by word in place (a GPU
# kernel, pyroce.gpu.helpers) rather than through this module's encoder: the control segment's
# be32 words (``opmod_idx_opcode``, ``qpn_ds``, signature/stream id/``fm_ce_se``, ``imm``), the WQE
# index (bits 23:8 of the first word) and ``ds`` (the low 6 bits of the second) inside them,
# the remote address segment's and a data segment's fields.
CTRL_OPMOD_IDX_OPCODE_AT, CTRL_QPN_DS_AT, CTRL_FM_CE_SE_WORD_AT, CTRL_IMM_AT = 0, 4, 8, 12
CTRL_INDEX_AT: Final = 1  # bytes 1-2: the WQE index
CTRL_OPCODE_AT: Final = 3  # the byte of the opcode
CTRL_DS_AT: Final = 7  # the byte whose low 6 bits are ds
RADDR_ADDR_AT, RADDR_RKEY_AT = 0, 8
DATA_BYTE_COUNT_AT, DATA_LKEY_AT, DATA_ADDR_AT = 0, 4, 8
_INLINE_HDR: Final = struct.Struct(">I")
_BIND: Final = struct.Struct(">QQII")
BIND_SEGS: Final = -(-_BIND.size // SEG)
_AV: Final = struct.Struct(">II I BBH 4x 6x BB I 16s")  # qkey, reserved, dqp_dct, stat_rate_sl, fl_mlid, rlid, ..., rgid
AV_SEGS: Final = _AV.size // SEG
# The one-call WQEs (``encode_send_wqe_into``) from the segments' own layouts, each in one basic
# block: control and data (32 bytes), control, remote address and data (48)
_CTRL_DATA: Final = struct.Struct(f"{_CTRL.format}{_DATA.format[1:]}32x")
_CTRL_RADDR_DATA: Final = struct.Struct(f"{_CTRL.format}{_RADDR.format[1:]}{_DATA.format[1:]}16x")
EXTENDED_AV: Final = 0x80000000  # MLX5_EXTENDED_UD_AV: in dqp_dct
AV_GRH: Final = 1 << 30  # in grh_gid_fl: the AV carries a GRH (always, on RoCE)

RADDR_OPCODES: Final = {WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_IMM, WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CS,
              WqeOpcode.ATOMIC_FA}  # fmt: skip
_HAS_ATOMIC: Final = {WqeOpcode.ATOMIC_CS, WqeOpcode.ATOMIC_FA}
_WQE_OPCODES: Final = {int(opcode): opcode for opcode in WqeOpcode}  # a dict lookup, not an enum call per WQE
MAX_DS: Final = 0x3F  # the ds field is 6 bits
_MAX_WQE_BYTES: Final = -(-MAX_DS * SEG // WQEBB) * WQEBB  # the largest WQE a control segment can count
_WORDS: Final = tuple(struct.Struct(f">{2 * ds}Q") for ds in range(MAX_DS + 1))  # a WQE's segments as u64 words
_LOW32: Final = 0xFFFFFFFF
_BIND_MW: Final = WqeOpcode.BIND_MW


def inline_room(fixed_segs: int, ds: int) -> int:
    """The inline bytes a WQE of ``ds`` segments holds after its ``fixed_segs`` (control, then
    address or datagram segments), its basic blocks filled: the ``max_inline_data`` a QP
    reports, as mlx5's ``calc_sq_size`` reports it. Programs read it back to choose inline
    sends (UCX's UD sends its 65-byte connection request inline on mlx5, whose UD QP asked
    for 64 reports 124), and inline data is copied at post, where a buffer is read when the
    NIC gets to it."""
    return -(-ds * SEG // WQEBB) * WQEBB - fixed_segs * SEG - _INLINE_HDR.size


def encode_send_wqe(wqe: SendWqe) -> bytearray:
    """The segments of ``wqe``, padded to whole basic blocks (``len // WQEBB`` of them: what
    the WQE takes in the ring). A fresh buffer, handed over as it is (no copy into ``bytes``)."""
    buf = bytearray(_MAX_WQE_BYTES)
    return buf[: encode_send_wqe_into(buf, 0, wqe, _MAX_WQE_BYTES) * WQEBB]


def encode_send_wqe_into(buf: bytearray | memoryview, at: int, wqe: SendWqe, room: int) -> int:
    """Write ``wqe`` at byte ``at`` of ``buf`` (a ring, or ``encode_send_wqe``'s buffer) through
    its last basic block, the bytes after its segments zero, if it fits in ``room`` bytes;
    returns the basic blocks it took, or 0 (nothing written) if it does not fit. Each field is
    packed at its C width, so a value too wide for its field raises ``struct.error``. A WQE of
    one data segment and no other but a remote address (a SEND, WRITE or READ of one buffer:
    most that are posted) is one ``struct`` call (~2 000 instructions compiled, against ~7 000
    segment by segment into a buffer of its own, then copied)."""
    sges, av, inline = wqe.sges, wqe.av, wqe.inline
    ds = 1
    if av is not None:
        ds += AV_SEGS
    if wqe.raddr is not None:
        ds += 1
    if wqe.swap_add is not None:
        ds += 1
    if wqe.bind is not None:
        ds += BIND_SEGS
    ds += len(sges) if inline is None else -(-(_INLINE_HDR.size + len(inline)) // SEG)
    if ds > MAX_DS:
        raise WqeError(f"WQE of {ds} segments exceeds the {MAX_DS} a control segment can count")
    wqebbs = -(-ds * SEG // WQEBB)
    if wqebbs * WQEBB > room:
        return 0
    ctrl = (wqe.opmod << 24) | ((wqe.wqe_index & 0xFFFF) << 8) | wqe.opcode
    if len(sges) == 1 and av is None and wqe.swap_add is None and wqe.bind is None and inline is None:
        sge = sges[0]
        if wqe.raddr is None:
            _CTRL_DATA.pack_into(buf, at, ctrl, (wqe.qpn << 8) | ds, 0, 0, wqe.fm_ce_se, wqe.imm, sge.length, sge.lkey,
                                 sge.addr)  # fmt: skip
        else:
            _CTRL_RADDR_DATA.pack_into(buf, at, ctrl, (wqe.qpn << 8) | ds, 0, 0, wqe.fm_ce_se, wqe.imm, wqe.raddr,
                                       wqe.rkey or 0, 0, sge.length, sge.lkey, sge.addr)  # fmt: skip
        return wqebbs
    buf[at : at + wqebbs * WQEBB] = bytes(wqebbs * WQEBB)
    _CTRL.pack_into(buf, at, ctrl, (wqe.qpn << 8) | ds, 0, 0, wqe.fm_ce_se, wqe.imm)
    offset = at + SEG
    if av is not None:
        _AV.pack_into(buf, offset, av.qkey, 0, EXTENDED_AV | av.dqpn, (av.sl & 7) << 1, 0, av.sport, av.tclass,
                      av.hop_limit, AV_GRH | (av.sgid_index & 0xFF) << 20 | (av.flow_label & 0xFFFFF), av.rgid)  # fmt: skip
        offset += AV_SEGS * SEG
    if wqe.raddr is not None:
        _RADDR.pack_into(buf, offset, wqe.raddr, wqe.rkey or 0, 0)
        offset += SEG
    if wqe.swap_add is not None:
        _ATOMIC.pack_into(buf, offset, wqe.swap_add, wqe.compare or 0)
        offset += SEG
    if wqe.bind is not None:
        _BIND.pack_into(buf, offset, *wqe.bind)
        offset += BIND_SEGS * SEG
    if inline is not None:
        _INLINE_HDR.pack_into(buf, offset, len(inline) | INLINE_FLAG)
        buf[offset + 4 : offset + 4 + len(inline)] = inline
    else:
        for sge in sges:
            _DATA.pack_into(buf, offset, sge.length, sge.lkey, sge.addr)
            offset += SEG
    return wqebbs


def decode_send_wqe(data: bytes | bytearray | memoryview, datagram: bool = False) -> SendWqe:
    """Decode the send WQE at the start of ``data``; ``datagram``: it is a UD QP's, with a
    datagram segment after the control segment. ``WqeError`` as ``decode_send_wqe_at``."""
    if len(data) < SEG:
        raise WqeError("WQE shorter than a control segment")
    return decode_send_wqe_at(data, 0, data[CTRL_DS_AT] & MAX_DS, datagram)


def decode_send_wqe_at(data: bytes | bytearray | memoryview, at: int, ds: int, datagram: bool) -> SendWqe:
    """Decode the send WQE of ``ds`` segments at byte ``at`` of ``data`` (a ring, where the WQE
    does not wrap, or a private copy of one that does), ``ds`` as the caller read it once.

    Every field is read once: one ``struct`` call copies the WQE's segments out as big-endian
    64-bit words (the private copy the rule above asks for), and the fields come from those
    words, never from ``data`` again; only inline data and a datagram segment's GID are sliced
    from ``data`` after, within lengths the words fixed. Raises ``WqeError`` for an unknown
    opcode, a ``ds`` of 0 or past ``data``, fewer segments than the opcode needs, or an inline
    length that overruns the WQE."""
    if len(data) - at < SEG:
        raise WqeError("WQE shorter than a control segment")
    opcode_byte: int = data[at + CTRL_OPCODE_AT]
    opcode = _WQE_OPCODES.get(opcode_byte)
    if opcode is None:
        raise WqeError(f"unknown WQE opcode 0x{opcode_byte:02x}")
    size = ds * SEG
    if ds < 1 or at + size > len(data):
        raise WqeError(f"ds {ds} does not fit the {len(data) - at}-byte WQE")
    words = _WORDS[ds].unpack_from(data, at)
    ctrl: int = words[0]
    end = 2 * ds  # words
    word = 2  # the next segment's first word
    av = None
    if datagram:
        if word + 2 * AV_SEGS > end:
            raise WqeError("UD WQE has no datagram segment")
        dqp_dct: int = words[word + 1]
        traffic: int = words[word + 3]
        grh_gid_fl = traffic & _LOW32
        gid_at = at + word * 8 + 32
        av = AddressVector(words[word] >> 32, (dqp_dct >> 32) & 0xFFFFFF, bytes(data[gid_at : gid_at + 16]),
                           grh_gid_fl >> 20 & 0xFF, grh_gid_fl & 0xFFFFF, (traffic >> 40) & 0xFF,
                           (traffic >> 32) & 0xFF, (dqp_dct >> 25) & 7, dqp_dct & 0xFFFF)  # fmt: skip
        word += 2 * AV_SEGS
    raddr = rkey = swap_add = compare = None
    if opcode in RADDR_OPCODES:
        if word + 2 > end:
            raise WqeError(f"{opcode.name} WQE has no remote address segment")
        raddr = words[word]
        rkey_word: int = words[word + 1]  # typed: compiled, shifted as a machine int
        rkey = rkey_word >> 32
        word += 2
    if opcode in _HAS_ATOMIC:
        if word + 2 > end:
            raise WqeError(f"{opcode.name} WQE has no atomic segment")
        swap_add, compare = words[word], words[word + 1]
        word += 2
    bind = None
    if opcode is _BIND_MW:
        if word + 2 * BIND_SEGS > end:
            raise WqeError("BIND_MW WQE has no bind segment")
        keys: int = words[word + 2]
        bind = MwBindSeg(words[word], words[word + 1], keys >> 32, keys & _LOW32)
        word += 2 * BIND_SEGS
    sges: list[Sge] = []
    inline = None
    head_word: int = words[word] if word < end else 0  # typed, as ``rkey_word``
    head = head_word >> 32
    if head & INLINE_FLAG:
        length = head & ~INLINE_FLAG
        offset = word * 8 + 4
        if offset + length > size:
            raise WqeError(f"inline length {length} overruns the {size}-byte WQE")
        inline = bytes(data[at + offset : at + offset + length])
    else:
        while word < end:
            data_seg: int = words[word]
            sges.append(Sge(words[word + 1], data_seg >> 32, data_seg & _LOW32))
            word += 2
    word1: int = words[1]
    return SendWqe(opcode, (ctrl >> 40) & 0xFFFF, (ctrl >> 8) & 0xFFFFFF, (word1 >> 32) & 0xFF, word1 & _LOW32, raddr,
                   rkey, swap_add, compare, tuple(sges), inline, ctrl >> 56, bind, av)  # fmt: skip


def write_recv_wqe(buf: bytearray | memoryview, offset: int, sges: Sequence[SgeLike], stride: int) -> None:
    """A receive WQE of ``stride`` bytes into ``buf`` at ``offset`` (a ring's slot, in place):
    the data segments, then a terminator if room is left (``sges``: the verbs' own SGEs as
    posted, or ``Sge``s). What follows the terminator is left as it was: a reader stops there."""
    if len(sges) * SEG > stride:
        raise WqeError(f"{len(sges)} scatter entries do not fit a {stride}-byte receive WQE")
    for sge in sges:
        _DATA.pack_into(buf, offset, sge.length, sge.lkey, sge.addr)
        offset += SEG
    if len(sges) * SEG < stride:
        _DATA.pack_into(buf, offset, 0, MLX5_INVALID_LKEY, 0)


def decode_recv_wqe(data: bytes | bytearray | memoryview, at: int = 0, stride: int = 0) -> tuple[Sge, ...]:
    """The scatter list of the receive WQE of ``stride`` bytes at byte ``at`` of ``data`` (0: to
    the end): in a ring, in place, as each data segment is read once (the rule above); a copy
    of the WQE's bytes cost ~1 300 instructions compiled."""
    sges = []
    length: int  # typed: compiled, the terminator test is on machine ints
    lkey: int
    addr: int
    for offset in range(at, (at + stride if stride else len(data)) - SEG + 1, SEG):
        length, lkey, addr = _DATA.unpack_from(data, offset)
        if lkey == MLX5_INVALID_LKEY:
            break
        sges.append(Sge(addr, length, lkey))
    return tuple(sges)
