"""librdmacm's enums as pyverbs names them (``pyverbs.cm_enums``, v44, and ``pyverbs.librdmacm_enums``,
later): ``IntEnum`` classes with librdmacm's C names, and every member at module level
(``ce.RDMA_PS_TCP``), as ``pyroce.verbs.enums`` does for libibverbs. The values are the NIC's
(``pyroce.ib.cm``), renamed; the ``RAI_*`` flags and ``RDMA_OPTION_*`` names are plain ints, as
pyverbs has them (anonymous C enums).
"""

from __future__ import annotations

import enum

from pyroce.ib.cm import UDP_QKEY, CmEventType, CmOption, McJoinFlag, PortSpace

rdma_cm_event_type = enum.IntEnum(  # type: ignore[misc]
    "rdma_cm_event_type", {f"RDMA_CM_EVENT_{member.name}": member.value for member in CmEventType}
)
rdma_port_space = enum.IntEnum(  # type: ignore[misc]
    "rdma_port_space", {f"RDMA_PS_{member.name}": member.value for member in PortSpace}
)


class rdma_cm_join_mc_attr_mask(enum.IntEnum):
    RDMA_CM_JOIN_MC_ATTR_ADDRESS = 1 << 0
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = 1 << 1
    RDMA_CM_JOIN_MC_ATTR_RESERVED = 1 << 2


rdma_cm_mc_join_flags = enum.IntEnum(  # type: ignore[misc]
    "rdma_cm_mc_join_flags",
    {**{f"RDMA_MC_JOIN_FLAG_{member.name}": member.value for member in McJoinFlag},
     "RDMA_MC_JOIN_FLAG_RESERVED": len(McJoinFlag)},
)  # fmt: skip


# rdma_getaddrinfo's hint flags (rdma_cma.h)
RAI_PASSIVE = 0x1
RAI_NUMERICHOST = 0x2
RAI_NOROUTE = 0x4
RAI_FAMILY = 0x8

# rdma_set_option's levels and names
RDMA_OPTION_ID = int(CmOption.LEVEL_ID)
RDMA_OPTION_IB = int(CmOption.LEVEL_IB)
RDMA_OPTION_ID_TOS = int(CmOption.ID_TOS)
RDMA_OPTION_ID_REUSEADDR = int(CmOption.ID_REUSEADDR)
RDMA_OPTION_ID_AFONLY = int(CmOption.ID_AFONLY)
RDMA_OPTION_ID_ACK_TIMEOUT = int(CmOption.ID_ACK_TIMEOUT)
RDMA_OPTION_IB_PATH = int(CmOption.IB_PATH)

RDMA_UDP_QKEY = UDP_QKEY  # the Q_Key of RDMA_PS_UDP ids' QPs (rdma_post_ud_send sends with it)
RDMA_MAX_RESP_RES = 0xFF  # a ConnParam's "as many as the device allows"
RDMA_MAX_INIT_DEPTH = 0xFF

_EVENT_STR = {member.value: member.name for member in rdma_cm_event_type}


def rdma_event_str(event: int) -> str:
    """librdmacm's ``rdma_event_str``: ``"RDMA_CM_EVENT_ESTABLISHED"``, or ``"UNKNOWN EVENT"``."""
    return _EVENT_STR.get(int(event), "UNKNOWN EVENT")


for _cls in (rdma_cm_event_type, rdma_port_space, rdma_cm_join_mc_attr_mask, rdma_cm_mc_join_flags):
    globals().update(_cls.__members__)
del _cls
