"""Rings and doorbell records shared by the verbs layer (producer of WQEs, consumer of CQEs)
and the engine (the other way round), as device-model.md lays them out.

Counters run free and are reduced modulo the ring size only to find a slot, so "full" and
"empty" are told apart without a spare slot (mlx5's convention). Only single-writer stores:
each counter and each slot has one writer, so the same code works when the rings live in
shared memory for a NIC process or in pinned memory written by a GPU.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from typing import Final

from pyroce.nic.cqe import (
    CQE_BODY,
    CQE_ERROR,
    CQE_ERROR_AT,
    CQE_OP_OWN_AT,
    CQE_OPCODES,
    CQE_SIZE,
    ERROR_OPCODES,
    Cqe,
    CqeOpcode,
)
from pyroce.nic.wqe import (
    CTRL_DS_AT,
    CTRL_INDEX_AT,
    SEG,
    WQEBB,
    SendWqe,
    Sge,
    SgeLike,
    WqeError,
    decode_recv_wqe,
    decode_send_wqe_at,
    encode_send_wqe,
    encode_send_wqe_into,
    write_recv_wqe,
)

COUNTER_MASK: Final = 0xFFFF  # doorbell record counters are 16 bits wide
CQ_COUNTER_MASK: Final = 0xFFFFFF  # a CQ's consumer record: 24 bits (mlx5's ``cons_index & 0xffffff``)
# A direct QP's register page (mlx5's UAR, in the connection's shared memory): where a program's
# 64-bit doorbell and BlueFlame stores go. The NIC reads the doorbell record, not these stores.
UAR_SIZE: Final = 4096
BF_OFFSET: Final = 0x800  # mlx5's MLX5_BF_OFFSET: the page's BlueFlame register
BF_SIZE: Final = 256  # each of the register's two halves, which a program's BlueFlame stores alternate

_INVALID_CQE: Final = int(CqeOpcode.INVALID)  # an int: compiled, compared as a machine int per poll
BIG_ENDIAN_HOST: Final = sys.byteorder == "big"  # a big-endian host stores a be32 word as it is


def _check_ring(buf: memoryview, count: int, entry_size: int, what: str) -> None:
    if count < 1 or count & (count - 1):
        raise ValueError(f"{what} size must be a power of two, not {count}")
    if len(buf) < count * entry_size:
        raise ValueError(f"{what} buffer of {len(buf)} bytes is smaller than {count} entries of {entry_size}")


def aligned_words(buf: memoryview) -> memoryview:
    """``buf`` (writable, 4-byte aligned) as native u32s: an item is one aligned 4-byte load or
    store, so a word another thread stores at once is never read half old, half new."""
    holder = ctypes.c_char.from_buffer(buf)
    try:
        if ctypes.addressof(holder) % 4:
            raise ValueError("a record of be32 words must be 4-byte aligned")
    finally:
        del holder
    return buf.cast("B").cast("I")


class DoorbellRecord:
    """Two be32 words: [0] receive producer counter, [1] send producer counter.

    Each is read with one aligned 4-byte load (``words``), as C stores it: ``struct`` reads a
    big-endian word a byte at a time, and a store between two of its loads made a value never
    written (e.g. 0x00ff -> 0x0100 read as 0x0000), after which the engine fetched ~65000 stale
    WQEs."""

    SIZE: Final = 8
    RECV: Final = 0
    SEND: Final = 4

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.words = aligned_words(buf[: self.SIZE])

    def publish(self, which: int, counter: int) -> None:
        """Store ``counter`` (16 bits) as a be32: ``htonl(counter)``, as one native u32."""
        counter &= COUNTER_MASK
        self.words[which >> 2] = counter if BIG_ENDIAN_HOST else (counter & 0xFF) << 24 | (counter & 0xFF00) << 8

    def read(self, which: int) -> int:
        """The low 16 bits of the be32 counter: ``ntohl(word) & 0xFFFF``, from one native u32 load."""
        word = self.words[which >> 2]
        return word & COUNTER_MASK if BIG_ENDIAN_HOST else word >> 24 | (word >> 8) & 0xFF00

    def producers(self) -> tuple[int, int]:
        """Both counters, receive and send, each from one load as ``read`` takes it: one call
        where a fetch looks at both."""
        words = self.words
        recv, send = words[0], words[1]
        if BIG_ENDIAN_HOST:
            return recv & COUNTER_MASK, send & COUNTER_MASK
        return recv >> 24 | (recv >> 8) & 0xFF00, send >> 24 | (send >> 8) & 0xFF00


class SendRing:
    """A send queue of ``wqebb_count`` 64-byte basic blocks in ``buf``; ``datagram``: a UD
    QP's, whose WQEs carry a datagram segment."""

    def __init__(self, buf: memoryview, wqebb_count: int, datagram: bool = False) -> None:
        _check_ring(buf, wqebb_count, WQEBB, "send queue")
        self.datagram = datagram
        self.buf = buf
        self.wqebb_count = wqebb_count
        self.size = wqebb_count * WQEBB

    def post(self, producer: int, wqe: SendWqe, free: int) -> int:
        """Write ``wqe`` in whole basic blocks at basic-block counter ``producer``, if it fits
        the ``free`` blocks the NIC has consumed: in place, or through a copy in two parts if it
        runs past the ring's end; returns the next counter, or -1 (nothing written) if the
        ring is too full for it."""
        start = (producer % self.wqebb_count) * WQEBB
        wqebbs = encode_send_wqe_into(self.buf, start, wqe, min(free * WQEBB, self.size - start))
        if not wqebbs:
            data = encode_send_wqe(wqe)
            wqebbs = len(data) // WQEBB
            if wqebbs > free:
                return -1
            first = self.size - start
            self.buf[start:] = data[:first]
            self.buf[: len(data) - first] = data[first:]
        return producer + wqebbs

    def wqe_index(self, consumer: int) -> int:
        """The WQE index the control segment at basic-block counter ``consumer`` holds: a
        self-posting driver's WQE is written once it equals the counter's low 16 bits."""
        start = (consumer % self.wqebb_count) * WQEBB + CTRL_INDEX_AT
        return self.buf[start] << 8 | self.buf[start + 1]

    def fetch(self, consumer: int) -> tuple[SendWqe, int]:
        """Decode the WQE at basic-block counter ``consumer``, each of its fields read from the
        ring once (``ds`` here, the rest by the decoder: nic.wqe's rule); returns it and the next
        counter. Raises ``WqeError`` for a WQE that cannot run."""
        start = (consumer % self.wqebb_count) * WQEBB
        ds = self.buf[start + CTRL_DS_AT] & 0x3F
        if ds * SEG > self.size:
            raise WqeError(f"ds {ds} is larger than the send ring")
        end = start + ds * SEG
        if end <= self.size:  # read in place, each field once (nic.wqe's rule)
            wqe = decode_send_wqe_at(self.buf, start, ds, self.datagram)
        else:  # a private copy of the WQE's bytes, wrapping at the ring's end
            wqe = decode_send_wqe_at(bytes(self.buf[start:]) + bytes(self.buf[: end - self.size]), 0, ds, self.datagram)
        return wqe, consumer + -(-ds * SEG // WQEBB)


class RecvRing:
    """A receive queue of ``count`` WQEs of ``stride`` bytes in ``buf``: a QP's or a shared
    receive queue's, which have the same layout (mlx5's data segments, nic.wqe)."""

    def __init__(self, buf: memoryview, count: int, stride: int) -> None:
        _check_ring(buf, count, stride, "receive queue")
        self.buf = buf
        self.count = count
        self.stride = stride

    def slot(self, counter: int) -> memoryview:
        """The bytes of the WQE at ``counter``."""
        start = (counter % self.count) * self.stride
        return self.buf[start : start + self.stride]

    def post(self, producer: int, sges: Sequence[SgeLike]) -> None:
        """Write a WQE scattering to ``sges`` at counter ``producer``, in place (the NIC reads
        it once the doorbell record is past it)."""
        write_recv_wqe(self.buf, (producer % self.count) * self.stride, sges, self.stride)

    def fetch(self, consumer: int) -> tuple[Sge, ...]:
        """The scatter list of the WQE at ``consumer``, decoded in place."""
        return decode_recv_wqe(self.buf, (consumer % self.count) * self.stride, self.stride)


class CqRing:
    """A completion queue of ``cqe_count`` 64-byte CQEs in ``buf``.

    The engine writes with ``produce``; the verbs layer reads with ``poll``. A CQE is valid
    when its opcode is not INVALID and its owner bit equals the wrap parity of the index."""

    def __init__(self, buf: memoryview, cqe_count: int) -> None:
        _check_ring(buf, cqe_count, CQE_SIZE, "CQ")
        self.buf = buf
        self.cqe_count = cqe_count
        self._shift = cqe_count.bit_length() - 1
        self.buf[CQE_SIZE - 1 : cqe_count * CQE_SIZE : CQE_SIZE] = bytes([CqeOpcode.INVALID << 4]) * cqe_count

    def produce(self, producer: int, cqe: Cqe) -> int:
        """Write ``cqe`` at counter ``producer``; returns the next counter (``write``)."""
        return self.write(producer, cqe.opcode, cqe.qpn, cqe.wqe_counter, cqe.byte_cnt, cqe.imm_inval, cqe.srqn,
                          cqe.flags_rqpn, cqe.s_wqe_opcode, cqe.syndrome, cqe.vendor_err, cqe.solicited, cqe.timestamp)  # fmt: skip

    def write(self, producer: int, opcode: int, qpn: int, wqe_counter: int, byte_cnt: int, imm_inval: int, srqn: int,
              flags_rqpn: int, s_wqe_opcode: int, syndrome: int, vendor_err: int, solicited: bool,
              timestamp: int = 0) -> int:  # fmt: skip
        """Write a CQE of these fields (``Cqe``'s) at counter ``producer``; returns the next
        counter. The caller checks first that the consumer has room (``producer - consumer <
        cqe_count``). The engine writes its completions' fields straight here (``nic.convert``):
        no ``Cqe`` in between.

        The rest first (one pack), ``op_own`` last, as a store of its own: ``struct.pack_into``
        zeroes its bytes before it fills them, so packing ``op_own`` with other fields would
        show a reader without the GIL (the C driver) a zero ``op_own`` for a moment: REQ with
        owner 0, a valid-looking CQE on every even pass. (The codec lives here, one call per CQE.)"""
        buf, offset = self.buf, (producer % self.cqe_count) * CQE_SIZE
        error = opcode in ERROR_OPCODES
        CQE_BODY.pack_into(buf, offset, flags_rqpn, srqn, imm_inval, byte_cnt, 0 if error else timestamp,
                           (s_wqe_opcode << 24) | (qpn & 0xFFFFFF), wqe_counter & 0xFFFF)  # fmt: skip
        if error:
            CQE_ERROR.pack_into(buf, offset + CQE_ERROR_AT, vendor_err, syndrome)
        buf[offset + CQE_OP_OWN_AT] = (opcode << 4) | (solicited << 1) | ((producer >> self._shift) & 1)
        return producer + 1

    def poll(self, consumer: int) -> Cqe | None:
        """The CQE at counter ``consumer`` if the engine has written it on this pass. The owner
        byte is looked at first, so an empty poll decodes nothing.

        ``op_own`` is read first, then the rest: the mirror of ``produce``'s order, so an entry
        whose ``op_own`` is already valid has a whole CQE behind it (libmlx5 reads the owner
        bit, then a read barrier, then the CQE). Reading the body first tore CQEs when the
        engine thread wrote between the two reads."""
        buf, offset = self.buf, (consumer % self.cqe_count) * CQE_SIZE
        op_own = buf[offset + CQE_OP_OWN_AT]
        if op_own >> 4 == _INVALID_CQE or op_own & 1 != (consumer >> self._shift) & 1:
            return None
        wqe_counter: int  # the CQE's fields typed: compiled, machine ints from here on
        opcode_qpn: int
        flags_rqpn, srqn, imm, byte_cnt, timestamp, opcode_qpn, wqe_counter = CQE_BODY.unpack_from(buf, offset)
        opcode = CQE_OPCODES.get(op_own >> 4, CqeOpcode.INVALID)
        syndrome = vendor_err = 0
        if opcode in ERROR_OPCODES:
            vendor_err, syndrome = CQE_ERROR.unpack_from(buf, offset + CQE_ERROR_AT)
            timestamp = 0
        return Cqe(opcode, opcode_qpn & 0xFFFFFF, wqe_counter, byte_cnt, imm, srqn, flags_rqpn, timestamp, opcode_qpn >> 24,
                   syndrome, vendor_err, bool(op_own & 2))  # fmt: skip
