"""Completion queues (pyverbs ``cq.pyx``): ``CompChannel(ctx)``, ``CQ(ctx, cqe, ...)`` and ``WC``.

The CQ's ring is memory the NIC writes in mlx5's CQE layout; ``poll`` reads CQEs from it (owner
bit valid), turns each into a ``WC`` and publishes the consumer index, as libmlx5 does. The
``wr_id`` of each completion comes from the QP's table, indexed by the CQE's ``wqe_counter``.

Completion events: ``cq.req_notify()`` arms the CQ in the NIC (a command); the NIC writes the
next CQE, disarms the CQ and puts its CQN on the channel, whose ``fd`` (an eventfd, readable
while events wait) works with select, poll, epoll and asyncio. ``channel.get_cq_event(cq)``
takes one event (waiting for it), ``cq.ack_events(n)`` acknowledges them (``cq.num_events``).
"""

from __future__ import annotations

import errno
import sys
import weakref
from typing import TYPE_CHECKING

from pyroce.host.notify import PollerWakeup
from pyroce.ib.enums import WcFlag, WcOpcode, WcStatus
from pyroce.nic.cqe import (
    CQE_SIZE,
    ERROR_OPCODES,
    GRH_MASK,
    RECV_OPCODES,
    ROCE_PKT_SHIFT,
    STATUS_OF_SYNDROME,
    Cqe,
    CqeOpcode,
)
from pyroce.nic.events import EventQueue
from pyroce.nic.rings import CQ_COUNTER_MASK, CqRing
from pyroce.nic.wqe import WqeOpcode
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.device import Context
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

if TYPE_CHECKING:
    from pyroce.verbs.qp import QP

WC_OPCODE_OF_WQE = {
    WqeOpcode.SEND: WcOpcode.SEND,
    WqeOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WqeOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    WqeOpcode.ATOMIC_CS: WcOpcode.COMP_SWAP,
    WqeOpcode.ATOMIC_FA: WcOpcode.FETCH_ADD,
    WqeOpcode.BIND_MW: WcOpcode.BIND_MW,
    WqeOpcode.LOCAL_INVAL: WcOpcode.LOCAL_INV,
}
_WITH_IMM, _WITH_INV, _GRH = int(WcFlag.WITH_IMM), int(WcFlag.WITH_INV), int(WcFlag.GRH)
RECV_WC = {  # a receive CQE's WC opcode and flags: one lookup, no enum attribute read per completion
    CqeOpcode.RESP_SEND: (WcOpcode.RECV, 0),
    CqeOpcode.RESP_SEND_IMM: (WcOpcode.RECV, _WITH_IMM),
    CqeOpcode.RESP_SEND_INV: (WcOpcode.RECV, _WITH_INV),
    CqeOpcode.RESP_WR_IMM: (WcOpcode.RECV_RDMA_WITH_IMM, _WITH_IMM),
}
_SEND = WcOpcode.SEND
_bare = object.__new__  # a WC without __init__'s fourteen stores


def imm_from_wire(value: int) -> int:
    """``imm_data`` as C code sees the ``__be32`` field on this host (pyverbs' WC.imm_data)."""
    return int.from_bytes(value.to_bytes(4, "big"), sys.byteorder)


class WC:
    """A work completion, with ``ibv_wc``'s fields."""

    # Each field is zero until set: the class holds the zeroes, so a polled completion stores
    # only what its CQE reports (``CQ._wc``; fourteen stores per WC took a third of its cost)
    wr_id = status = opcode = vendor_err = byte_len = qp_num = src_qp = imm_data = wc_flags = 0
    pkey_index = slid = sl = dlid_path_bits = 0
    reason = ""  # pyroce: one line on why a failed WR failed (the QP, its peer, the cause)

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


