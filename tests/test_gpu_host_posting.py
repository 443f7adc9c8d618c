"""pyroce.gpu's helpers called from host code: what they write is the codecs' layout byte for
byte, and a direct QP posted and polled through them alone (no verbs call, no doorbell) moves
data between two real QPs; a WQE whose record moved before its control segment was written is
not work until it is. The same helpers run in kernels in tests/test_gpu_kernels.py."""

from __future__ import annotations

import errno
import time

import numpy as np
import pytest

from pyroce.gpu import (
    CQ_UPDATE,
    CQE_POLL_ERROR,
    CQE_POLL_FALSE,
    CQE_POLL_TRUE,
    OUT_BYTE_CNT,
    OUT_FIELDS,
    OUT_OPCODE,
    OUT_QPN,
    OUT_SYNDROME,
    OUT_WQE_COUNTER,
    RCV_DBR,
    SND_DBR,
    DirectQueues,
    cqe_poll,
    db_ring,
    recv_wqe,
    send_wqe,
)
from pyroce.nic.cqe import Cqe, CqeOpcode, CqeSyndrome
from pyroce.nic.rings import CqRing
from pyroce.nic.wqe import FmCeSe, SendWqe, Sge, WqeOpcode, encode_send_wqe, write_recv_wqe
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from tests.rc_pair import Endpoint

pytestmark = pytest.mark.embedded_nic  # direct QPs are served by this process's own NIC
DEADLINE_S = 10.0


@pytest.mark.parametrize(("opcode", "raddr"), [(WqeOpcode.RDMA_WRITE, 0x1122334455667788),
                                               (WqeOpcode.RDMA_READ, 0x10000),
                                               (WqeOpcode.SEND, None), (WqeOpcode.SEND_IMM, None),
                                               (WqeOpcode.RDMA_WRITE_IMM, 0xABC)])  # fmt: skip
def test_send_wqe_writes_the_codecs_layout(opcode: WqeOpcode, raddr: int | None) -> None:
    sq = np.zeros(4 * 16, dtype=np.uint32)
    imm = 0xCAFEF00D if opcode in (WqeOpcode.SEND_IMM, WqeOpcode.RDMA_WRITE_IMM) else 0
    after = send_wqe(sq, 4, 6, 0x123456, int(opcode), CQ_UPDATE, 0x7F0012345678, 0x4321, 1000, raddr or 0, 0x9876, imm)
    assert after == 7
    expected = encode_send_wqe(SendWqe(opcode, 6, 0x123456, FmCeSe.CQ_UPDATE, imm, raddr,
                                       None if raddr is None else 0x9876,
                                       sges=(Sge(0x7F0012345678, 1000, 0x4321),)))  # fmt: skip
    slot = sq.view(np.uint8)[2 * 64 : 3 * 64].tobytes()  # WQE 6 of a 4-block ring: block 2
    ds = 3 if raddr is not None else 2
    assert slot[: ds * 16] == expected[: ds * 16]


def test_send_wqe_refuses_what_it_cannot_write() -> None:
    sq = np.zeros(16, dtype=np.uint32)
    for opcode in (int(WqeOpcode.ATOMIC_CS), int(WqeOpcode.BIND_MW), 0x3F, 64, -1):
        assert send_wqe(sq, 1, 0, 1, opcode, CQ_UPDATE, 0, 0, 0, 0, 0, 0) == -1
    assert not sq.any()


def test_recv_wqe_writes_the_codecs_layout() -> None:
    rq = np.zeros(2 * 8, dtype=np.uint32)  # two WQEs of 32 bytes
    assert recv_wqe(rq, 2, 8, 3, 0xDEADBEEF000, 0x55, 4096) == 4
    expected = bytearray(32)
    write_recv_wqe(expected, 0, (Sge(0xDEADBEEF000, 4096, 0x55),), 32)
    assert rq.view(np.uint8)[32:].tobytes() == expected


def test_cqe_poll_reads_what_the_engine_writes() -> None:
    ring, record, out = np.zeros(2 * 16, dtype=np.uint32), np.zeros(1, dtype=np.uint32), np.zeros(OUT_FIELDS, np.int64)
    cq_ring = CqRing(memoryview(ring.view(np.uint8)), 2)  # the engine's writer; every CQE starts invalid
    assert cqe_poll(ring, 2, 0, record, out) == CQE_POLL_FALSE and record[0] == 0
    cq_ring.produce(0, Cqe(CqeOpcode.RESP_SEND, 0xABCDEF, 0x1234, byte_cnt=777))
    assert cqe_poll(ring, 2, 0, record, out) == CQE_POLL_TRUE
    assert (out[OUT_OPCODE], out[OUT_WQE_COUNTER], out[OUT_BYTE_CNT], out[OUT_QPN]) == (2, 0x1234, 777, 0xABCDEF)
    assert record.view(np.uint8).tobytes() == (1).to_bytes(4, "big")
    # CQE 2 is slot 0 again, on the next lap: the owner bit of lap 0 is not it
    assert cqe_poll(ring, 2, 2, record, out) == CQE_POLL_FALSE
    error = Cqe(CqeOpcode.REQ_ERR, 7, 3, syndrome=CqeSyndrome.REMOTE_ACCESS_ERR)
    cq_ring.produce(2, error)  # slot 0, owner 1
    assert cqe_poll(ring, 2, 2, record, out) == CQE_POLL_ERROR
    assert (out[OUT_OPCODE], out[OUT_SYNDROME], out[OUT_WQE_COUNTER]) == (13, CqeSyndrome.REMOTE_ACCESS_ERR, 3)
    assert record.view(np.uint8).tobytes() == (3).to_bytes(4, "big")


