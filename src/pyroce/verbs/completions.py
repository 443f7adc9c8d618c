"""The driver's side of a CQ's ring, what ``CQ.poll`` reads through: each valid CQE turned into a
``WC`` (its ``wr_id`` from the QP's table, by the CQE's WQE counter), and the consumer index
published, as libmlx5 does.

Every polled completion passes here, so this module is compiled with the NIC's (mypyc), and the
``WC`` with it (a native class: the reader fills it with plain stores). The CQ, a pyverbs class
programs subclass, stays interpreted and hands its polls here.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Final, Protocol

from pyroce.ib.enums import WcFlag, WcOpcode, WcStatus
from pyroce.nic.convert import REQ_WQE_OPCODE
from pyroce.nic.cqe import ERROR_OPCODES, GRH_MASK, RECV_OPCODES, ROCE_PKT_SHIFT, STATUS_OF_SYNDROME, Cqe, CqeOpcode
from pyroce.nic.rings import CQ_COUNTER_MASK, CqRing
from pyroce.verbs.recv_queue import RecvQueue
from pyroce.verbs.send_queue import SendQueue

# A send CQE's WC opcode: the NIC's table (WC opcode -> the WQE opcode a CQE reports), turned round
WC_OPCODE_OF_WQE: Final = {int(wqe_opcode): int(wc_opcode) for wc_opcode, wqe_opcode in REQ_WQE_OPCODE.items()}
_WITH_IMM: Final = int(WcFlag.WITH_IMM)
_WITH_INV: Final = int(WcFlag.WITH_INV)
_GRH: Final = int(WcFlag.GRH)
RECV_WC: Final = {  # a receive CQE's WC opcode and flags: one lookup, no enum attribute read per completion
    int(CqeOpcode.RESP_SEND): (int(WcOpcode.RECV), 0),
    int(CqeOpcode.RESP_SEND_IMM): (int(WcOpcode.RECV), _WITH_IMM),
    int(CqeOpcode.RESP_SEND_INV): (int(WcOpcode.RECV), _WITH_INV),
    int(CqeOpcode.RESP_WR_IMM): (int(WcOpcode.RECV_RDMA_WITH_IMM), _WITH_IMM),
}
_SEND: Final = int(WcOpcode.SEND)
_RECV: Final = int(WcOpcode.RECV)
_GENERAL_ERR: Final = int(WcStatus.GENERAL_ERR)


def imm_from_wire(value: int) -> int:
    """``imm_data`` as C code sees the ``__be32`` field on this host (pyverbs' WC.imm_data)."""
    return int.from_bytes(value.to_bytes(4, "big"), sys.byteorder)


class WC:
    """A work completion, with ``ibv_wc``'s fields."""

    # Each field is zero until set, so a polled completion is made without ``__init__``
    # (``WC.__new__``: no call in Python, the defaults compiled) and stores only what its CQE reports
    wr_id: int = 0
    status: int = 0
    opcode: int = 0
    vendor_err: int = 0
    byte_len: int = 0
    qp_num: int = 0
    src_qp: int = 0
    imm_data: int = 0
    wc_flags: int = 0
    pkey_index: int = 0
    slid: int = 0
    sl: int = 0
    dlid_path_bits: int = 0
    reason: str = ""  # pyroce: one line on why a failed WR failed (the QP, its peer, the cause)

    def __init__(self, wr_id: int = 0, status: int = 0, opcode: int = 0, vendor_err: int = 0, byte_len: int = 0,
                 qp_num: int = 0, src_qp: int = 0, imm_data: int = 0, wc_flags: int = 0, pkey_index: int = 0,
                 slid: int = 0, sl: int = 0, dlid_path_bits: int = 0) -> None:  # fmt: skip
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits
        self.reason = ""

    def __repr__(self) -> str:
        status = WcStatus(self.status).name if self.status in WcStatus._value2member_map_ else self.status
        opcode = WcOpcode(self.opcode).name if self.opcode in WcOpcode._value2member_map_ else self.opcode
        return (f"WC(wr_id={self.wr_id}, status={status}, opcode={opcode}, byte_len={self.byte_len}, "
                f"qp_num=0x{self.qp_num:x}, imm_data=0x{self.imm_data:x}, wc_flags={self.wc_flags}, "
                f"vendor_err={self.vendor_err}{', reason=' + repr(self.reason) if self.reason else ''})")  # fmt: skip


class CompletingQp:
    """What a CQE asks of its QP: where its ``wr_id`` is kept, which of its CQEs a reset left
    behind, and why a failed WR failed. The verbs' QP (pyverbs' class, which programs subclass:
    interpreted) makes one and its CQs' readers hold it: compiled, they read it at fixed
    offsets, where each read of the QP was a lookup by name. ``explain`` is held weakly, so
    that the QP is not kept alive by its own CQs (it closes when its last reference goes)."""

    def __init__(self, rq: RecvQueue, send_queue: SendQueue, explain: Callable[[int], str]) -> None:
        self.reset_at: dict[int, int] = {}  # CQ number -> CQEs before this index belong to before a reset
        self.rq = rq
        self.send_queue = send_queue
        self._explain = weakref.WeakMethod(explain)  # type: ignore[arg-type]

    def explain(self, vendor_err: int) -> str:
        """One line on a failed completion (the QP's ``explain``; "" once the QP is gone)."""
        explain = self._explain()
        return explain(vendor_err) if explain is not None else ""


class Polled(Protocol):
    """The NIC's side of a poll: an empty ring lets its engine run, a full one says it found work."""

    def poll_empty(self) -> object: ...  # what they return is not looked at

    def poll_found(self) -> object: ...


# ``WC.__new__`` held: compiled, ``WC.__new__(WC)`` looks ``__new__`` up on the class per call
_new_wc: Final = WC.__new__


class CompletionReader:
    """A CQ's ring as its driver reads it, from ``consumer`` on."""

    def __init__(self, ring: CqRing, record: memoryview, cqn: int, qps: dict[int, CompletingQp], nic: Polled) -> None:
        """``record``: the consumer record the NIC reads; ``qps``: the CQ's, by number."""
        self.ring = ring
        self.record = record
        self.cqn = cqn
        self.qps = qps
        self.nic = nic
        self.consumer = 0

    def poll(self, num_entries: int) -> list[WC]:
        """Up to ``num_entries`` completions, oldest first; the consumer published if any. The
        ring is looked at even for none: an empty one lets the engine run (``poll_empty``), and
        is read again; a full one tells it that polling found work without it (``poll_found``)."""
        wcs: list[WC] = []
        ring = self.ring
        cqe = ring.poll(self.consumer)
        if cqe is None:
            self.nic.poll_empty()
            cqe = ring.poll(self.consumer)
        else:
            self.nic.poll_found()
        while cqe is not None and len(wcs) < num_entries:  # each CQE read once, into its WC
            wc = self.wc(cqe)  # None for a CQE of a QP reset since it was written: consumed, skipped
            self.consumer += 1
            if wc is not None:
                wcs.append(wc)
                if len(wcs) == num_entries:
                    break
            cqe = ring.poll(self.consumer)
        if wcs:
            self.publish()
        return wcs

    def next_wc(self) -> WC | None:
        """The next completion in the ring, consuming the CQEs of QPs reset since they were
        written on the way; None when the ring holds no more (the extended CQ's reader)."""
        while (cqe := self.ring.poll(self.consumer)) is not None:
            wc = self.wc(cqe)
            self.consumer += 1
            if wc is not None:
                return wc
        return None

    def publish(self) -> None:
        """Tell the NIC how far the ring was read (the consumer record, libmlx5's ``update_cons_index``)."""
        self.record[:] = (self.consumer & CQ_COUNTER_MASK).to_bytes(4, "big")

    def wc(self, cqe: Cqe) -> WC | None:
        """The WC of ``cqe``; None for a CQE of a QP reset since it was written (libmlx5 cleans
        those out of the CQ on reset, ``mlx5_cq_clean``)."""
        qp = self.qps.get(cqe.qpn)
        if qp is not None and self.consumer < qp.reset_at.get(self.cqn, 0):
            return None
        opcode: int = cqe.opcode  # a plain int, compiled without a call (int() of the enum is one)
        is_recv = opcode in RECV_OPCODES
        wc = _new_wc(WC)
        wc.qp_num = cqe.qpn
        if qp is not None:
            wc.wr_id = qp.rq.retire(cqe.wqe_counter) if is_recv else qp.send_queue.retire(cqe.wqe_counter)
        if opcode in ERROR_OPCODES:
            wc.status = STATUS_OF_SYNDROME.get(cqe.syndrome, _GENERAL_ERR)  # type: ignore[call-overload]
            wc.vendor_err = cqe.vendor_err
            wc.reason = qp.explain(cqe.vendor_err) if qp is not None else ""
            wc.opcode = _RECV if is_recv else WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, _SEND)
            return wc
        wc.byte_len = cqe.byte_cnt
        if is_recv:
            wc_opcode, flags = RECV_WC[opcode]
            wc.opcode = wc_opcode
            if flags & _WITH_IMM:
                wc.imm_data = imm_from_wire(cqe.imm_inval)
            elif flags & _WITH_INV:
                wc.imm_data = cqe.imm_inval
            wc.src_qp = cqe.flags_rqpn & 0xFFFFFF
            wc.sl = cqe.flags_rqpn >> ROCE_PKT_SHIFT & 0xF  # libmlx5's: on RoCE, the packet type
            if cqe.flags_rqpn & GRH_MASK:
                flags |= _GRH
            wc.wc_flags = flags
        else:
            wc.opcode = WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, _SEND)
        return wc
