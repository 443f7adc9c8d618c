"""Kernels post to pyroce QPs: numba CUDA kernels call pyroce.gpu's helpers (compiled from the
host's source) on rings in mapped memory, and the NIC's engine thread, which no one rings,
executes what they posted; the kernels poll the CQEs.

CI has no GPU: numba's simulator runs the kernels (``NUMBA_ENABLE_CUDASIM=1``, set here before
numba is imported unless the environment says otherwise). On a machine with a CUDA GPU,
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu`` runs the same tests on it; they skip where neither the
simulator is asked for nor a GPU is there. (numba-cuda releases that still name ``np.row_stack``
fail to compile any kernel under NumPy 2.3 and later: give such a machine NumPy 2.2.)"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before numba's first import (a GPU run sets 0)
numba = pytest.importorskip("numba")
from numba import cuda

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.gpu import (
    CQ_UPDATE,
    CQE_POLL_FALSE,
    CQE_POLL_TRUE,
    OUT_BYTE_CNT,
    OUT_FIELDS,
    OUT_OPCODE,
    OUT_QPN,
    OUT_WQE_COUNTER,
    RCV_DBR,
    RDMA_WRITE,
    SEND,
    SND_DBR,
    DirectQueues,
    MappedMemory,
)
from pyroce.gpu.kernels import device_helpers
from pyroce.nic.cqe import CqeOpcode
from pyroce.verbs.device import Context
from tests.rc_pair import MR_SIZE, START_PSN, Endpoint

SIMULATED = bool(numba.config.ENABLE_CUDASIM)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.embedded_nic,  # direct QPs are served by this process's own NIC
    pytest.mark.skipif(not SIMULATED and not cuda.is_available(), reason="no CUDA GPU, no simulator asked for"),
]
h = device_helpers()
SPINS = 2000  # polls per launch of poll_kernel: the host launches it again until its deadline
DEADLINE_S = 10.0


@cuda.jit
def post_recv_kernel(rq: Any, dbrec: Any, wqe_cnt: int, stride: int, idx: int, laddr: int, lkey: int,
                     length: int) -> None:  # fmt: skip
    if cuda.grid(1) == 0:
        h.db_ring(dbrec, RCV_DBR, h.recv_wqe(rq, wqe_cnt, stride, idx, laddr, lkey, length))


@cuda.jit
def write_then_send_kernel(sq: Any, dbrec: Any, wqe_cnt: int, qpn: int, laddr: int, lkey: int, length: int,
                           raddr: int, rkey: int) -> None:  # fmt: skip
    """WQE 0 an RDMA WRITE of ``length`` bytes from ``laddr`` to ``raddr``, WQE 1 a SEND of the
    ``length`` bytes after them; one doorbell record for both."""
    if cuda.grid(1) == 0:
        idx = h.send_wqe(sq, wqe_cnt, 0, qpn, RDMA_WRITE, CQ_UPDATE, laddr, lkey, length, raddr, rkey, 0)
        idx = h.send_wqe(sq, wqe_cnt, idx, qpn, SEND, CQ_UPDATE, laddr + length, lkey, length, 0, 0, 0)
        h.db_ring(dbrec, SND_DBR, idx)


@cuda.jit
def torn_write_kernel(sq: Any, dbrec: Any, wqe_cnt: int, qpn: int, laddr: int, lkey: int, length: int, raddr: int,
                      rkey: int, saved: Any) -> None:  # fmt: skip
    """WQE 0 written whole, then its control segment's first word put back as it was, and the
    record moved: to the NIC, a body whose control segment has not landed. ``saved[0]``: the
    word the WQE needs."""
    if cuda.grid(1) == 0:
        stale = sq[0]
        h.send_wqe(sq, wqe_cnt, 0, qpn, RDMA_WRITE, CQ_UPDATE, laddr, lkey, length, raddr, rkey, 0)
        saved[0] = sq[0]
        sq[0] = stale
        h.db_ring(dbrec, SND_DBR, 1)


@cuda.jit
def store_word_kernel(words: Any, index: int, value: int) -> None:
    if cuda.grid(1) == 0:
        cuda.threadfence_system()
        words[index] = value


@cuda.jit
def poll_kernel(cqes: Any, cqe_cnt: int, consumer: int, dbrec: Any, spins: int, out: Any, result: Any) -> None:
    """Poll CQE ``consumer`` up to ``spins`` times: ``result[0]`` is cqe_poll's answer."""
    if cuda.grid(1) == 0:
        got = CQE_POLL_FALSE
        for _ in range(spins):
            got = h.cqe_poll(cqes, cqe_cnt, consumer, dbrec, out)
            if got != CQE_POLL_FALSE:
                break
        result[0] = got


