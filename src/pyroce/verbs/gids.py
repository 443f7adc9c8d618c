"""The port's GID table and pyverbs' ``GIDEntry`` (``device.pyx``).

The table is the one Linux builds for a RoCE port (the kernel's ``roce_gid_mgmt``, as mlx5
shows it and as rdma-core's pyverbs documentation, perftest how-tos and UCX/NCCL guides
hard-code it), ``pyroce.ib.addressing.gid_table``: 0 and 1 the default link-local GID
(``fe80::`` and the EUI-64 of the port's MAC) as RoCE v1 and v2, 2 and 3 the address's GID
(``::ffff:a.b.c.d``, or the IPv6 address) as RoCE v1 and v2. Index 3 is RoCE v2 over the
device's address, the one to give a peer that is not pyroce (Linux rxe's IPv4 GID is at 1).

pyroce's link is one UDP socket on one address, so every entry's traffic leaves as RoCE v2
from that address: RoCE v1 is Ethernet frames (ethertype 0x8915), which a UDP device cannot
send, and a v1 entry is listed so that indices are where Linux puts them, its QPs and AHs
speaking RoCE v2 as a v2 entry's do (a peer that is not pyroce and is told a v1 entry's GID
answers with RoCE v1, which does not arrive: give it index 3). The link-local GID reaches the
device of an IPv4 address (its MAC, hence its GID, is made from the address), so pyroce peers
may exchange any index (``ibv_rc_pingpong -g 0`` on both sides); on an IPv6 device it reaches
nothing. A datagram's receive names the v2 entry of the GID it was sent to (``ah.py``), as
rdma-core's ``ibv_init_ah_from_wc`` picks by the header's RoCE version.
"""

from __future__ import annotations

import errno
import sys

from pyroce.ib.addressing import GID_TABLE_LEN, ROCE_V1, ROCE_V2, gid_table
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
    """A port's table of ``size`` GIDs (``gid_tbl_len``): its valid ones in index order, each
    with its ``ibv_gid_type``, then empty indices, as Linux's tables have (rxe 1024 entries,
    mlx5 255; programs skip the zero GIDs, and rdma-core's ``test_query_gid_ex_bad_flow`` needs
    an empty one). An empty index is ENODATA and one past the table EINVAL, as the kernel
    answers ``ibv_query_gid_ex``."""

    def __init__(self, port_num: int, entries: tuple[tuple[GID, ibv_gid_type], ...], ndev_ifindex: int,
                 size: int = GID_TABLE_LEN) -> None:  # fmt: skip
        self.port_num = port_num
        self.entries = entries
        self.ndev_ifindex = ndev_ifindex
        self.size = size

    def __len__(self) -> int:
        return self.size

    def row(self, index: int) -> tuple[GID, ibv_gid_type]:
        if not 0 <= index < self.size:
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {self.port_num}", errno.EINVAL)
        if index >= len(self.entries):
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {self.port_num}: empty", errno.ENODATA)
        return self.entries[index]

    def gid(self, index: int) -> GID:
        """``ibv_query_gid``: an empty index reads as the zero GID, as libibverbs keeps it."""
        if len(self.entries) <= index < self.size:
            return GID(bytes(16))
        return self.row(index)[0]

    def entry(self, index: int) -> GIDEntry:
        gid, gid_type = self.row(index)
        return GIDEntry.of(gid, index, self.port_num, gid_type, self.ndev_ifindex)

    def valid(self, index: int) -> bool:
        """Whether ``index`` holds a GID (one a QP's or an AH's ``sgid_index`` may name)."""
        return 0 <= index < len(self.entries)


def roce_gid_table(port_num: int, address: str, ndev_ifindex: int) -> GidTable:
    """Port ``port_num``'s table for a device on ``address`` (``pyroce.ib.addressing.gid_table``)."""
    types = {ROCE_V1: ibv_gid_type.IBV_GID_TYPE_ROCE_V1, ROCE_V2: ibv_gid_type.IBV_GID_TYPE_ROCE_V2}
    entries = tuple((GID(gid), types[version]) for gid, version in gid_table(address))
    return GidTable(port_num, entries, ndev_ifindex)
