"""libibverbs' C enums as Python ``IntEnum`` classes, pyroce's counterpart of pyverbs' enum modules.

Each class bears its C name and each member its full C name with its C value (``ibv_qp_type.IBV_QPT_RC == 2``),
as rdma-core's ``pyverbs.libibverbs_enums`` exposes them; every member is also a module-level name
(``IBV_QPT_RC``), as the older ``pyverbs.enums`` gave them. Values come from rdma-core's
``libibverbs/verbs.h``, ``libibverbs/verbs_api.h``, ``kernel-headers/rdma/ib_user_ioctl_verbs.h``,
``libibverbs/driver.h`` and ``libibverbs/tm_types.h``, the names from ``pyverbs/libibverbs_enums.pxd`` and the
``*_str()`` strings from ``libibverbs/enum_strs.c``, read at commit 691953d8d502 (v64.0-61, version 65.0-dev)
and checked against tag v44.0, whose values are the same but where some newer members are missing.
"""

from __future__ import annotations

import enum

# Defined once in pyroce.ib, which the transport and the NIC use too; re-exported here as pyverbs has them.
from pyroce.ib.enums import (
    IBV_ACCESS_OPTIONAL_FIRST,
    IBV_ACCESS_OPTIONAL_RANGE,
    IBV_WC_IP_CSUM_OK_SHIFT,
    ibv_access_flags,
    ibv_event_type,
    ibv_mtu,
    ibv_qp_attr_mask,
    ibv_qp_state,
    ibv_wc_flags,
    ibv_wc_opcode,
    ibv_wc_status,
)

# ---------------------------------------------------------------------------------------------------------------------
# libibverbs/verbs.h
# ---------------------------------------------------------------------------------------------------------------------


class ibv_gid_type(enum.IntEnum):
    IBV_GID_TYPE_IB = 0
    IBV_GID_TYPE_ROCE_V1 = 1
    IBV_GID_TYPE_ROCE_V2 = 2


class ibv_node_type(enum.IntEnum):
    IBV_NODE_UNKNOWN = -1
    IBV_NODE_CA = 1
    IBV_NODE_SWITCH = 2
    IBV_NODE_ROUTER = 3
    IBV_NODE_RNIC = 4
    IBV_NODE_USNIC = 5
    IBV_NODE_USNIC_UDP = 6
    IBV_NODE_UNSPECIFIED = 7


class ibv_transport_type(enum.IntEnum):
    IBV_TRANSPORT_UNKNOWN = -1
    IBV_TRANSPORT_IB = 0
    IBV_TRANSPORT_IWARP = 1
    IBV_TRANSPORT_USNIC = 2
    IBV_TRANSPORT_USNIC_UDP = 3
    IBV_TRANSPORT_UNSPECIFIED = 4


class ibv_device_cap_flags(enum.IntEnum):
    IBV_DEVICE_RESIZE_MAX_WR = 1
    IBV_DEVICE_BAD_PKEY_CNTR = 1 << 1
    IBV_DEVICE_BAD_QKEY_CNTR = 1 << 2
    IBV_DEVICE_RAW_MULTI = 1 << 3
    IBV_DEVICE_AUTO_PATH_MIG = 1 << 4
    IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5
    IBV_DEVICE_UD_AV_PORT_ENFORCE = 1 << 6
    IBV_DEVICE_CURR_QP_STATE_MOD = 1 << 7
    IBV_DEVICE_SHUTDOWN_PORT = 1 << 8
    IBV_DEVICE_INIT_TYPE = 1 << 9
    IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10
    IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11
    IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12
    IBV_DEVICE_SRQ_RESIZE = 1 << 13
    IBV_DEVICE_N_NOTIFY_CQ = 1 << 14
    IBV_DEVICE_MEM_WINDOW = 1 << 17
    IBV_DEVICE_UD_IP_CSUM = 1 << 18
    IBV_DEVICE_XRC = 1 << 20
    IBV_DEVICE_MEM_MGT_EXTENSIONS = 1 << 21
    IBV_DEVICE_MEM_WINDOW_TYPE_2A = 1 << 23
    IBV_DEVICE_MEM_WINDOW_TYPE_2B = 1 << 24
    IBV_DEVICE_RC_IP_CSUM = 1 << 25
    IBV_DEVICE_RAW_IP_CSUM = 1 << 26
    IBV_DEVICE_MANAGED_FLOW_STEERING = 1 << 29


