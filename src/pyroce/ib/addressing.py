"""How RoCEv2 names a port: GIDs from its IP address and its MAC, its GUID the MAC's EUI-64.

One rule each, for the verbs (``query_gid``, ``query_device``) and the connection manager
(the GIDs and CA GUID its MADs carry) alike.
"""

from __future__ import annotations

import ipaddress

IPV4_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:0:0/96


def roce_gid(address: str) -> bytes:
    """RoCEv2's GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6."""
    return gid_of_packed(ipaddress.ip_address(address).packed)


def gid_of_packed(packed: bytes) -> bytes:
    """``roce_gid`` of an address as an IP header carries it (4 or 16 bytes)."""
    return IPV4_MAPPED + packed if len(packed) == 4 else bytes(packed)


def is_multicast_gid(gid: bytes) -> bool:
    """Whether a GID names a multicast group (the kernel's ``rdma_is_multicast_addr``): an IPv6
    multicast address (first byte 0xff), or an IPv4-mapped one of 224.0.0.0/4."""
    return gid[:1] == b"\xff" or (gid[:12] == IPV4_MAPPED and gid[12] & 0xF0 == 0xE0)


def node_guid_of(address: str) -> int:
    """The node (and system image) GUID of the device on ``address``: the EUI-64 of its port's
    MAC, as rxe and mlx5 make it (the interface ID of the default GID, ``link_local_gid``)."""
    return int.from_bytes(link_local_gid(address)[8:], "big")


# The GID table as Linux builds it for a RoCE port (the kernel's roce_gid_mgmt, what mlx5 shows
# and tutorials hard-code): the default link-local GID, then the address's GID, each as a RoCE v1
# and a RoCE v2 entry. ``ROCE_V2_INDEX`` is the address's RoCE v2 GID, the one a connection to
# the address uses (rdma_cm's AH, ``ibv_rc_pingpong -g 3``).
ROCE_V1, ROCE_V2 = 1, 2
ROCE_V2_INDEX = 3
GID_TABLE_LEN = 16  # gid_tbl_len: those four, then empty entries (rxe has 1024, mlx5 255)
_LINK_LOCAL_PREFIX = b"\xfe\x80" + bytes(6)


def mac_of(address: str) -> bytes:
    """The port's MAC. pyroce's port has no Ethernet interface of its own; it takes the locally
    administered ``02:00:a:b:c:d`` of its IPv4 address (the last 32 bits of an IPv6 one): the MAC
    its default GID is made from, and the one its frames carry where a link needs whole frames.
    A multicast address's is Ethernet's for the group (``01:00:5e`` and its low 23 bits for IPv4,
    RFC 1112; ``33:33`` and its last 32 bits for IPv6, RFC 2464), as rxe's ``ip_eth_mc_map``."""
    ip = ipaddress.ip_address(address)
    if ip.is_multicast:
        packed = ip.packed
        if ip.version == 4:
            return b"\x01\x00\x5e" + bytes([packed[1] & 0x7F]) + packed[2:]
        return b"\x33\x33" + packed[-4:]
    return b"\x02\x00" + ip.packed[-4:]


def link_local_gid(address: str) -> bytes:
    """The default GID: ``fe80::/64`` and the EUI-64 of the port's MAC (``mac_of``), so on an
    IPv4 device the GID names the address (``ipv4_of_link_local``)."""
    mac = mac_of(address)
    return _LINK_LOCAL_PREFIX + bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:]


def ipv4_of_link_local(gid: bytes) -> str | None:
    """The IPv4 address whose device's default GID is ``gid`` (``link_local_gid``), else None."""
    if gid[:10] != _LINK_LOCAL_PREFIX + bytes(2) or gid[11:13] != b"\xff\xfe":
        return None
    return ".".join(str(byte) for byte in (gid[10], *gid[13:16]))


def gid_table(address: str) -> tuple[tuple[bytes, int], ...]:
    """Port 1's GIDs in index order, each with its RoCE version (``ROCE_V1``/``ROCE_V2``)."""
    default, own = link_local_gid(address), roce_gid(address)
    return ((default, ROCE_V1), (default, ROCE_V2), (own, ROCE_V1), (own, ROCE_V2))
