"""Multicast groups of rdma_cm ids, as Linux's rdma_cm joins them over RoCE.

RoCE has no subnet administrator to ask (``cma_iboe_join_multicast``): a join is granted at
once and its MULTICAST_JOIN event says how to reach the group. The group's GID is its IP
address as a RoCEv2 GID (``cma_iboe_set_mgid``: IPv4 mapped, IPv6 as is), its QPN the
multicast one, its Q_Key the id's (rdma_cm's for RDMA_PS_UDP), its hop limit 64 (the
IPv6 default Linux gives RoCEv2). The CM touches no QP: librdmacm attaches the id's QP to the
group when it reads the event (``ucma_process_join``), unless it joined send-only, and
detaches it before it leaves.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import TYPE_CHECKING

from pyroce.cm.errors import CmError
from pyroce.cm.records import AhValues, UdParam
from pyroce.ib.addressing import is_multicast_gid, roce_gid
from pyroce.ib.cm import McJoinFlag
from pyroce.wire.bth import MULTICAST_QPN

if TYPE_CHECKING:
    from pyroce.cm.ids import CmId

GROUP_HOP_LIMIT = 64  # IPV6_DEFAULT_HOPLIMIT: the hop limit of a RoCEv2 group's AH


class McGroup:
    """One join of an id (ucma's ``ucma_multicast`` and rdma_cm's ``cma_multicast``): what it
    joined, how, the caller's context (librdmacm's uid of the join), and how many of its events
    were taken (``LEAVE_MCAST`` answers it). Drivers name it by handle; ``RdmaCm`` changes it."""

    def __init__(self, cm_id: CmId, address: str, join_flags: McJoinFlag, context: int) -> None:
        self.cm_id = cm_id
        self.address = address
        self.mgid = roce_gid(address)
        self.join_flags = join_flags
        self.context = context
        self.events_reported = 0
        self.destroyed = False  # left, or its id destroyed

    def joined(self) -> UdParam:
        """The MULTICAST_JOIN event's ``ud``: the AH to the group, its QPN and Q_Key."""
        ah = AhValues(self.mgid, hop_limit=GROUP_HOP_LIMIT)
        return UdParam(b"", ah, MULTICAST_QPN, self.cm_id.qkey)

    def __repr__(self) -> str:
        return f"<McGroup {self.address} {self.join_flags.name}{' left' if self.destroyed else ''}>"


def group_address(address: str, join_flags: int) -> tuple[str, McJoinFlag]:
    """The group's address and join flags, checked as ucma and rdma_cm check them: EINVAL for
    flags other than FULLMEMBER or SENDONLY_FULLMEMBER, for an address that is not IP, and for
    one that is not multicast (Linux's RoCE join takes any address but the unspecified one, and
    the QP's attach then fails with EINVAL: pyroce says so at once)."""
    try:
        flags = McJoinFlag(join_flags)
    except ValueError:
        raise CmError(errno.EINVAL, f"join flags {join_flags} are not FULLMEMBER or SENDONLY_FULLMEMBER") from None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise CmError(errno.EINVAL, f"{address!r} is not an IP address") from None
    if not is_multicast_gid(roce_gid(str(ip))):
        raise CmError(errno.EINVAL, f"{ip} is not a multicast address")
    return str(ip), flags