class ibv_fork_status(enum.IntEnum):
    IBV_FORK_DISABLED = 0
    IBV_FORK_ENABLED = 1
    IBV_FORK_UNNEEDED = 2


class ibv_atomic_cap(enum.IntEnum):
    IBV_ATOMIC_NONE = 0
    IBV_ATOMIC_HCA = 1
    IBV_ATOMIC_GLOB = 2


class ibv_dm_mask(enum.IntEnum):
    IBV_DM_MASK_HANDLE = 1 << 0


class ibv_odp_general_caps(enum.IntEnum):
    IBV_ODP_SUPPORT = 1 << 0
    IBV_ODP_SUPPORT_IMPLICIT = 1 << 1


class ibv_odp_transport_cap_bits(enum.IntEnum):
    IBV_ODP_SUPPORT_SEND = 1 << 0
    IBV_ODP_SUPPORT_RECV = 1 << 1
    IBV_ODP_SUPPORT_WRITE = 1 << 2
    IBV_ODP_SUPPORT_READ = 1 << 3
    IBV_ODP_SUPPORT_ATOMIC = 1 << 4
    IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5
    IBV_ODP_SUPPORT_FLUSH = 1 << 6
    IBV_ODP_SUPPORT_ATOMIC_WRITE = 1 << 7


class ibv_rx_hash_function_flags(enum.IntEnum):
    IBV_RX_HASH_FUNC_TOEPLITZ = 1 << 0


class ibv_rx_hash_fields(enum.IntEnum):
    IBV_RX_HASH_SRC_IPV4 = 1 << 0
    IBV_RX_HASH_DST_IPV4 = 1 << 1
    IBV_RX_HASH_SRC_IPV6 = 1 << 2
    IBV_RX_HASH_DST_IPV6 = 1 << 3
    IBV_RX_HASH_SRC_PORT_TCP = 1 << 4
    IBV_RX_HASH_DST_PORT_TCP = 1 << 5
    IBV_RX_HASH_SRC_PORT_UDP = 1 << 6
    IBV_RX_HASH_DST_PORT_UDP = 1 << 7
    IBV_RX_HASH_IPSEC_SPI = 1 << 8
    IBV_RX_HASH_INNER = 1 << 31


class ibv_raw_packet_caps(enum.IntEnum):
    IBV_RAW_PACKET_CAP_CVLAN_STRIPPING = 1 << 0
    IBV_RAW_PACKET_CAP_SCATTER_FCS = 1 << 1
    IBV_RAW_PACKET_CAP_IP_CSUM = 1 << 2
    IBV_RAW_PACKET_CAP_DELAY_DROP = 1 << 3


class ibv_tm_cap_flags(enum.IntEnum):
    IBV_TM_CAP_RC = 1 << 0


class ibv_pci_atomic_op_size(enum.IntEnum):
    IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP = 1 << 0
    IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP = 1 << 1
    IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP = 1 << 2


class ibv_port_state(enum.IntEnum):
    IBV_PORT_NOP = 0
    IBV_PORT_DOWN = 1
    IBV_PORT_INIT = 2
    IBV_PORT_ARMED = 3
    IBV_PORT_ACTIVE = 4
    IBV_PORT_ACTIVE_DEFER = 5


class ibv_link_layer(enum.IntEnum):
    """An anonymous enum in verbs.h (and in pyverbs, which has no class for it): this class name is pyroce's."""

    IBV_LINK_LAYER_UNSPECIFIED = 0
    IBV_LINK_LAYER_INFINIBAND = 1
    IBV_LINK_LAYER_ETHERNET = 2


class ibv_port_cap_flags(enum.IntEnum):
    IBV_PORT_SM = 1 << 1
    IBV_PORT_NOTICE_SUP = 1 << 2
    IBV_PORT_TRAP_SUP = 1 << 3
    IBV_PORT_OPT_IPD_SUP = 1 << 4
    IBV_PORT_AUTO_MIGR_SUP = 1 << 5
    IBV_PORT_SL_MAP_SUP = 1 << 6
    IBV_PORT_MKEY_NVRAM = 1 << 7
    IBV_PORT_PKEY_NVRAM = 1 << 8
    IBV_PORT_LED_INFO_SUP = 1 << 9
    IBV_PORT_SYS_IMAGE_GUID_SUP = 1 << 11
    IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP = 1 << 12
    IBV_PORT_EXTENDED_SPEEDS_SUP = 1 << 14
    IBV_PORT_CAP_MASK2_SUP = 1 << 15
    IBV_PORT_CM_SUP = 1 << 16
    IBV_PORT_SNMP_TUNNEL_SUP = 1 << 17
    IBV_PORT_REINIT_SUP = 1 << 18
    IBV_PORT_DEVICE_MGMT_SUP = 1 << 19
    IBV_PORT_VENDOR_CLASS_SUP = 1 << 20
    IBV_PORT_DR_NOTICE_SUP = 1 << 21
    IBV_PORT_CAP_MASK_NOTICE_SUP = 1 << 22
    IBV_PORT_BOOT_MGMT_SUP = 1 << 23
    IBV_PORT_LINK_LATENCY_SUP = 1 << 24
    IBV_PORT_CLIENT_REG_SUP = 1 << 25
    IBV_PORT_IP_BASED_GIDS = 1 << 26


