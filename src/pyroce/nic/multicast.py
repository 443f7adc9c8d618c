"""The NIC's multicast groups (IBA 10.5, 11.3.1; Linux rxe's ``rxe_mcast.c``): which UD QPs are
attached to which group, and the link's memberships that bring the groups' datagrams in.

A group is its MGID: an IPv4-mapped GID of 224.0.0.0/4 or an IPv6 multicast GID, whose IP
address is where its datagrams go (``Port.route``). The QPs attached to each MGID are the
demultiplexer's ``groups`` (``transport.demux``: a datagram to QP 0xFFFFFF at that address goes
to each of them); the first QP attached to a group joins its address on the link and makes the
port deliver the device's own sends to it (``Port.joined``), the last one detached leaves it.
The rules and limits are rxe's (its errors are EINVAL: here ``ValueError``): UD QPs only, a
multicast GID, at most ``MAX_MCAST_GRP`` groups and ``MAX_MCAST_QP_ATTACH`` QPs in a group (so
never more than ``MAX_TOTAL_MCAST_QP_ATTACH``, their product, in all); attaching twice is one
attachment, detaching what is not attached is refused. A group the host will not let the link join (no descriptor
left) still serves this device's own QPs, and ``mcast_join_errors`` counts it.
"""

from __future__ import annotations

from collections import Counter

from pyroce.ib.addressing import is_multicast_gid
from pyroce.ib.limits import MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH
from pyroce.nic.port import Port
from pyroce.nic.queues import HwQp
from pyroce.wire.opcodes import Transport


class Multicast:
    """The device's groups: ``groups`` (MGID -> the QPNs attached, in attach order) is the
    demultiplexer's own table, so a datagram finds the members this object keeps."""

    def __init__(self, groups: dict[bytes, list[int]], port: Port, counters: Counter[str]) -> None:
        self.groups = groups
        self._port = port
        self._counters = counters
        self._addresses: dict[bytes, str] = {}  # MGID -> its IP address, for the groups that exist

    def attach(self, qp: HwQp, mgid: bytes) -> None:
        """Attach the QP to the group ``mgid`` (ValueError: refused, with why)."""
        if qp.rc.config.transport is not Transport.UD:
            raise ValueError(f"QP 0x{qp.qpn:x} is {qp.rc.config.transport.name}: only UD QPs join multicast groups")
        if len(mgid) != 16 or not is_multicast_gid(mgid):
            raise ValueError(f"GID {mgid.hex()} is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100)")
        members = self.groups.get(mgid)
        if members is not None and qp.qpn in members:
            return  # attached already: nothing to do, as rxe
        if members is None:
            self._create(mgid)
        elif len(members) >= MAX_MCAST_QP_ATTACH:
            raise ValueError(f"multicast group {mgid.hex()} has {MAX_MCAST_QP_ATTACH} QPs attached, its most")
        self.groups[mgid].append(qp.qpn)

    def _create(self, mgid: bytes) -> None:
        if len(self.groups) >= MAX_MCAST_GRP:
            raise ValueError(f"the device has {MAX_MCAST_GRP} multicast groups, its most")
        address = self._port.route(mgid)
        if address is None:
            raise ValueError(f"multicast group {mgid.hex()} is not reachable on this link ({self._port.address})")
        try:
            self._port.link.join(address)
        except OSError:
            self._counters["mcast_join_errors"] += 1  # its datagrams from other hosts are not heard
        self.groups[mgid] = []
        self._addresses[mgid] = address
        self._port.joined.add(address)

    def detach(self, qpn: int, mgid: bytes) -> None:
        """Detach the QP from the group (ValueError if it is not attached to it)."""
        members = self.groups.get(mgid)
        if members is None or qpn not in members:
            raise ValueError(f"QP 0x{qpn:x} is not attached to multicast group {mgid.hex()}")
        members.remove(qpn)
        if not members:
            del self.groups[mgid]
            address = self._addresses.pop(mgid)
            self._port.joined.discard(address)
            self._port.link.leave(address)

    def detach_all(self, qpn: int) -> None:
        """The QP is destroyed: it leaves every group it was attached to."""
        for mgid in [mgid for mgid, members in self.groups.items() if qpn in members]:
            self.detach(qpn, mgid)
