"""GPU-initiated posting: a direct QP's rings as arrays a kernel writes, and RDMaxcel-shaped
helpers (``send_wqe``, ``recv_wqe``, ``db_ring``, ``cqe_poll``) that host code calls as they are
and kernels call compiled (``pyroce.gpu.kernels.device_helpers()``, numba's CUDA; the
simulator under ``NUMBA_ENABLE_CUDASIM=1``). docs/architecture.md, "GPU-initiated posting".
"""

from pyroce.gpu.helpers import (
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
    RDMA_READ,
    RDMA_WRITE,
    RDMA_WRITE_IMM,
    SEND,
    SEND_IMM,
    SND_DBR,
    SOLICITED,
    cqe_poll,
    db_ring,
    recv_wqe,
    send_wqe,
)
from pyroce.gpu.memory import MappedMemory
from pyroce.gpu.queues import DirectQueues, Rings