class ibv_port_cap_flags2(enum.IntEnum):
    IBV_PORT_SET_NODE_DESC_SUP = 1 << 0
    IBV_PORT_INFO_EXT_SUP = 1 << 1
    IBV_PORT_VIRT_SUP = 1 << 2
    IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP = 1 << 3
    IBV_PORT_LINK_WIDTH_2X_SUP = 1 << 4
    IBV_PORT_LINK_SPEED_HDR_SUP = 1 << 5
    IBV_PORT_LINK_SPEED_NDR_SUP = 1 << 10
    IBV_PORT_LINK_SPEED_XDR_SUP = 1 << 12


class ibv_create_cq_wc_flags(enum.IntEnum):
    IBV_WC_EX_WITH_BYTE_LEN = 1 << 0
    IBV_WC_EX_WITH_IMM = 1 << 1
    IBV_WC_EX_WITH_QP_NUM = 1 << 2
    IBV_WC_EX_WITH_SRC_QP = 1 << 3
    IBV_WC_EX_WITH_SLID = 1 << 4
    IBV_WC_EX_WITH_SL = 1 << 5
    IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7
    IBV_WC_EX_WITH_CVLAN = 1 << 8
    IBV_WC_EX_WITH_FLOW_TAG = 1 << 9
    IBV_WC_EX_WITH_TM_INFO = 1 << 10
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11


IBV_WC_STANDARD_FLAGS: int = (
    ibv_create_cq_wc_flags.IBV_WC_EX_WITH_BYTE_LEN
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_IMM
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_QP_NUM
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_SRC_QP
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_SLID
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_SL
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_DLID_PATH_BITS
)
IBV_CREATE_CQ_SUP_WC_FLAGS: int = (
    IBV_WC_STANDARD_FLAGS
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_CVLAN
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_FLOW_TAG
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_TM_INFO
    | ibv_create_cq_wc_flags.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
)


class ibv_xrcd_init_attr_mask(enum.IntEnum):
    IBV_XRCD_INIT_ATTR_FD = 1 << 0
    IBV_XRCD_INIT_ATTR_OFLAGS = 1 << 1
    IBV_XRCD_INIT_ATTR_RESERVED = 1 << 2


class ibv_rereg_mr_flags(enum.IntEnum):
    IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0
    IBV_REREG_MR_CHANGE_PD = 1 << 1
    IBV_REREG_MR_CHANGE_ACCESS = 1 << 2
    IBV_REREG_MR_FLAGS_SUPPORTED = ((1 << 2) << 1) - 1


class ibv_mr_init_attr_mask(enum.IntEnum):
    IBV_REG_MR_MASK_IOVA = 1 << 0
    IBV_REG_MR_MASK_ADDR = 1 << 1
    IBV_REG_MR_MASK_FD = 1 << 2
    IBV_REG_MR_MASK_FD_OFFSET = 1 << 3
    IBV_REG_MR_MASK_DMAH = 1 << 4
    IBV_REG_MR_MASK_BUF = 1 << 5


class ibv_mw_type(enum.IntEnum):
    IBV_MW_TYPE_1 = 1
    IBV_MW_TYPE_2 = 2