class CompChannel(PyverbsObject):
    """``CompChannel(ctx)`` (``ibv_create_comp_channel``): where the completion events of the
    CQs created on it arrive. Closing it closes those CQs first, as pyverbs does."""

    CLOSE_ORDER = 2  # after the CQs

    def __init__(self, context: Context) -> None:
        super().__init__()
        context._check_open()
        self.context = context
        self.events: EventQueue[int] = context.device.create_comp_channel()
        self.cqs: weakref.WeakValueDictionary[int, CQ] = weakref.WeakValueDictionary()  # by CQN
        context.add_ref(self)

    @property
    def fd(self) -> int:
        """Readable while events wait (select, poll, epoll, ``loop.add_reader``); made
        non-blocking, ``get_cq_event`` fails with EAGAIN instead of waiting."""
        return self.events.fileno()

    def get_cq_event(self, expected_cq: CQ) -> None:
        """Wait for the next completion event and count it on ``expected_cq`` (``num_events``).

        EINVAL at once if ``expected_cq`` is not on this channel (pyverbs would wait for an event
        that cannot come), or, the event taken, if it was another CQ's ("Received event on an
        unexpected CQ"; it is counted on that CQ). EAGAIN if ``fd`` is non-blocking and no
        event waits."""
        self._check_open()
        if expected_cq.channel is not self:
            raise PyverbsRDMAError("Failed to get CQ event: the CQ has no events on this channel", errno.EINVAL)
        try:
            cqn = self.events.get()
        except BlockingIOError:
            raise PyverbsRDMAError("Failed to get CQ event", errno.EAGAIN) from None
        cq = self.cqs.get(cqn)
        if cq is not None:
            cq.num_events += 1
        if cq is not expected_cq:
            raise PyverbsRDMAError("Received event on an unexpected CQ", errno.EINVAL)

    def _release(self) -> None:
        self.context.device.destroy_comp_channel(self.events)


