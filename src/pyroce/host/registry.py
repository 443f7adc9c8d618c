"""Which devices a process has, and where each one lives on the network.

``pyroce0`` is the one device. Its address comes from ``PYROCE_ADDR`` (an IPv4 or IPv6 address
of this host: the device speaks RoCEv2 over that family, e.g. a veth or Ethernet address, to talk to other hosts). Without it, each process
takes its own loopback address, ``127.64.0.0/10`` plus its pid, so any two processes on one
host can reach each other with no configuration: the whole ``127/8`` is local on Linux.
``PYROCE_PROGRESS=thread`` leaves all engine work to the engine thread (the default, ``inline``,
also runs it in the caller's thread on a doorbell or an empty poll; ``host`` runs no thread and
leaves it to ``NicDevice.step(now)``; ``host.progress``). ``PYROCE_FAULTS="loss=0.05,reorder=0.05,duplicate=0.01,corrupt=0.01,seed=7"`` makes the link
misbehave on purpose (``pyroce.link.faults``). Running devices write their counters to
``PYROCE_STATS_DIR`` for ``pyroce stats``; ``PYROCE_PRINT_STATS=1`` also prints them on stderr when the device
closes, for a program that prints none itself (a C program under ``pyroce run``). ``PYROCE_GSO=0`` turns UDP GSO and GRO off (see the
README: a capture or a raw-socket receiver on this host sees a GSO send as one datagram). ``PYROCE_VERIFY_ICRC=0`` turns ICRC checking off
(it is on for every peer: ``pyroce.wire.ipv4_id``).

A device opens on the first ``open_device`` and closes when its last user releases it.
"""

from __future__ import annotations

import atexit
import errno
import ipaddress
import os
import sys
import tempfile
import threading
from typing import NamedTuple

from pyroce.host.assembly import build_device
from pyroce.host.progress import MODES
from pyroce.host.stats_file import summary_line
from pyroce.link.errors import LinkError
from pyroce.link.faults import FaultConfig
from pyroce.link.steering import Steering
from pyroce.link.udp import UdpLink, interface_index, interface_mtu, interface_name
from pyroce.nic.device import NicDevice
from pyroce.wire.mtu import mtu_for_netdev

DEVICE_NAMES = ("pyroce0",)
LOOPBACK_BASE = int(ipaddress.IPv4Address("127.64.0.0"))
LOOPBACK_SIZE = 1 << 22  # 127.64.0.0/10: room for every pid Linux can hand out

_lock = threading.Lock()
_open: dict[str, tuple[NicDevice, int]] = {}
_print_stats: set[str] = set()  # devices opened with PYROCE_PRINT_STATS=1


SHARED_NIC_ADDRESS = "127.0.0.1"  # the shared NIC's address with no PYROCE_ADDR: programs on one host meet there


def netdev_name(address: str) -> str | None:
    """The network interface that holds ``address`` (None if none does): a device's netdev."""
    return interface_name(address)


def configured_address() -> str | None:
    """The address set by ``PYROCE_ADDR``, checked to be an IPv4 or IPv6 address (not link-local:
    its peers would need a scope), in its normal text form."""
    value = os.environ.get("PYROCE_ADDR")
    if not value:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise LinkError(errno.EINVAL, f"PYROCE_ADDR={value!r} is not an IPv4 or IPv6 address") from None
    if address.is_link_local:
        raise LinkError(errno.EINVAL, f"PYROCE_ADDR={value!r} is link-local: give a global or unique-local address")
    return str(address)


