"""rdma_cm's vocabulary, as librdmacm's ``rdma_cma.h`` and IBA chapter 12 number it.

The NIC's connection manager (``pyroce.cm``) reports these values and the drivers pass them
on unchanged: ``pyroce.verbs.cm_enums`` re-exports them with librdmacm's C names for pyverbs
programs, and a C program reads them through the system's own ``rdma_cma.h``.
"""

from __future__ import annotations

import enum


class PortSpace(enum.IntEnum):
    """``enum rdma_ucm_port_space``: a port number's namespace, the middle of a service ID."""

    IPOIB = 0x0002
    IB = 0x013F
    TCP = 0x0106
    UDP = 0x0111


class CmEventType(enum.IntEnum):
    """``enum rdma_cm_event_type``."""

    ADDR_RESOLVED = 0
    ADDR_ERROR = 1
    ROUTE_RESOLVED = 2
    ROUTE_ERROR = 3
    CONNECT_REQUEST = 4
    CONNECT_RESPONSE = 5
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    DEVICE_REMOVAL = 11
    MULTICAST_JOIN = 12
    MULTICAST_ERROR = 13
    ADDR_CHANGE = 14
    TIMEWAIT_EXIT = 15


class RejectReason(enum.IntEnum):
    """IBA table 112, ``enum ib_cm_rej_reason``: why a REJ refuses (a REJECTED event's status)."""

    NO_QP = 1
    NO_EEC = 2
    NO_RESOURCES = 3
    TIMEOUT = 4
    UNSUPPORTED = 5
    INVALID_COMM_ID = 6
    INVALID_COMM_INSTANCE = 7
    INVALID_SERVICE_ID = 8
    INVALID_TRANSPORT_TYPE = 9
    STALE_CONN = 10
    RDC_NOT_EXIST = 11
    INVALID_GID = 12
    INVALID_LID = 13
    INVALID_SL = 14
    INVALID_TRAFFIC_CLASS = 15
    INVALID_HOP_LIMIT = 16
    INVALID_PACKET_RATE = 17
    INVALID_ALT_GID = 18
    INVALID_ALT_LID = 19
    INVALID_ALT_SL = 20
    INVALID_ALT_TRAFFIC_CLASS = 21
    INVALID_ALT_HOP_LIMIT = 22
    INVALID_ALT_PACKET_RATE = 23
    PORT_CM_REDIRECT = 24
    PORT_REDIRECT = 25
    INVALID_MTU = 26
    INSUFFICIENT_RESP_RESOURCES = 27
    CONSUMER_DEFINED = 28
    INVALID_RNR_RETRY = 29
    DUPLICATE_LOCAL_COMM_ID = 30
    INVALID_CLASS_VERSION = 31
    INVALID_FLOW_LABEL = 32
    INVALID_ALT_FLOW_LABEL = 33
    VENDOR_OPTION_NOT_SUPPORTED = 35


class SidrStatus(enum.IntEnum):
    """IBA table 117, ``enum ib_cm_sidr_status``: a SIDR_REP's answer."""

    SUCCESS = 0
    UNSUPPORTED = 1  # no service by that ID
    REJECT = 2
    NO_QP = 3
    REDIRECT = 4
    UNSUPPORTED_VERSION = 5


class McJoinFlag(enum.IntEnum):
    """``enum rdma_cm_mc_join_flags``: how an id joins a multicast group."""

    FULLMEMBER = 0  # sends to the group and receives what is sent to it
    SENDONLY_FULLMEMBER = 1  # sends only: librdmacm attaches no QP


class CmOption(enum.IntEnum):
    """``rdma_set_option``'s levels and names (``RDMA_OPTION_*``)."""

    LEVEL_ID = 0
    LEVEL_IB = 1
    ID_TOS = 0
    ID_REUSEADDR = 1
    ID_AFONLY = 2
    ID_ACK_TIMEOUT = 3
    IB_PATH = 1


QPT_RC, QPT_UC, QPT_UD = 2, 3, 4  # the ibv_qp_type values an rdma_cm id takes
QP1_QKEY = 0x80010000  # the Q_Key of every GSI QP (IBA 13.5.1.1)
UDP_QKEY = 0x01234567  # rdma_cm's Q_Key for RDMA_PS_UDP ids (RDMA_UDP_QKEY)
PRIVATE_DATA_MAX = {PortSpace.TCP: 56, PortSpace.UDP: 180}  # a REQ's or SIDR_REQ's user bytes after rdma_cm's header
ACCEPT_PRIVATE_DATA_MAX = 196  # a REP's
REJECT_PRIVATE_DATA_MAX = 148  # a REJ's
DISCONNECT_PRIVATE_DATA_MAX = 220  # a DREQ's
SIDR_REP_PRIVATE_DATA_MAX = 136