class ibv_rate(enum.IntEnum):
    IBV_RATE_MAX = 0
    IBV_RATE_2_5_GBPS = 2
    IBV_RATE_5_GBPS = 5
    IBV_RATE_10_GBPS = 3
    IBV_RATE_20_GBPS = 6
    IBV_RATE_30_GBPS = 4
    IBV_RATE_40_GBPS = 7
    IBV_RATE_60_GBPS = 8
    IBV_RATE_80_GBPS = 9
    IBV_RATE_120_GBPS = 10
    IBV_RATE_14_GBPS = 11
    IBV_RATE_56_GBPS = 12
    IBV_RATE_112_GBPS = 13
    IBV_RATE_168_GBPS = 14
    IBV_RATE_25_GBPS = 15
    IBV_RATE_100_GBPS = 16
    IBV_RATE_200_GBPS = 17
    IBV_RATE_300_GBPS = 18
    IBV_RATE_28_GBPS = 19
    IBV_RATE_50_GBPS = 20
    IBV_RATE_400_GBPS = 21
    IBV_RATE_600_GBPS = 22
    IBV_RATE_800_GBPS = 23
    IBV_RATE_1200_GBPS = 24


class ibv_srq_attr_mask(enum.IntEnum):
    IBV_SRQ_MAX_WR = 1 << 0
    IBV_SRQ_LIMIT = 1 << 1


class ibv_srq_type(enum.IntEnum):
    IBV_SRQT_BASIC = 0
    IBV_SRQT_XRC = 1
    IBV_SRQT_TM = 2


class ibv_srq_init_attr_mask(enum.IntEnum):
    IBV_SRQ_INIT_ATTR_TYPE = 1 << 0
    IBV_SRQ_INIT_ATTR_PD = 1 << 1
    IBV_SRQ_INIT_ATTR_XRCD = 1 << 2
    IBV_SRQ_INIT_ATTR_CQ = 1 << 3
    IBV_SRQ_INIT_ATTR_TM = 1 << 4
    IBV_SRQ_INIT_ATTR_RESERVED = 1 << 5


class ibv_wq_type(enum.IntEnum):
    IBV_WQT_RQ = 0


class ibv_wq_init_attr_mask(enum.IntEnum):
    IBV_WQ_INIT_ATTR_FLAGS = 1 << 0
    IBV_WQ_INIT_ATTR_RESERVED = 1 << 1


class ibv_wq_flags(enum.IntEnum):
    IBV_WQ_FLAGS_CVLAN_STRIPPING = 1 << 0
    IBV_WQ_FLAGS_SCATTER_FCS = 1 << 1
    IBV_WQ_FLAGS_DELAY_DROP = 1 << 2
    IBV_WQ_FLAGS_PCI_WRITE_END_PADDING = 1 << 3
    IBV_WQ_FLAGS_RESERVED = 1 << 4


class ibv_wq_state(enum.IntEnum):
    IBV_WQS_RESET = 0
    IBV_WQS_RDY = 1
    IBV_WQS_ERR = 2
    IBV_WQS_UNKNOWN = 3


class ibv_wq_attr_mask(enum.IntEnum):
    IBV_WQ_ATTR_STATE = 1 << 0
    IBV_WQ_ATTR_CURR_STATE = 1 << 1
    IBV_WQ_ATTR_FLAGS = 1 << 2
    IBV_WQ_ATTR_RESERVED = 1 << 3


class ibv_ind_table_init_attr_mask(enum.IntEnum):
    IBV_CREATE_IND_TABLE_RESERVED = 1 << 0


class ibv_qp_type(enum.IntEnum):
    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4
    IBV_QPT_RAW_PACKET = 8
    IBV_QPT_XRC_SEND = 9
    IBV_QPT_XRC_RECV = 10
    IBV_QPT_DRIVER = 0xFF


class ibv_qp_init_attr_mask(enum.IntEnum):
    IBV_QP_INIT_ATTR_PD = 1 << 0
    IBV_QP_INIT_ATTR_XRCD = 1 << 1
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3
    IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4
    IBV_QP_INIT_ATTR_RX_HASH = 1 << 5
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6


class ibv_qp_create_flags(enum.IntEnum):
    IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1
    IBV_QP_CREATE_SCATTER_FCS = 1 << 8
    IBV_QP_CREATE_CVLAN_STRIPPING = 1 << 9
    IBV_QP_CREATE_SOURCE_QPN = 1 << 10
    IBV_QP_CREATE_PCI_WRITE_END_PADDING = 1 << 11


class ibv_qp_create_send_ops_flags(enum.IntEnum):
    IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1
    IBV_QP_EX_WITH_SEND = 1 << 2
    IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3
    IBV_QP_EX_WITH_RDMA_READ = 1 << 4
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6
    IBV_QP_EX_WITH_LOCAL_INV = 1 << 7
    IBV_QP_EX_WITH_BIND_MW = 1 << 8
    IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9
    IBV_QP_EX_WITH_TSO = 1 << 10
    IBV_QP_EX_WITH_FLUSH = 1 << 11
    IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12


