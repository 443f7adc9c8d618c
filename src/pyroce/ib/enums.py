"""The libibverbs enums that more than one layer uses, each defined once.

Each C-named class is the enum as ``libibverbs/verbs.h`` names and numbers it (the same source
and commit as ``pyroce.verbs.enums``, which re-exports these classes for pyverbs programs).
pyroce's own layers write the same values without the C prefix (``WcStatus.SUCCESS``,
``Access.REMOTE_WRITE``, ``QpState.RTS``); those classes are made from the C ones below, so a
value cannot differ between the transport that produces it and the verbs that report it.
"""

from __future__ import annotations

import enum
from typing import Any


class ibv_mtu(enum.IntEnum):
    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


class ibv_wc_status(enum.IntEnum):
    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_EEC_OP_ERR = 3
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_MW_BIND_ERR = 6
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_LOC_RDD_VIOL_ERR = 14
    IBV_WC_REM_INV_RD_REQ_ERR = 15
    IBV_WC_REM_ABORT_ERR = 16
    IBV_WC_INV_EECN_ERR = 17
    IBV_WC_INV_EEC_STATE_ERR = 18
    IBV_WC_FATAL_ERR = 19
    IBV_WC_RESP_TIMEOUT_ERR = 20
    IBV_WC_GENERAL_ERR = 21
    IBV_WC_TM_ERR = 22
    IBV_WC_TM_RNDV_INCOMPLETE = 23


class ibv_wc_opcode(enum.IntEnum):
    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_COMP_SWAP = 3
    IBV_WC_FETCH_ADD = 4
    IBV_WC_BIND_MW = 5
    IBV_WC_LOCAL_INV = 6
    IBV_WC_TSO = 7
    IBV_WC_FLUSH = 8
    IBV_WC_ATOMIC_WRITE = 9
    # Receive completions have bit 7 set, so ``opcode & IBV_WC_RECV`` tests for one.
    IBV_WC_RECV = 1 << 7
    IBV_WC_RECV_RDMA_WITH_IMM = 129
    IBV_WC_TM_ADD = 130
    IBV_WC_TM_DEL = 131
    IBV_WC_TM_SYNC = 132
    IBV_WC_TM_RECV = 133
    IBV_WC_TM_NO_TAG = 134
    IBV_WC_DRIVER1 = 135
    IBV_WC_DRIVER2 = 136
    IBV_WC_DRIVER3 = 137


IBV_WC_IP_CSUM_OK_SHIFT = 2


class ibv_wc_flags(enum.IntEnum):
    IBV_WC_GRH = 1 << 0
    IBV_WC_WITH_IMM = 1 << 1
    IBV_WC_IP_CSUM_OK = 1 << IBV_WC_IP_CSUM_OK_SHIFT
    IBV_WC_WITH_INV = 1 << 3
    IBV_WC_TM_SYNC_REQ = 1 << 4
    IBV_WC_TM_MATCH = 1 << 5
    IBV_WC_TM_DATA_VALID = 1 << 6


# verbs_api.h / ib_user_ioctl_verbs.h: IB_UVERBS_ACCESS_OPTIONAL_FIRST and _LAST.
IBV_ACCESS_OPTIONAL_FIRST = 1 << 20
IBV_ACCESS_OPTIONAL_RANGE = (((1 << 29) << 1) - 1) & ~(IBV_ACCESS_OPTIONAL_FIRST - 1)


class ibv_access_flags(enum.IntEnum):
    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 1 << 1
    IBV_ACCESS_REMOTE_READ = 1 << 2
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3
    IBV_ACCESS_MW_BIND = 1 << 4
    IBV_ACCESS_ZERO_BASED = 1 << 5
    IBV_ACCESS_ON_DEMAND = 1 << 6
    IBV_ACCESS_HUGETLB = 1 << 7
    IBV_ACCESS_FLUSH_GLOBAL = 1 << 8
    IBV_ACCESS_FLUSH_PERSISTENT = 1 << 9
    IBV_ACCESS_RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST


class ibv_qp_attr_mask(enum.IntEnum):
    IBV_QP_STATE = 1 << 0
    IBV_QP_CUR_STATE = 1 << 1
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2
    IBV_QP_ACCESS_FLAGS = 1 << 3
    IBV_QP_PKEY_INDEX = 1 << 4
    IBV_QP_PORT = 1 << 5
    IBV_QP_QKEY = 1 << 6
    IBV_QP_AV = 1 << 7
    IBV_QP_PATH_MTU = 1 << 8
    IBV_QP_TIMEOUT = 1 << 9
    IBV_QP_RETRY_CNT = 1 << 10
    IBV_QP_RNR_RETRY = 1 << 11
    IBV_QP_RQ_PSN = 1 << 12
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
    IBV_QP_ALT_PATH = 1 << 14
    IBV_QP_MIN_RNR_TIMER = 1 << 15
    IBV_QP_SQ_PSN = 1 << 16
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
    IBV_QP_PATH_MIG_STATE = 1 << 18
    IBV_QP_CAP = 1 << 19
    IBV_QP_DEST_QPN = 1 << 20
    # Bits 21..24 (_IBV_QP_SMAC, _IBV_QP_ALT_SMAC, _IBV_QP_VID, _IBV_QP_ALT_VID) were never exposed by libibverbs.
    IBV_QP_RATE_LIMIT = 1 << 25


class ibv_qp_state(enum.IntEnum):
    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6
    IBV_QPS_UNKNOWN = 7


class ibv_event_type(enum.IntEnum):
    IBV_EVENT_CQ_ERR = 0
    IBV_EVENT_QP_FATAL = 1
    IBV_EVENT_QP_REQ_ERR = 2
    IBV_EVENT_QP_ACCESS_ERR = 3
    IBV_EVENT_COMM_EST = 4
    IBV_EVENT_SQ_DRAINED = 5
    IBV_EVENT_PATH_MIG = 6
    IBV_EVENT_PATH_MIG_ERR = 7
    IBV_EVENT_DEVICE_FATAL = 8
    IBV_EVENT_PORT_ACTIVE = 9
    IBV_EVENT_PORT_ERR = 10
    IBV_EVENT_LID_CHANGE = 11
    IBV_EVENT_PKEY_CHANGE = 12
    IBV_EVENT_SM_CHANGE = 13
    IBV_EVENT_SRQ_ERR = 14
    IBV_EVENT_SRQ_LIMIT_REACHED = 15
    IBV_EVENT_QP_LAST_WQE_REACHED = 16
    IBV_EVENT_CLIENT_REREGISTER = 17
    IBV_EVENT_GID_CHANGE = 18
    IBV_EVENT_WQ_FATAL = 19
    IBV_EVENT_DEVICE_SPEED_CHANGE = 20


def _unprefixed(name: str, c_enum: type[enum.IntEnum], prefix: str, base: type[enum.IntEnum] = enum.IntEnum,
                zero: str | None = None) -> Any:  # fmt: skip
    """``c_enum``'s members named without ``prefix``; ``zero`` names the empty set of a flag class.
    (A class made at import time: a static checker does not see its members.)"""
    members = {zero: 0} if zero else {}
    members.update((member.name.removeprefix(prefix), member.value) for member in c_enum)
    return base(name, members, module=__name__)


WcStatus = _unprefixed("WcStatus", ibv_wc_status, "IBV_WC_")
WcOpcode = _unprefixed("WcOpcode", ibv_wc_opcode, "IBV_WC_")
WcFlag = _unprefixed("WcFlag", ibv_wc_flags, "IBV_WC_", enum.IntFlag, zero="NONE")
Access = _unprefixed("Access", ibv_access_flags, "IBV_ACCESS_", enum.IntFlag, zero="LOCAL_READ")  # always allowed
QpState = _unprefixed("QpState", ibv_qp_state, "IBV_QPS_")
EventType = _unprefixed("EventType", ibv_event_type, "IBV_EVENT_")

# What an event's element names, as ``ibv_get_async_event`` sorts them: a QP, an SRQ or a CQ;
# any other event names a port (or the device, for DEVICE_FATAL).
QP_EVENTS = frozenset({EventType.QP_FATAL, EventType.QP_REQ_ERR, EventType.QP_ACCESS_ERR, EventType.COMM_EST,
                       EventType.SQ_DRAINED, EventType.PATH_MIG, EventType.PATH_MIG_ERR,
                       EventType.QP_LAST_WQE_REACHED})  # fmt: skip
SRQ_EVENTS = frozenset({EventType.SRQ_ERR, EventType.SRQ_LIMIT_REACHED})
CQ_EVENTS = frozenset({EventType.CQ_ERR})