def kernel_poll(queues: DirectQueues, consumer: int, deadline_s: float = DEADLINE_S) -> np.ndarray | None:
    """CQE ``consumer`` of the QP's CQ as a kernel polled it, or None by ``deadline_s``."""
    rings, out, result = queues.device, np.zeros(OUT_FIELDS, np.int64), np.zeros(1, np.int64)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        poll_kernel[1, 1](rings.scq, queues.scq_cnt, consumer, rings.scq_dbrec, SPINS, out, result)
        if result[0] != CQE_POLL_FALSE:
            assert result[0] == CQE_POLL_TRUE, f"error CQE {out}"
            return out
        time.sleep(0.001)
    return None


def open_gpu_endpoint() -> Endpoint:
    return RcEndpoint.open(MR_SIZE, psn=START_PSN, context=Context("pyroce0", driver_memory=MappedMemory()))


@pytest.fixture
def gpu_pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = open_gpu_endpoint(), open_gpu_endpoint()
    a.connect(b.info())
    b.connect(a.info())
    yield a, b
    a.close()
    b.close()


def test_a_kernel_posts_a_write_and_a_send_and_polls_their_cqes(gpu_pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = gpu_pair
    qa, qb = DirectQueues(a.qp), DirectQueues(b.qp)
    a.mr.write(b"a kernel's WRITE", 16, 0)
    a.mr.write(b"a kernel's SEND!", 16, 16)
    rb = qb.device
    post_recv_kernel[1, 1](rb.rq, rb.dbrec, qb.rq_wqe_cnt, qb.rq_stride, 0, b.mr.buf + 8192, b.mr.lkey, 64)
    ra = qa.device
    write_then_send_kernel[1, 1](ra.sq, ra.dbrec, qa.sq_wqe_cnt, qa.qpn, a.mr.buf, a.mr.lkey, 16, b.mr.buf + 4096,
                                 b.mr.rkey)  # fmt: skip
    for idx in (0, 1):
        cqe = kernel_poll(qa, idx)
        assert cqe is not None, f"no send CQE {idx}"
        assert (cqe[OUT_OPCODE], cqe[OUT_WQE_COUNTER], cqe[OUT_QPN]) == (CqeOpcode.REQ, idx, qa.qpn)
    received = kernel_poll(qb, 0)
    assert received is not None, "no receive CQE"
    assert (received[OUT_OPCODE], received[OUT_BYTE_CNT], received[OUT_QPN]) == (CqeOpcode.RESP_SEND, 16, qb.qpn)
    assert b.mr.read(16, 4096) == b"a kernel's WRITE"
    assert b.mr.read(16, 8192) == b"a kernel's SEND!"
    # the kernels moved the CQs' consumer records as libmlx5 does
    assert qa.host.scq_dbrec.view(np.uint8).tobytes() == (2).to_bytes(4, "big")
    assert a.ctx.device.counters["torn_wqes"] == 0


def test_a_kernels_torn_write_is_not_work_until_its_control_segment_lands(gpu_pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = gpu_pair
    qa = DirectQueues(a.qp)
    a.mr.write(b"a torn WQE, then whole", 22, 0)
    ra, saved = qa.device, np.zeros(1, np.int64)
    torn_write_kernel[1, 1](ra.sq, ra.dbrec, qa.sq_wqe_cnt, qa.qpn, a.mr.buf, a.mr.lkey, 22, b.mr.buf, b.mr.rkey,
                            saved)  # fmt: skip
    assert kernel_poll(qa, 0, deadline_s=0.3) is None  # many engine passes: none took it
    assert b.mr.read(22, 0) == bytes(22)
    assert a.ctx.device.counters["torn_wqes"] == 1
    store_word_kernel[1, 1](ra.sq, 0, int(saved[0]))  # the control segment lands; no new record
    cqe = kernel_poll(qa, 0)
    assert cqe is not None and cqe[OUT_WQE_COUNTER] == 0
    assert b.mr.read(22, 0) == b"a torn WQE, then whole"
