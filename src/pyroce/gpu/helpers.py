"""RDMaxcel-shaped helpers (monarch's ``rdmaxcel.h``: ``send_wqe``, ``recv_wqe``, ``db_ring``,
``cqe_poll``) as plain functions on arrays of be32 words, written once: host Python calls them on
numpy arrays, and ``pyroce.gpu.kernels.device_helpers()`` compiles this very source with
``numba.cuda.jit(device=True)`` for kernels (the globals rebound there: ``fence`` becomes
``cuda.threadfence_system``, each helper its compiled self).

Every array is ``uint32``: a ring, a doorbell record or a CQE is stored and loaded one aligned
4-byte word at a time, so the NIC never sees half a word (docs/architecture.md, "Direct verbs").
The layouts are ``nic.wqe``'s and ``nic.cqe``'s (their offsets, divided by 4: no second codec);
what the helpers write is checked against ``nic.wqe.encode_send_wqe`` in the tests.

The ordering contract (one publisher per QP): ``send_wqe`` writes the WQE's body, then the
control segment's words but its first, a fence, then the first word (which holds the WQE index:
until it is written the NIC takes the WQE as torn, not work); ``db_ring`` fences, then stores the
doorbell record. ``cqe_poll`` loads the CQE's last word (``op_own`` with ``wqe_counter``) first,
fences, and only then the body, as libmlx5 does.
"""

from __future__ import annotations

import sys
from typing import Any

from pyroce.nic.cqe import (
    CQE_BYTE_CNT_AT,
    CQE_OPCODE_QPN_AT,
    CQE_SIZE,
    CQE_SYNDROME_WORD_AT,
    CQE_TAIL_AT,
    CqeOpcode,
)
from pyroce.nic.rings import COUNTER_MASK, CQ_COUNTER_MASK, DoorbellRecord
from pyroce.nic.wqe import (
    CTRL_FM_CE_SE_WORD_AT,
    CTRL_IMM_AT,
    CTRL_OPMOD_IDX_OPCODE_AT,
    CTRL_QPN_DS_AT,
    DATA_ADDR_AT,
    DATA_BYTE_COUNT_AT,
    DATA_LKEY_AT,
    MLX5_INVALID_LKEY,
    RADDR_ADDR_AT,
    RADDR_OPCODES,
    RADDR_RKEY_AT,
    SEG,
    WQEBB,
    FmCeSe,
    WqeOpcode,
)

Words = Any  # a one-dimensional uint32 array: numpy's, or a CUDA (mapped) device array

# Plain ints (a kernel's constants), taken from the codecs
WORD = 4
RCV_DBR = DoorbellRecord.RECV // WORD  # mlx5's MLX5_RCV_DBR: the receive word of the record
SND_DBR = DoorbellRecord.SEND // WORD  # MLX5_SND_DBR
CQ_UPDATE = int(FmCeSe.CQ_UPDATE)  # fm_ce_se: a signaled WQE
SOLICITED = int(FmCeSe.SOLICITED)
RDMA_WRITE, RDMA_WRITE_IMM = int(WqeOpcode.RDMA_WRITE), int(WqeOpcode.RDMA_WRITE_IMM)
RDMA_READ = int(WqeOpcode.RDMA_READ)
SEND, SEND_IMM = int(WqeOpcode.SEND), int(WqeOpcode.SEND_IMM)
# The opcodes send_wqe writes (control, a remote address segment where RADDR_OPCODES says, one
# data segment), as a bit mask a kernel tests; and the mask of those that carry the address
_POSTED = 1 << RDMA_WRITE | 1 << RDMA_WRITE_IMM | 1 << RDMA_READ | 1 << SEND | 1 << SEND_IMM
_WITH_RADDR = sum(1 << int(opcode) for opcode in RADDR_OPCODES)
WQEBB_WORDS = WQEBB // WORD
SEG_WORDS = SEG // WORD
CQE_WORDS = CQE_SIZE // WORD
_INVALID = int(CqeOpcode.INVALID)
_REQ_ERR, _RESP_ERR = int(CqeOpcode.REQ_ERR), int(CqeOpcode.RESP_ERR)
# cqe_poll's results: rdmaxcel's cqe_poll_result_t
CQE_POLL_ERROR, CQE_POLL_FALSE, CQE_POLL_TRUE = -1, 0, 1
# what cqe_poll writes to its ``out`` array, by index
OUT_OPCODE, OUT_WQE_COUNTER, OUT_BYTE_CNT, OUT_SYNDROME, OUT_QPN, OUT_FIELDS = 0, 1, 2, 3, 4, 5
_LITTLE = sys.byteorder == "little"  # a be32 is stored byte-swapped (a GPU is little-endian too)