class ibv_qp_open_attr_mask(enum.IntEnum):
    IBV_QP_OPEN_ATTR_NUM = 1 << 0
    IBV_QP_OPEN_ATTR_XRCD = 1 << 1
    IBV_QP_OPEN_ATTR_CONTEXT = 1 << 2
    IBV_QP_OPEN_ATTR_TYPE = 1 << 3
    IBV_QP_OPEN_ATTR_RESERVED = 1 << 4




class ibv_query_qp_data_in_order_flags(enum.IntEnum):
    IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS = 1 << 0
    IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY = 1 << 1


class ibv_query_qp_data_in_order_caps(enum.IntEnum):
    IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG = 1 << 0
    IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES = 1 << 1


class ibv_mig_state(enum.IntEnum):
    IBV_MIG_MIGRATED = 0
    IBV_MIG_REARM = 1
    IBV_MIG_ARMED = 2


class ibv_wr_opcode(enum.IntEnum):
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_LOCAL_INV = 7
    IBV_WR_BIND_MW = 8
    IBV_WR_SEND_WITH_INV = 9
    IBV_WR_TSO = 10
    IBV_WR_DRIVER1 = 11
    IBV_WR_FLUSH = 14
    IBV_WR_ATOMIC_WRITE = 15


class ibv_send_flags(enum.IntEnum):
    IBV_SEND_FENCE = 1 << 0
    IBV_SEND_SIGNALED = 1 << 1
    IBV_SEND_SOLICITED = 1 << 2
    IBV_SEND_INLINE = 1 << 3
    IBV_SEND_IP_CSUM = 1 << 4


class ibv_placement_type(enum.IntEnum):
    IBV_FLUSH_GLOBAL = 1 << 0
    IBV_FLUSH_PERSISTENT = 1 << 1


class ibv_selectivity_level(enum.IntEnum):
    IBV_FLUSH_RANGE = 0
    IBV_FLUSH_MR = 1


class ibv_ops_wr_opcode(enum.IntEnum):
    IBV_WR_TAG_ADD = 0
    IBV_WR_TAG_DEL = 1
    IBV_WR_TAG_SYNC = 2


class ibv_ops_flags(enum.IntEnum):
    IBV_OPS_SIGNALED = 1 << 0
    IBV_OPS_TM_SYNC = 1 << 1


class ibv_cq_attr_mask(enum.IntEnum):
    IBV_CQ_ATTR_MODERATE = 1 << 0
    IBV_CQ_ATTR_RESERVED = 1 << 1


class ibv_flow_flags(enum.IntEnum):
    # Bit 0 is deprecated and can't be used.
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP = 1 << 1
    IBV_FLOW_ATTR_FLAGS_EGRESS = 1 << 2


class ibv_flow_attr_type(enum.IntEnum):
    IBV_FLOW_ATTR_NORMAL = 0x0
    IBV_FLOW_ATTR_ALL_DEFAULT = 0x1
    IBV_FLOW_ATTR_MC_DEFAULT = 0x2
    IBV_FLOW_ATTR_SNIFFER = 0x3


class ibv_flow_spec_type(enum.IntEnum):
    IBV_FLOW_SPEC_ETH = 0x20
    IBV_FLOW_SPEC_IPV4 = 0x30
    IBV_FLOW_SPEC_IPV6 = 0x31
    IBV_FLOW_SPEC_IPV4_EXT = 0x32
    IBV_FLOW_SPEC_ESP = 0x34
    IBV_FLOW_SPEC_TCP = 0x40
    IBV_FLOW_SPEC_UDP = 0x41
    IBV_FLOW_SPEC_VXLAN_TUNNEL = 0x50
    IBV_FLOW_SPEC_GRE = 0x51
    IBV_FLOW_SPEC_MPLS = 0x60
    IBV_FLOW_SPEC_INNER = 0x100
    IBV_FLOW_SPEC_ACTION_TAG = 0x1000
    IBV_FLOW_SPEC_ACTION_DROP = 0x1001
    IBV_FLOW_SPEC_ACTION_HANDLE = 0x1002
    IBV_FLOW_SPEC_ACTION_COUNT = 0x1003


class ibv_cq_init_attr_mask(enum.IntEnum):
    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1


class ibv_create_cq_attr_flags(enum.IntEnum):
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1


