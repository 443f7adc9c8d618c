"""Addresses: ``GID``, ``GlobalRoute`` and ``AHAttr`` (pyverbs ``addr.pyx``).

On RoCEv2 a GID is an IPv6 address; an IPv4 port's GID is the IPv4-mapped ``::ffff:a.b.c.d``.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable

from pyroce.ib.addressing import roce_gid
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError


class GID:
    """A 16-byte GID, made from its text form (``"::ffff:10.0.0.1"``) or raw bytes."""

    def __init__(self, val: str | bytes | None = None) -> None:
        if val is None:
            self.raw = bytes(16)
        elif isinstance(val, (bytes, bytearray)):
            if len(val) != 16:
                raise PyverbsUserError(f"a GID is 16 bytes, not {len(val)}")
            self.raw = bytes(val)
        else:
            try:
                self.raw = ipaddress.IPv6Address(val).packed
            except ValueError:
                raise PyverbsUserError(f"{val!r} is not a GID") from None

    @property
    def gid(self) -> str:
        """The GID as colon-separated text, the way pyverbs prints it."""
        return ":".join(self.raw[i : i + 2].hex() for i in range(0, 16, 2))

    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID, else None."""
        mapped = ipaddress.IPv6Address(self.raw).ipv4_mapped
        return str(mapped) if mapped is not None else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GID) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __str__(self) -> str:
        return self.gid

    def __repr__(self) -> str:
        return f"GID('{self.gid}')"


def gid_of_address(address: str) -> GID:
    """RoCEv2's GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6."""
    return GID(roce_gid(address))


class GlobalRoute:
    def __init__(self, dgid: GID | None = None, flow_label: int = 0, sgid_index: int = 0, hop_limit: int = 1,
                 traffic_class: int = 0) -> None:  # fmt: skip
        self.dgid = dgid if dgid is not None else GID()
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    def __init__(self, dlid: int = 0, sl: int = 0, src_path_bits: int = 0, static_rate: int = 0,
                 is_global: int = 0, port_num: int = 1, gr: GlobalRoute | None = None) -> None:  # fmt: skip
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global  # as in pyverbs: a GlobalRoute counts only with is_global=1
        self.port_num = port_num
        self.gr = gr if gr is not None else GlobalRoute()

    @property
    def dgid(self) -> GID:
        return self.gr.dgid

    def peer_address(self, route: Callable[[bytes], str | None]) -> str:
        """The address this AH leads to, as ``route`` (the device's) finds it for the GID
        (RoCE needs a GRH: IBA A17.4.5.1). EOPNOTSUPP for a GID the device's link cannot
        reach: an IPv6 GID on an IPv4 link, an IPv4-mapped one on an IPv6 link, a link-local one."""
        if not self.is_global:
            raise PyverbsRDMAError("RoCE address handles need a GRH (is_global=1)", errno.EINVAL)
        address = route(self.gr.dgid.raw)
        if address is None:
            raise PyverbsRDMAError(f"GID {self.gr.dgid} is not an address this device's link reaches",
                                   errno.EOPNOTSUPP)  # fmt: skip
        return address
