"""How RoCEv2 names a port: its GID is its IP address, its GUID the GID's low half.

One rule each, for the verbs (``query_gid``, ``query_device``) and the connection manager
(the GIDs and CA GUID its MADs carry) alike.
"""

from __future__ import annotations

import ipaddress


def roce_gid(address: str) -> bytes:
    """RoCEv2's GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6."""
    ip = ipaddress.ip_address(address)
    return ip.packed if ip.version == 6 else ipaddress.IPv6Address(f"::ffff:{address}").packed


def node_guid_of(gid: bytes) -> int:
    """The node (and system image) GUID of a device whose port has ``gid``."""
    return int.from_bytes(gid[8:], "big")
