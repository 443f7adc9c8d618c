"""Path MTU: the ``ibv_mtu`` enum (``pyroce.ib``) and its byte sizes (bytes = 128 << enum).

The PMTU counts payload bytes only; RoCE leaves 96 bytes of a netdev MTU for headers, so a
1500-byte Ethernet MTU gives a 1024-byte active MTU, as every rxe perftest log shows.
"""

from __future__ import annotations

from typing import Final

from pyroce.ib.enums import ibv_mtu as Mtu

ROCE_HEADER_ALLOWANCE: Final = 96


def mtu_to_bytes(mtu: int) -> int:
    """Bytes of an ``ibv_mtu`` value; ``ValueError`` for values outside 1..5."""
    return 128 << Mtu(mtu)


def mtu_from_bytes(size: int) -> Mtu:
    """The ``ibv_mtu`` of exactly ``size`` bytes; ``ValueError`` if there is none."""
    for mtu in Mtu:
        if mtu_to_bytes(mtu) == size:
            return mtu
    raise ValueError(f"{size} is not a RoCE path MTU (256, 512, 1024, 2048 or 4096)")


def mtu_for_netdev(netdev_mtu: int) -> Mtu:
    """The largest RoCE MTU that fits a network device's MTU (rxe's rule)."""
    room = netdev_mtu - ROCE_HEADER_ALLOWANCE
    fitting = [mtu for mtu in Mtu if mtu_to_bytes(mtu) <= room]
    if not fitting:
        raise ValueError(f"netdev MTU {netdev_mtu} is too small for RoCE (needs {256 + ROCE_HEADER_ALLOWANCE})")
    return fitting[-1]