class ibv_qp_attach_comp_cntr_op(enum.IntEnum):
    IBV_QP_ATTACH_COMP_CNTR_OP_SEND = 1 << 0
    IBV_QP_ATTACH_COMP_CNTR_OP_RECV = 1 << 1
    IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ = 1 << 2
    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ = 1 << 3
    IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE = 1 << 4
    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE = 1 << 5


class ibv_comp_cntr_type(enum.IntEnum):
    IBV_COMP_CNTR_TYPE_WRS = 0
    IBV_COMP_CNTR_TYPE_BYTES = 1


class ibv_parent_domain_init_attr_mask(enum.IntEnum):
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1 << 0
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC = 1 << 2


class ibv_tph_mem_type(enum.IntEnum):
    IBV_TPH_MEM_TYPE_VM = 0
    IBV_TPH_MEM_TYPE_PM = 1


class ibv_dmah_init_attr_mask(enum.IntEnum):
    IBV_DMAH_INIT_ATTR_MASK_CPU_ID = 1 << 0
    IBV_DMAH_INIT_ATTR_MASK_PH = 1 << 1
    IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE = 1 << 2


class ibv_counter_description(enum.IntEnum):
    IBV_COUNTER_PACKETS = 0
    IBV_COUNTER_BYTES = 1


class ibv_read_counters_flags(enum.IntEnum):
    IBV_READ_COUNTERS_ATTR_PREFER_CACHED = 1 << 0


class ibv_values_mask(enum.IntEnum):
    IBV_VALUES_MASK_RAW_CLOCK = 1 << 0
    IBV_VALUES_MASK_RESERVED = 1 << 1


class ibv_rereg_mr_err_code(enum.IntEnum):
    IBV_REREG_MR_ERR_INPUT = -1
    IBV_REREG_MR_ERR_DONT_FORK_NEW = -2
    IBV_REREG_MR_ERR_DO_FORK_OLD = -3
    IBV_REREG_MR_ERR_CMD = -4
    IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW = -5


# verbs.h #defines, 64-bit device_cap_flags_ex bits that don't fit the 32-bit enum ibv_device_cap_flags.
IBV_DEVICE_RAW_SCATTER_FCS = 1 << 34
IBV_DEVICE_PCI_WRITE_END_PADDING = 1 << 36
IBV_DEVICE_CC_DMA_BOUNCE = 1 << 41
# verbs.h: IBV_ALLOCATOR_USE_DEFAULT is ((void *)-1); pyverbs exposes it cast to a 64-bit size_t.
_IBV_ALLOCATOR_USE_DEFAULT = (1 << 64) - 1

# ---------------------------------------------------------------------------------------------------------------------
# libibverbs/verbs_api.h (values from kernel-headers/rdma/ib_user_ioctl_verbs.h)
# ---------------------------------------------------------------------------------------------------------------------

IBV_ADVISE_MR_ADVICE_PREFETCH = 0
IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1
IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2
IBV_ADVISE_MR_FLAG_FLUSH = 1 << 0
IBV_QPF_GRH_REQUIRED = 1 << 0

# pyverbs.libibverbs_enums' underscored Python copies of the #defines above.
_IBV_DEVICE_RAW_SCATTER_FCS = IBV_DEVICE_RAW_SCATTER_FCS
_IBV_DEVICE_PCI_WRITE_END_PADDING = IBV_DEVICE_PCI_WRITE_END_PADDING
_IBV_DEVICE_CC_DMA_BOUNCE = IBV_DEVICE_CC_DMA_BOUNCE
_IBV_ADVISE_MR_ADVICE_PREFETCH = IBV_ADVISE_MR_ADVICE_PREFETCH
_IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
_IBV_ADVISE_MR_FLAG_FLUSH = IBV_ADVISE_MR_FLAG_FLUSH
_IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT

# ---------------------------------------------------------------------------------------------------------------------
# libibverbs/driver.h and libibverbs/tm_types.h
# ---------------------------------------------------------------------------------------------------------------------


class ibv_gid_type_sysfs(enum.IntEnum):
    """What pyverbs' ``Context.query_gid_type()`` returns (libibverbs' ``ibv_query_gid_type()``)."""

    IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0
    IBV_GID_TYPE_SYSFS_ROCE_V2 = 1


class ibv_tmh_op(enum.IntEnum):
    IBV_TMH_NO_TAG = 0
    IBV_TMH_RNDV = 1
    IBV_TMH_FIN = 2
    IBV_TMH_EAGER = 3


# ---------------------------------------------------------------------------------------------------------------------
# libibverbs/enum_strs.c
# ---------------------------------------------------------------------------------------------------------------------