def poll(queues: DirectQueues, consumer: int, deadline_s: float = DEADLINE_S) -> np.ndarray:
    """The fields of CQE ``consumer`` of the QP's send CQ (= its receive CQ), polled from host code."""
    out = np.zeros(OUT_FIELDS, np.int64)
    rings, deadline = queues.host, time.monotonic() + deadline_s
    while (got := cqe_poll(rings.scq, queues.scq_cnt, consumer, rings.scq_dbrec, out)) == CQE_POLL_FALSE:
        if time.monotonic() > deadline:
            raise AssertionError(f"no CQE {consumer}")
        time.sleep(0.0005)
    assert got == CQE_POLL_TRUE, f"error CQE, syndrome {out[OUT_SYNDROME]:#x}"
    return out


def test_host_code_posts_write_read_and_send_through_the_helpers(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    qa, qb = DirectQueues(a.qp), DirectQueues(b.qp)
    a.mr.write(b"written by hand", 15, 0)
    b.mr.write(b"read back", 9, 4096)
    a.mr.write(b"sent by hand", 12, 8192)
    recv_wqe(qb.host.rq, qb.rq_wqe_cnt, qb.rq_stride, 0, b.mr.buf + 8192, b.mr.lkey, 64)
    db_ring(qb.host.dbrec, RCV_DBR, 1)
    ops = [(WqeOpcode.RDMA_WRITE, 0, 0, 15), (WqeOpcode.RDMA_READ, 4096, 4096, 9), (WqeOpcode.SEND, 8192, 0, 12)]
    for idx, (opcode, local, remote, length) in enumerate(ops):
        assert send_wqe(qa.host.sq, qa.sq_wqe_cnt, idx, qa.qpn, int(opcode), CQ_UPDATE, a.mr.buf + local, a.mr.lkey,
                        length, b.mr.buf + remote, b.mr.rkey, 0) == idx + 1  # fmt: skip
    db_ring(qa.host.dbrec, SND_DBR, len(ops))
    for idx, (_, _, _, length) in enumerate(ops):
        cqe = poll(qa, idx)
        assert (cqe[OUT_OPCODE], cqe[OUT_WQE_COUNTER], cqe[OUT_QPN]) == (CqeOpcode.REQ, idx, qa.qpn)
    received = poll(qb, 0)
    assert (received[OUT_OPCODE], received[OUT_BYTE_CNT], received[OUT_WQE_COUNTER]) == (CqeOpcode.RESP_SEND, 12, 0)
    assert b.mr.read(15, 0) == b"written by hand"
    assert a.mr.read(9, 4096) == b"read back"
    assert b.mr.read(12, 8192) == b"sent by hand"
    assert a.ctx.device.counters["torn_wqes"] == 0


def test_a_record_moved_before_the_control_segment_is_not_work(pair: tuple[Endpoint, Endpoint]) -> None:
    """WQE 0 of a fresh ring: its body written, the record moved, its control segment's first
    word not yet (a zeroed one would read as WQE 0: DirectQueues gave the slot a stale index)."""
    a, b = pair
    qa = DirectQueues(a.qp)
    a.mr.write(b"torn, then whole", 16, 0)
    sq = qa.host.sq
    stale = int(sq[0])
    send_wqe(sq, qa.sq_wqe_cnt, 0, qa.qpn, int(WqeOpcode.RDMA_WRITE), CQ_UPDATE, a.mr.buf, a.mr.lkey, 16,
             b.mr.buf, b.mr.rkey, 0)  # fmt: skip
    whole, sq[0] = int(sq[0]), stale  # as if the first word were still on its way
    db_ring(qa.host.dbrec, SND_DBR, 1)
    with pytest.raises(AssertionError, match="no CQE 0"):
        poll(qa, 0, deadline_s=0.2)  # many engine passes: none takes it
    assert b.mr.read(16, 0) == bytes(16)
    assert a.ctx.device.counters["torn_wqes"] == 1
    sq[0] = whole  # the control segment lands; the record does not move again
    assert poll(qa, 0)[OUT_WQE_COUNTER] == 0
    assert b.mr.read(16, 0) == b"torn, then whole"


def test_direct_queues_refuse_what_they_cannot_serve(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    with pytest.raises(PyverbsRDMAError) as raised:
        DirectQueues(a.qp).device  # noqa: B018 - the property refuses
    assert raised.value.error_code == errno.EINVAL
