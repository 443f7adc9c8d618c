"""Where a shared NIC is found: one per user, device and address, as a socket name.

The name is in Linux's abstract socket namespace, which belongs to the network namespace: a
program finds the NIC of its own network (as it finds the kernel's rxe), nothing is left on
disk when the NIC stops, and binding the name is the lock that keeps a second NIC from
starting. The name also holds a digest of the stats folder (``PYROCE_STATS_DIR``), so a test
suite that sets its own folder gets NICs of its own. The NIC serves ``PYROCE_ADDR``, or
127.0.0.1: programs on one host reach each other there with no configuration.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from pyroce.host.registry import SHARED_NIC_ADDRESS as DEFAULT_ADDRESS
from pyroce.host.registry import configured_address, stats_dir

DEFAULT_DEVICE = "pyroce0"


class NicPlace(NamedTuple):
    device: str
    address: str
    folder: str  # the stats folder: counters, the log

    @property
    def socket_name(self) -> str:
        return f"\0pyroce-nicd/{os.getuid()}/{fnv1a64(self.folder.encode()):016x}/{self.device}@{self.address}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.folder, f"nicd-{self.device}@{self.address}.log")

    def describe(self) -> str:
        return f"{self.device} on {self.address}"


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64 bits: a digest of the folder any driver computes in a few lines (C included)."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def nic_place(device: str = DEFAULT_DEVICE) -> NicPlace:
    """The shared NIC this process's settings name (``LinkError`` for a bad ``PYROCE_ADDR``)."""
    folder = stats_dir() or os.path.join("/tmp", f"pyroce-{os.getuid()}")
    return NicPlace(device, configured_address() or DEFAULT_ADDRESS, folder)