_NODE_TYPE_STR: dict[int, str] = {
    ibv_node_type.IBV_NODE_CA: "InfiniBand channel adapter",
    ibv_node_type.IBV_NODE_SWITCH: "InfiniBand switch",
    ibv_node_type.IBV_NODE_ROUTER: "InfiniBand router",
    ibv_node_type.IBV_NODE_RNIC: "iWARP NIC",
    ibv_node_type.IBV_NODE_USNIC: "usNIC",
    ibv_node_type.IBV_NODE_USNIC_UDP: "usNIC UDP",
    ibv_node_type.IBV_NODE_UNSPECIFIED: "unspecified",
}

_PORT_STATE_STR: dict[int, str] = {
    ibv_port_state.IBV_PORT_NOP: "no state change (NOP)",
    ibv_port_state.IBV_PORT_DOWN: "down",
    ibv_port_state.IBV_PORT_INIT: "init",
    ibv_port_state.IBV_PORT_ARMED: "armed",
    ibv_port_state.IBV_PORT_ACTIVE: "active",
    ibv_port_state.IBV_PORT_ACTIVE_DEFER: "active defer",
}

_EVENT_TYPE_STR: dict[int, str] = {
    ibv_event_type.IBV_EVENT_CQ_ERR: "CQ error",
    ibv_event_type.IBV_EVENT_QP_FATAL: "local work queue catastrophic error",
    ibv_event_type.IBV_EVENT_QP_REQ_ERR: "invalid request local work queue error",
    ibv_event_type.IBV_EVENT_QP_ACCESS_ERR: "local access violation work queue error",
    ibv_event_type.IBV_EVENT_COMM_EST: "communication established",
    ibv_event_type.IBV_EVENT_SQ_DRAINED: "send queue drained",
    ibv_event_type.IBV_EVENT_PATH_MIG: "path migrated",
    ibv_event_type.IBV_EVENT_PATH_MIG_ERR: "path migration request error",
    ibv_event_type.IBV_EVENT_DEVICE_FATAL: "local catastrophic error",
    ibv_event_type.IBV_EVENT_PORT_ACTIVE: "port active",
    ibv_event_type.IBV_EVENT_PORT_ERR: "port error",
    ibv_event_type.IBV_EVENT_LID_CHANGE: "LID change",
    ibv_event_type.IBV_EVENT_PKEY_CHANGE: "P_Key change",
    ibv_event_type.IBV_EVENT_SM_CHANGE: "SM change",
    ibv_event_type.IBV_EVENT_SRQ_ERR: "SRQ catastrophic error",
    ibv_event_type.IBV_EVENT_SRQ_LIMIT_REACHED: "SRQ limit reached",
    ibv_event_type.IBV_EVENT_QP_LAST_WQE_REACHED: "last WQE reached",
    ibv_event_type.IBV_EVENT_CLIENT_REREGISTER: "client reregistration",
    ibv_event_type.IBV_EVENT_GID_CHANGE: "GID table change",
    ibv_event_type.IBV_EVENT_WQ_FATAL: "WQ fatal",
    ibv_event_type.IBV_EVENT_DEVICE_SPEED_CHANGE: "Device link speed change",
}

_WC_STATUS_STR: dict[int, str] = {
    ibv_wc_status.IBV_WC_SUCCESS: "success",
    ibv_wc_status.IBV_WC_LOC_LEN_ERR: "local length error",
    ibv_wc_status.IBV_WC_LOC_QP_OP_ERR: "local QP operation error",
    ibv_wc_status.IBV_WC_LOC_EEC_OP_ERR: "local EE context operation error",
    ibv_wc_status.IBV_WC_LOC_PROT_ERR: "local protection error",
    ibv_wc_status.IBV_WC_WR_FLUSH_ERR: "Work Request Flushed Error",
    ibv_wc_status.IBV_WC_MW_BIND_ERR: "memory management operation error",
    ibv_wc_status.IBV_WC_BAD_RESP_ERR: "bad response error",
    ibv_wc_status.IBV_WC_LOC_ACCESS_ERR: "local access error",
    ibv_wc_status.IBV_WC_REM_INV_REQ_ERR: "remote invalid request error",
    ibv_wc_status.IBV_WC_REM_ACCESS_ERR: "remote access error",
    ibv_wc_status.IBV_WC_REM_OP_ERR: "remote operation error",
    ibv_wc_status.IBV_WC_RETRY_EXC_ERR: "transport retry counter exceeded",
    ibv_wc_status.IBV_WC_RNR_RETRY_EXC_ERR: "RNR retry counter exceeded",
    ibv_wc_status.IBV_WC_LOC_RDD_VIOL_ERR: "local RDD violation error",
    ibv_wc_status.IBV_WC_REM_INV_RD_REQ_ERR: "remote invalid RD request",
    ibv_wc_status.IBV_WC_REM_ABORT_ERR: "aborted error",
    ibv_wc_status.IBV_WC_INV_EECN_ERR: "invalid EE context number",
    ibv_wc_status.IBV_WC_INV_EEC_STATE_ERR: "invalid EE context state",
    ibv_wc_status.IBV_WC_FATAL_ERR: "fatal error",
    ibv_wc_status.IBV_WC_RESP_TIMEOUT_ERR: "response timeout error",
    ibv_wc_status.IBV_WC_GENERAL_ERR: "general error",
    ibv_wc_status.IBV_WC_TM_ERR: "TM error",
    ibv_wc_status.IBV_WC_TM_RNDV_INCOMPLETE: "TM software rendezvous",
}

