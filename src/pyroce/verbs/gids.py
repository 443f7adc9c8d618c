"""The port's GID table and pyverbs' ``GIDEntry`` (``device.pyx``).

Linux rxe builds a netdev's table as the kernel's ``roce_gid_mgmt`` does, one RoCE v1 and one
RoCE v2 entry per address: the default link-local ``fe80::`` GID (from the MAC) at 0 (v1) and
1 (v2), then for each IPv4 address ``::ffff:a.b.c.d`` v1 and v2 (2 and 3), and for each IPv6
address its v1 and v2 entries. With IPv6 off the default GIDs are left out, and the IPv4 GID's
v2 entry is index 1 (the rxe of this project's captures, ``ibv_rc_pingpong -g 1``).

pyroce's link is one UDP socket on one address (``PYROCE_ADDR``, IPv4 or IPv6): it sends and
receives RoCE v2 over that address's family only (no RoCE v1 Ethernet frames), so its table
lists only the GID it can serve, RoCE v2 at index 0 (``::ffff:a.b.c.d`` for an IPv4 address,
the address itself for IPv6), and ``gid_tbl_len`` is 1. Listing rxe's other entries would
hand peers GIDs that lead nowhere. GID indices are local: each
side of a connection passes its own (pyroce ``-g 0`` against rxe ``-g 1`` or ``-g 3``).
"""

from __future__ import annotations

import errno
import sys

from pyroce.verbs.addr import GID
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.enums import ibv_gid_type, ibv_gid_type_sysfs
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

GID_TYPE_SYSFS = {ibv_gid_type.IBV_GID_TYPE_ROCE_V1: ibv_gid_type_sysfs.IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
                  ibv_gid_type.IBV_GID_TYPE_ROCE_V2: ibv_gid_type_sysfs.IBV_GID_TYPE_SYSFS_ROCE_V2}  # fmt: skip


class GIDEntry(PyverbsObject):
    """``struct ibv_gid_entry``: the GID's two halves are ``__be64`` as C reads them on this
    host (pyverbs' ``gid_subnet_prefix``/``gid_interface_id``), ``gid_type`` is
    ``ibv_gid_type`` (IBV_GID_TYPE_ROCE_V2 = 2, not the sysfs numbering)."""

    def __init__(self, subnet_prefix: int = 0, interface_id: int = 0, gid_index: int = 0, port_num: int = 0,
                 gid_type: int = 0, ndev_ifindex: int = 0) -> None:  # fmt: skip
        super().__init__()
        self.gid_subnet_prefix = subnet_prefix
        self.gid_interface_id = interface_id
        self.gid_index = gid_index
        self.port_num = port_num
        self.gid_type = gid_type
        self.ndev_ifindex = ndev_ifindex

    @classmethod
    def of(cls, gid: GID, gid_index: int, port_num: int, gid_type: int, ndev_ifindex: int) -> GIDEntry:
        halves = (int.from_bytes(gid.raw[:8], sys.byteorder), int.from_bytes(gid.raw[8:], sys.byteorder))
        return cls(*halves, gid_index, port_num, gid_type, ndev_ifindex)

    def gid_str(self) -> str:
        """The GID as pyverbs' ``utils.gid_str`` prints it: eight groups of four hex digits."""
        raw = self.gid_subnet_prefix.to_bytes(8, sys.byteorder) + self.gid_interface_id.to_bytes(8, sys.byteorder)
        return GID(raw).gid

    def __str__(self) -> str:
        rows = (("GID", self.gid_str()), ("GID Index", self.gid_index), ("Port number", self.port_num),
                ("GID type", translate_gid_type(self.gid_type)), ("Ndev ifindex", self.ndev_ifindex))  # fmt: skip
        return "".join(f"{name:<24}: {value!s:<20}\n" for name, value in rows)


def translate_gid_type(gid_type: int) -> str:
    """pyverbs' names: ``RoCEv2`` for IBV_GID_TYPE_ROCE_V2."""
    names = {ibv_gid_type.IBV_GID_TYPE_IB: "IB", ibv_gid_type.IBV_GID_TYPE_ROCE_V1: "RoCEv1",
             ibv_gid_type.IBV_GID_TYPE_ROCE_V2: "RoCEv2"}  # fmt: skip
    return names.get(gid_type, f"Unknown gid_type ({gid_type})")


class GidTable:
    """A port's GIDs in index order, each with its ``ibv_gid_type``; indices past the table
    are EINVAL, as the kernel answers for an index at or past ``gid_tbl_len``."""

    def __init__(self, port_num: int, entries: tuple[tuple[GID, ibv_gid_type], ...], ndev_ifindex: int) -> None:
        self.port_num = port_num
        self.entries = entries
        self.ndev_ifindex = ndev_ifindex

    def __len__(self) -> int:
        return len(self.entries)

    def row(self, index: int) -> tuple[GID, ibv_gid_type]:
        if not 0 <= index < len(self.entries):
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {self.port_num}", errno.EINVAL)
        return self.entries[index]

    def entry(self, index: int) -> GIDEntry:
        gid, gid_type = self.row(index)
        return GIDEntry.of(gid, index, self.port_num, gid_type, self.ndev_ifindex)
