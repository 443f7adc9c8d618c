"""What the transport reports when work finishes: IBA work completions (IBA 11.4.2.1).

The numbering is libibverbs' (``enum ibv_wc_status``, ``ibv_wc_opcode``, ``ibv_wc_flags``), so
a status crosses every layer unchanged; the engine turns a ``Completion`` into an mlx5 CQE and
the verbs layer turns the CQE back into a ``WC``.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class WcStatus(enum.IntEnum):
    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class WcOpcode(enum.IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class WcFlag(enum.IntFlag):
    NONE = 0
    GRH = 1
    WITH_IMM = 2
    IP_CSUM_OK = 4
    WITH_INV = 8


class Completion(NamedTuple):
    """One work completion. ``is_recv`` says which queue ``wqe_counter`` indexes."""

    is_recv: bool
    wqe_counter: int
    status: WcStatus
    opcode: WcOpcode
    byte_len: int = 0
    imm: int = 0  # immediate data as it came on the wire (big-endian u32), or the invalidated R_Key
    flags: WcFlag = WcFlag.NONE
    src_qp: int = 0
    vendor_err: int = 0