def stats_dir() -> str | None:
    """Where running devices publish their counters (``PYROCE_STATS_DIR``, else a per-user
    folder in the temporary directory); None if it cannot be made."""
    path = os.environ.get("PYROCE_STATS_DIR") or os.path.join(tempfile.gettempdir(), f"pyroce-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path


def loopback_addresses(pid: int) -> list[str]:
    """The loopback addresses a process with ``pid`` tries, in order, when ``PYROCE_ADDR`` is unset."""
    start = pid % LOOPBACK_SIZE
    return [str(ipaddress.IPv4Address(LOOPBACK_BASE + (start + i) % LOOPBACK_SIZE)) for i in range(16)]


class DeviceSettings(NamedTuple):
    """What the ``PYROCE_*`` variables ask of a device, checked (for ``_create`` and ``pyroce doctor``)."""

    faults: FaultConfig
    batching: bool  # PYROCE_GSO: UDP GSO and GRO when the kernel has them
    progress: str  # PYROCE_PROGRESS: one of ``host.progress.MODES``
    verify_icrc: bool  # PYROCE_VERIFY_ICRC
    print_stats: bool  # PYROCE_PRINT_STATS: the counters on stderr when the device closes


def device_settings() -> DeviceSettings:
    """The device settings from the environment; ``LinkError`` (EINVAL) names a bad value."""
    try:
        faults = FaultConfig.parse(os.environ.get("PYROCE_FAULTS", ""))
    except ValueError as exc:
        raise LinkError(errno.EINVAL, f"PYROCE_FAULTS: {exc}") from None
    batching = _flag("PYROCE_GSO", "1")
    print_stats = _flag("PYROCE_PRINT_STATS", "0")
    progress = os.environ.get("PYROCE_PROGRESS") or "inline"
    if progress not in MODES:
        raise LinkError(errno.EINVAL, f"PYROCE_PROGRESS={progress!r} is not one of {', '.join(MODES)}")
    verify_icrc = os.environ.get("PYROCE_VERIFY_ICRC", "1") != "0"
    return DeviceSettings(faults, batching, progress, verify_icrc, print_stats)


ENGINE_VARIABLE = "PYROCE_NICD_ENGINE"  # "INDEX/COUNT": set by a shared NIC for the engines it runs


def engine_steering() -> Steering | None:
    """This process's device is engine INDEX of COUNT on its address (``link.steering``): what
    a shared NIC with several engines (``pyroce.nicd.engines``) sets for each of them."""
    value = os.environ.get(ENGINE_VARIABLE)
    if not value:
        return None
    index, _, count = value.partition("/")
    try:
        return Steering(int(count), int(index))
    except ValueError as exc:
        raise LinkError(errno.EINVAL, f"{ENGINE_VARIABLE}={value!r}: {exc}") from None


def _flag(name: str, default: str) -> bool:
    value = os.environ.get(name, default)
    if value not in ("0", "1"):
        raise LinkError(errno.EINVAL, f"{name}={value!r} is not 0 or 1")
    return value == "1"


def _create(name: str, progress: str | None) -> NicDevice:
    settings = device_settings()
    if progress is not None and not os.environ.get("PYROCE_PROGRESS"):
        settings = settings._replace(progress=progress)

    def make(address: str) -> NicDevice:
        link = UdpLink(address, batching=settings.batching, steering=engine_steering())
        device = build_device(name, link, verify_icrc=settings.verify_icrc,
                              progress=settings.progress, faults=settings.faults, stats_dir=stats_dir())  # fmt: skip
        if device.engine.cm is not None:  # the paths it offers have the port's MTU
            device.engine.cm.path_mtu = mtu_for_netdev(netdev_mtu(device))
        return device

    if settings.print_stats:
        _print_stats.add(name)
    else:
        _print_stats.discard(name)

    address = configured_address()
    if address is not None:
        return make(address)
    for candidate in loopback_addresses(os.getpid()):
        try:
            return make(candidate)
        except LinkError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise LinkError(errno.EADDRINUSE, "no free loopback address for pyroce0")


def netdev_mtu(device: NicDevice) -> int:
    """The MTU of the network interface that holds the device's address: rxe's port takes its
    active MTU from its netdev, and the verbs reach the link only through the NIC."""
    return interface_mtu(device.address)


def netdev_ifindex(device: NicDevice) -> int:
    """The ifindex of that interface (a GID entry's ``ndev_ifindex``), 0 if none holds it."""
    return interface_index(device.address)


def host_holds(address: str) -> bool:
    """Whether an interface of this host holds ``address`` (all of 127/8 is loopback's): an
    address no device has is ENODEV to rdma_cm when the host holds it, EADDRNOTAVAIL when not."""
    return interface_index(address) != 0


def open_device(name: str, progress: str | None = None) -> NicDevice:
    """The running device ``name``, started if needed (``LinkError`` if it cannot bind), in
    ``progress`` mode when it starts here and ``PYROCE_PROGRESS`` names none."""
    with _lock:
        if name not in DEVICE_NAMES:
            raise KeyError(name)
        device, users = _open.get(name) or (_create(name, progress), 0)
        _open[name] = (device, users + 1)
        return device


@atexit.register
def _end_of_program() -> None:
    """The program's open devices send their last MADs and stop their engine threads
    (``NicDevice.end_program``)."""
    with _lock:
        devices = [device for device, _users in _open.values()]
    for device in devices:
        device.end_program()


def release_device(device: NicDevice) -> None:
    with _lock:
        current, users = _open.get(device.name, (None, 0))
        if current is not device:
            return
        if users > 1:
            _open[device.name] = (device, users - 1)
            return
        del _open[device.name]
        device.close()
        if device.name in _print_stats:
            print(summary_line(device.name, device.stats()), file=sys.stderr, flush=True)