class CQ(PyverbsObject):
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    CLOSE_ORDER = 1

    def __init__(self, creator: Context, cqe: int, cq_context: object = None, channel: CompChannel | None = None,
                 comp_vector: int = 0) -> None:  # fmt: skip
        super().__init__()
        creator._check_open()
        check_injected(creator.device, "create_cq", "create CQ")
        _check_cqe(creator, cqe, "create")
        if channel is not None:
            channel._check_open()
        if comp_vector >= creator.num_comp_vectors:
            raise PyverbsRDMAError(f"Failed to create CQ: no completion vector {comp_vector}", errno.EINVAL)
        count = _ring_size(cqe)
        self.ctx = creator
        self.cq_context = cq_context
        self.channel = channel
        self.num_events = 0  # events taken by get_cq_event and not acknowledged
        self._buf = creator.driver_memory.alloc(count * CQE_SIZE)
        self._consumer_record = creator.driver_memory.alloc(4)
        self.ring = CqRing(memoryview(self._buf), count)
        self.hw = creator.device.create_cq(memoryview(self._buf), count, memoryview(self._consumer_record),
                                           channel.events if channel is not None else None,
                                           creator.async_queue)  # fmt: skip
        self.cqe = count - 1
        self.consumer = 0
        self.qps: dict[int, QP] = {}
        self._poller: PollerWakeup | None = None  # what a driver without the GIL sleeps on
        creator.add_ref(self)
        if channel is not None:
            channel.cqs[self.hw.cqn] = self
            channel.add_ref(self)

    @property
    def comp_channel(self) -> CompChannel | None:
        return self.channel

    def req_notify(self, solicited_only: bool = False) -> None:
        """``ibv_req_notify_cq``: raise one event on the channel when the next completion is
        written (``solicited_only``: the next solicited or failed one); re-arm after each event.
        Completions already in the CQ raise none: arm, then poll, then wait."""
        self._check_open()
        self.ctx.device.arm_cq(self.hw, bool(solicited_only))

    def ack_events(self, num_events: int) -> None:
        """``ibv_ack_cq_events``: acknowledge events ``get_cq_event`` returned. ``close``
        acknowledges what is left, as pyverbs does, so destroying never waits for them."""
        self.num_events -= num_events

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions, oldest first: ``(count, [WC, ...])``."""
        if self.closed:
            raise self._closed_error()
        wcs: list[WC] = []
        if num_entries <= 0:
            return 0, wcs
        ring = self.ring
        cqe = self._first_cqe()
        while cqe is not None:  # each CQE read once, into its WC
            wc = self._wc(cqe)  # None for a CQE of a QP reset since it was written: consumed, skipped
            self.consumer += 1
            if wc is not None:
                wcs.append(wc)
                if len(wcs) == num_entries:
                    break
            cqe = ring.poll(self.consumer)
        if wcs:
            self._publish_consumer()
        return len(wcs), wcs

    def _first_cqe(self) -> Cqe | None:
        """The CQE at the consumer. An empty ring lets the engine run (``poll_empty``) and is
        read again; a full one tells it that polling found work without it (``poll_found``)."""
        cqe = self.ring.poll(self.consumer)
        if cqe is None:
            self.ctx.device.poll_empty()
            return self.ring.poll(self.consumer)
        self.ctx.device.poll_found()
        return cqe

    def _next_wc(self) -> WC | None:
        """The next completion in the ring, consuming the CQEs of QPs reset since they were
        written on the way; None when the ring holds no more (the extended CQ's reader)."""
        while (cqe := self.ring.poll(self.consumer)) is not None:
            wc = self._wc(cqe)
            self.consumer += 1
            if wc is not None:
                return wc
        return None

    def _publish_consumer(self) -> None:
        """Tell the NIC how far the ring was read (the consumer record, libmlx5's ``update_cons_index``)."""
        self._consumer_record[:] = (self.consumer & CQ_COUNTER_MASK).to_bytes(4, "big")

    def _wc(self, cqe: Cqe) -> WC | None:
        """The WC of ``cqe``; None for a CQE of a QP reset since it was written (libmlx5 cleans
        those out of the CQ on reset, ``mlx5_cq_clean``)."""
        qp = self.qps.get(cqe.qpn)
        if qp is not None and self.consumer < qp.reset_at.get(self.hw.cqn, 0):
            return None
        is_recv = cqe.opcode in RECV_OPCODES
        wr_id = (qp.rq.retire(cqe.wqe_counter) if is_recv else qp.retire_send(cqe.wqe_counter)) if qp else 0
        wc = _bare(WC)  # the fields the CQE leaves out stay the class's zeroes
        wc.wr_id = wr_id
        wc.qp_num = cqe.qpn
        if cqe.opcode in ERROR_OPCODES:
            wc.status = STATUS_OF_SYNDROME.get(cqe.syndrome, WcStatus.GENERAL_ERR)  # type: ignore[call-overload]
            wc.vendor_err = cqe.vendor_err
            wc.reason = qp.explain(cqe.vendor_err) if qp is not None else ""
            wc.opcode = WcOpcode.RECV if is_recv else WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, WcOpcode.SEND)  # type: ignore[call-overload]
            return wc
        wc.byte_len = cqe.byte_cnt
        if is_recv:
            wc.opcode, flags = RECV_WC[cqe.opcode]
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
            wc.opcode = WC_OPCODE_OF_WQE.get(cqe.s_wqe_opcode, _SEND)  # type: ignore[call-overload]
        return wc

    def resize(self, cqe: int) -> None:
        """``ibv_resize_cq``: at least ``cqe`` entries; completions not yet polled are kept.
        EINVAL if ``cqe`` is out of range or smaller than what is waiting to be polled."""
        self._check_open()
        _check_cqe(self.ctx, cqe, "resize")
        # Work posted before the resize is done first (rxe's requester has sent a UD datagram by
        # then), so its completions count against the new size: EINVAL if they would not fit.
        self.ctx.device.kick()
        count = _ring_size(cqe)
        buf = self.ctx.driver_memory.alloc(count * CQE_SIZE)
        try:
            self.ctx.device.resize_cq(self.hw, memoryview(buf), count, self.consumer)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to resize CQ: {exc}", errno.EINVAL) from None
        for qp in self.qps.values():  # CQE indexes restart at 0 in the new ring
            if self.hw.cqn in qp.reset_at:
                qp.reset_at[self.hw.cqn] = max(0, qp.reset_at[self.hw.cqn] - self.consumer)
        self._buf = buf
        self.ring = self.hw.ring
        self.consumer = 0
        self.cqe = count - 1

    @property
    def driver_rings(self) -> tuple[memoryview, memoryview]:
        """What another driver of this CQ (the C library) reads and writes: the CQE ring and the
        consumer record."""
        return memoryview(self._buf), memoryview(self._consumer_record)

    def poller_wakeup(self) -> tuple[memoryview, int]:
        """What another driver of this CQ (the C library) sleeps on when it has polled the CQ
        empty for a while: a flag byte it sets first, and an eventfd the NIC writes with the
        next CQE (``NicDevice.wake_poller``). Made on the first call, closed with the CQ."""
        if self._poller is None:
            self._poller = PollerWakeup(memoryview(self.ctx.driver_memory.alloc(1)), self.ctx.device.counters)
            self.ctx.device.wake_poller(self.hw, self._poller)
        return self._poller.napping, self._poller.fileno()

    def _release(self) -> None:
        if self.num_events:
            self.ack_events(self.num_events)
        self.ctx.device.destroy_cq(self.hw)
        if self._poller is not None:
            self._poller.close()


def _ring_size(cqe: int) -> int:
    """Room for ``cqe`` + 1 entries, a power of two (libmlx5)."""
    return 1 << cqe.bit_length()


def _check_cqe(ctx: Context, cqe: int, verb: str) -> None:
    max_cqe = ctx.query_device().max_cqe
    if cqe < 1 or cqe > max_cqe:
        raise PyverbsRDMAError(f"Failed to {verb} CQ: cqe {cqe} is outside 1..{max_cqe}", errno.EINVAL)
