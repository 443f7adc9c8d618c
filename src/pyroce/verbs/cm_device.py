"""The device an rdma_cm id works on (librdmacm's ``cma_device``): one open ``Context`` and one
``PD`` of this process's pyroce0, shared by every event channel and id, as librdmacm opens each
device once and gives its ids ``id->verbs`` and ``id->pd``. The NIC's connection manager lives in
that device (``ctx.device.cm``). It is opened with the first channel and closed with the last,
taking what was created on its Context and PD with it (pyverbs leaves a closed CMID's Context and
PD unusable alike).
"""

from __future__ import annotations

import errno
import ipaddress
import threading

from pyroce.host.registry import host_holds
from pyroce.verbs.device import Context
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

DEVICE_NAME = "pyroce0"


class CmaDevice:
    """pyroce0 as rdma_cm sees it: its Context, the PD ids get by default, and its address."""

    def __init__(self) -> None:
        self.ctx = Context(DEVICE_NAME)
        self.pd = PD(self.ctx)
        self.users = 0

    @property
    def cm(self):  # type: ignore[no-untyped-def]  # pyroce.cm.RdmaCm
        """The NIC's connection manager."""
        return self.ctx.device.cm

    @property
    def address(self) -> str:
        return self.ctx.device.address

    def check_local(self, address: str, action: str) -> None:
        """``address`` is the device's own or the wildcard; else ENODEV if the host holds it (an
        address no RDMA device has, as rdma_cm's ``cma_acquire_dev_by_src_ip`` answers) or
        EADDRNOTAVAIL if it is not an address of this host (``rdma_translate_ip``)."""
        ip = ipaddress.ip_address(address)
        if ip.is_unspecified or ip == ipaddress.ip_address(self.address):
            return
        if host_holds(address):
            raise PyverbsRDMAError(f"Failed to {action}: no RDMA device has {address} ({DEVICE_NAME} is "
                                   f"{self.address})", errno.ENODEV)  # fmt: skip
        raise PyverbsRDMAError(f"Failed to {action}: {address} is not an address of this host", errno.EADDRNOTAVAIL)


_lock = threading.Lock()
_device: CmaDevice | None = None


def acquire() -> CmaDevice:
    """The shared device, opened on first use (errors as ``Context`` raises them)."""
    global _device
    with _lock:
        if _device is None or _device.ctx.closed:
            _device = CmaDevice()
        _device.users += 1
        return _device


def release(device: CmaDevice) -> None:
    """One user fewer; the last closes the PD and Context (and what was made on them)."""
    global _device
    with _lock:
        device.users -= 1
        if device.users > 0:
            return
        if _device is device:
            _device = None
    device.ctx.close()
