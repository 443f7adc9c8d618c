"""A direct RC QP's rings as arrays: what host code and a kernel post and poll with.

``DirectQueues(qp)`` makes the QP direct (the NIC reads its doorbell records on every pass, a
doorbell rung or not: docs/architecture.md, "Direct verbs") and hands out its send and receive
rings, doorbell record and the rings and consumer records of its two CQs as arrays of be32
words, with the numbers a kernel needs (QPN, ring sizes, the receive stride). From then on the
QP and its CQs are the program's: one publisher per QP (host code or one GPU thread), and
``post_send``, ``post_recv`` and ``poll`` on them are no longer the program's to call (their
counters would not know of the WQEs and CQEs written by hand), nor is ``CQ.resize``.
"""

from __future__ import annotations

import errno
from typing import Any, NamedTuple

import numpy as np

from pyroce.gpu.helpers import WORD, WQEBB_WORDS, be32
from pyroce.gpu.memory import MappedMemory
from pyroce.nic.rings import COUNTER_MASK, UAR_SIZE
from pyroce.nic.wqe import CTRL_OPMOD_IDX_OPCODE_AT, WqeOpcode
from pyroce.verbs.enums import ibv_qp_type
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP

DIRECT_TYPES = (ibv_qp_type.IBV_QPT_RC, ibv_qp_type.IBV_QPT_UC)  # send_wqe writes no datagram segment


class Rings(NamedTuple):
    """One QP's arrays (uint32 words): send ring, receive ring, doorbell record (``RCV_DBR``,
    ``SND_DBR``), send CQ's ring and consumer record, receive CQ's (the same arrays when the
    QP has one CQ)."""

    sq: Any
    rq: Any
    dbrec: Any
    scq: Any
    scq_dbrec: Any
    rcq: Any
    rcq_dbrec: Any


class DirectQueues:
    """A direct QP's rings: ``host`` (numpy views, for host code) and ``device`` (the CUDA
    mapped arrays, for kernels: the Context must have been opened with
    ``driver_memory=pyroce.gpu.MappedMemory()``); the program's counters start at ``sq_head``,
    ``rq_head`` (the next WQE indices) and ``scq_head``, ``rcq_head`` (the next CQEs)."""

    def __init__(self, qp: QP) -> None:
        qp._check_open()
        what = "make a direct QP"
        if qp.qp_type not in DIRECT_TYPES:
            raise PyverbsRDMAError(f"Failed to {what}: only RC and UC QPs post by hand here", errno.EOPNOTSUPP)
        if qp.srq is not None:
            raise PyverbsRDMAError(f"Failed to {what}: an SRQ's ring is not the QP's to write", errno.EOPNOTSUPP)
        device = qp.ctx.device
        if not hasattr(device, "direct_qp"):
            raise PyverbsRDMAError(f"Failed to {what}: the shared NIC serves direct QPs to C programs only (mlx5dv); "
                                   "open the Context on this process's own NIC (nic='own')", errno.EOPNOTSUPP)  # fmt: skip
        sq, dbrec = qp.driver_rings
        rq = qp.rq.ring
        (scq, scq_dbrec), (rcq, rcq_dbrec) = qp.scq.driver_rings, qp.rcq.driver_rings
        self._views = Rings(sq, rq.buf, dbrec, scq, scq_dbrec, rcq, rcq_dbrec)
        self._memory = qp.ctx.driver_memory
        self.qpn = qp.qp_num
        self.sq_wqe_cnt = qp.sq_wqebbs  # basic blocks; send_wqe's WQEs take one each
        self.rq_wqe_cnt = rq.count
        self.rq_stride = rq.stride // WORD  # in words
        self.scq_cnt = qp.scq.reader.ring.cqe_count
        self.rcq_cnt = qp.rcq.reader.ring.cqe_count
        # where the program's counters start: after what the verbs posted and polled
        self.sq_head, self.rq_head = qp.sq_producer, qp.rq.producer
        self.scq_head, self.rcq_head = qp.scq.consumer, qp.rcq.consumer
        self.host = Rings(*(np.frombuffer(view, dtype=np.uint32) for view in self._views))
        self._stale_slots()
        self._uar = qp.ctx.driver_memory.alloc(UAR_SIZE)  # the register page the NIC keeps with a direct QP
        device.direct_qp(qp.qp_num, self._uar)

    def _stale_slots(self) -> None:
        """Give each basic block nothing was posted to yet a NOP of the ring's previous lap: a
        zeroed control segment says WQE index 0, so a record moved before WQE 0 was written
        would have the NIC run the zeros; a stale index is torn, and waited for."""
        for slot in range(self.sq_head, self.sq_wqe_cnt):
            stale = (slot - self.sq_wqe_cnt) & COUNTER_MASK
            self.host.sq[slot * WQEBB_WORDS + CTRL_OPMOD_IDX_OPCODE_AT // WORD] = be32(stale << 8 | WqeOpcode.NOP)

    @property
    def device(self) -> Rings:
        """The same rings as CUDA mapped arrays, for kernels (EINVAL where the rings are plain
        host memory, which a kernel would be handed a copy of)."""
        if not isinstance(self._memory, MappedMemory):
            raise PyverbsRDMAError("Failed to give a kernel the rings: they are not GPU-visible (open the Context "
                                   "with driver_memory=pyroce.gpu.MappedMemory())", errno.EINVAL)  # fmt: skip
        return Rings(*(self._memory.device_array(view) for view in self._views))