_WR_OPCODE_STR: dict[int, str] = {
    ibv_wr_opcode.IBV_WR_RDMA_WRITE: "rdma-write",
    ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM: "rdma-write-with-imm",
    ibv_wr_opcode.IBV_WR_SEND: "send",
    ibv_wr_opcode.IBV_WR_SEND_WITH_IMM: "send-with-imm",
    ibv_wr_opcode.IBV_WR_RDMA_READ: "rdma-read",
    ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP: "atomic-cmp-and-swp",
    ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD: "atomic-fetch-and-add",
    ibv_wr_opcode.IBV_WR_LOCAL_INV: "local-inv",
    ibv_wr_opcode.IBV_WR_BIND_MW: "bind-mw",
    ibv_wr_opcode.IBV_WR_SEND_WITH_INV: "send-with-inv",
    ibv_wr_opcode.IBV_WR_TSO: "tso",
    ibv_wr_opcode.IBV_WR_DRIVER1: "driver1",
    ibv_wr_opcode.IBV_WR_FLUSH: "flush",
    ibv_wr_opcode.IBV_WR_ATOMIC_WRITE: "atomic-write",
}


def ibv_node_type_str(node_type: int) -> str:
    """libibverbs' ``ibv_node_type_str()``: ``"InfiniBand channel adapter"``, ..., ``"unknown"`` out of range."""
    return _NODE_TYPE_STR.get(int(node_type), "unknown")


def ibv_port_state_str(port_state: int) -> str:
    """libibverbs' ``ibv_port_state_str()``: ``"down"``, ``"active"``, ..., ``"unknown"`` out of range."""
    return _PORT_STATE_STR.get(int(port_state), "unknown")


def ibv_event_type_str(event: int) -> str:
    """libibverbs' ``ibv_event_type_str()``: ``"CQ error"``, ..., ``"unknown"`` out of range."""
    return _EVENT_TYPE_STR.get(int(event), "unknown")


def ibv_wc_status_str(status: int) -> str:
    """libibverbs' ``ibv_wc_status_str()``: ``"success"``, ``"local length error"``, ..., ``"unknown"`` otherwise."""
    return _WC_STATUS_STR.get(int(status), "unknown")


def ibv_wr_opcode_str(opcode: int) -> str:
    """libibverbs' ``ibv_wr_opcode_str()``: ``"rdma-write"``, ..., ``"unknown"`` otherwise.

    C returns NULL for 12 and 13, the holes in its table below ``IBV_WR_FLUSH``; here they are ``"unknown"`` too.
    """
    return _WR_OPCODE_STR.get(int(opcode), "unknown")


# ---------------------------------------------------------------------------------------------------------------------
# Flat names, as the old ``pyverbs.enums`` gave them: ``e.IBV_QPT_RC``. They are made at import time, so a static
# checker does not see them; pyroce's own code should write the class-qualified name (``ibv_qp_type.IBV_QPT_RC``).
# ---------------------------------------------------------------------------------------------------------------------

_ENUM_CLASSES: tuple[type[enum.IntEnum], ...] = tuple(
    obj
    for name, obj in list(globals().items())
    if name.startswith("ibv_") and isinstance(obj, type) and issubclass(obj, enum.IntEnum)
)
for _cls in _ENUM_CLASSES:
    globals().update(_cls.__members__)
del _cls