def fence() -> None:
    """The host's store fence: none is needed, as Python's stores are made in program order and
    the NIC's engine thread takes the GIL before it reads (x86's stores are not reordered
    either). A kernel's copy calls ``cuda.threadfence_system`` here instead."""


def be32(value: int) -> int:
    """The native word whose bytes are ``value`` (32 bits) big-endian: ``htonl``; its own inverse."""
    word = value & 0xFFFFFFFF  # a new name: a kernel's ``value`` may be a uint32, ``word`` an int64
    if _LITTLE:
        return (word & 0xFF) << 24 | (word & 0xFF00) << 8 | (word >> 8) & 0xFF00 | word >> 24
    return word


def send_wqe(sq: Words, wqe_cnt: int, idx: int, qpn: int, opcode: int, fm_ce_se: int, laddr: int, lkey: int,
             length: int, raddr: int, rkey: int, imm: int) -> int:  # fmt: skip
    """Write WQE ``idx`` (one basic block: control, a remote address segment for RDMA, one data
    segment of ``length`` bytes at ``laddr``/``lkey``) in basic block ``idx % wqe_cnt`` of the
    send ring ``sq``; ``fm_ce_se``: ``CQ_UPDATE`` for a CQE, ``SOLICITED``; ``imm``: the
    immediate of RDMA_WRITE_IMM and SEND_IMM. Returns the next WQE index, or -1 (nothing
    written) for an opcode it does not write. The ring is published by ``db_ring``."""
    if opcode < 0 or opcode > 63 or (_POSTED >> opcode) & 1 == 0:
        return -1
    base = (idx & (wqe_cnt - 1)) * WQEBB_WORDS
    seg = base + SEG_WORDS
    if (_WITH_RADDR >> opcode) & 1:
        sq[seg + RADDR_ADDR_AT // WORD] = be32(raddr >> 32)
        sq[seg + RADDR_ADDR_AT // WORD + 1] = be32(raddr)
        sq[seg + RADDR_RKEY_AT // WORD] = be32(rkey)
        sq[seg + RADDR_RKEY_AT // WORD + 1] = 0
        seg += SEG_WORDS
    sq[seg + DATA_BYTE_COUNT_AT // WORD] = be32(length)
    sq[seg + DATA_LKEY_AT // WORD] = be32(lkey)
    sq[seg + DATA_ADDR_AT // WORD] = be32(laddr >> 32)
    sq[seg + DATA_ADDR_AT // WORD + 1] = be32(laddr)
    ds = (seg + SEG_WORDS - base) // SEG_WORDS
    sq[base + CTRL_QPN_DS_AT // WORD] = be32(qpn << 8 | ds)
    sq[base + CTRL_FM_CE_SE_WORD_AT // WORD] = be32(fm_ce_se & 0xFF)  # signature 0, stream id 0, fm_ce_se
    sq[base + CTRL_IMM_AT // WORD] = be32(imm)
    fence()  # the whole WQE before the word that makes it one
    sq[base + CTRL_OPMOD_IDX_OPCODE_AT // WORD] = be32((idx & COUNTER_MASK) << 8 | opcode)
    return idx + 1


def recv_wqe(rq: Words, wqe_cnt: int, stride_words: int, idx: int, laddr: int, lkey: int, length: int) -> int:
    """Write receive WQE ``idx`` (one data segment, then the ``MLX5_INVALID_LKEY`` terminator if
    the stride has room) in slot ``idx % wqe_cnt`` of ``rq``; returns the next index. The ring
    is published by ``db_ring(dbrec, RCV_DBR, ...)``."""
    base = (idx & (wqe_cnt - 1)) * stride_words
    rq[base + DATA_BYTE_COUNT_AT // WORD] = be32(length)
    rq[base + DATA_LKEY_AT // WORD] = be32(lkey)
    rq[base + DATA_ADDR_AT // WORD] = be32(laddr >> 32)
    rq[base + DATA_ADDR_AT // WORD + 1] = be32(laddr)
    if stride_words > SEG_WORDS:
        end = base + SEG_WORDS
        rq[end + DATA_BYTE_COUNT_AT // WORD] = 0
        rq[end + DATA_LKEY_AT // WORD] = be32(MLX5_INVALID_LKEY)
        rq[end + DATA_ADDR_AT // WORD] = 0
        rq[end + DATA_ADDR_AT // WORD + 1] = 0
    return idx + 1


def db_ring(dbrec: Words, which: int, producer: int) -> None:
    """Publish ``producer`` in the doorbell record's word ``which`` (``SND_DBR``: basic blocks
    posted; ``RCV_DBR``: receive WQEs posted), after a fence: the NIC reads the record, then
    only the WQEs below it. (rdmaxcel's ``db_ring`` copies a WQE to the BlueFlame register; pyroce's
    NIC reads the record alone, so that store is this one.)"""
    fence()
    dbrec[which] = be32(producer & COUNTER_MASK)


def cqe_poll(cqes: Words, cqe_cnt: int, consumer: int, cq_dbrec: Words, out: Any) -> int:
    """Poll CQE ``consumer`` of the ring ``cqes`` (``cqe_cnt`` 64-byte CQEs): ``CQE_POLL_FALSE``
    if the NIC has not written it on this lap of the ring; else its fields in ``out`` (``OUT_*``:
    opcode, ``wqe_counter``, ``byte_cnt``, syndrome, QPN), the consumer record ``cq_dbrec[0]``
    moved past it, and ``CQE_POLL_TRUE``, or ``CQE_POLL_ERROR`` for an error CQE (its syndrome
    in ``out``)."""
    fence()  # a load of this call is never one of an earlier call's (a kernel's spin loop)
    base = (consumer & (cqe_cnt - 1)) * CQE_WORDS
    tail = be32(cqes[base + CQE_TAIL_AT // WORD])  # wqe_counter, signature, op_own: one load
    op_own = tail & 0xFF
    opcode = op_own >> 4
    if opcode == _INVALID or (op_own & 1) != (consumer // cqe_cnt) & 1:
        return CQE_POLL_FALSE
    fence()  # acquire: the body after op_own
    error = opcode == _REQ_ERR or opcode == _RESP_ERR
    out[OUT_OPCODE] = opcode
    out[OUT_WQE_COUNTER] = tail >> 16
    out[OUT_BYTE_CNT] = be32(cqes[base + CQE_BYTE_CNT_AT // WORD])
    out[OUT_SYNDROME] = be32(cqes[base + CQE_SYNDROME_WORD_AT // WORD]) & 0xFF if error else 0
    out[OUT_QPN] = be32(cqes[base + CQE_OPCODE_QPN_AT // WORD]) & 0xFFFFFF
    cq_dbrec[0] = be32((consumer + 1) & CQ_COUNTER_MASK)
    return CQE_POLL_ERROR if error else CQE_POLL_TRUE
