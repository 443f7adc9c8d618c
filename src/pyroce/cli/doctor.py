"""``pyroce doctor``: what a device opened here would use, why, and what to change.

It answers "why does pyroce not work here" before a program fails: the address (and so the
GID) a device would take and whether it is one of this host's, the active MTU its interface
gives, whether UDP 4791 can be bound there, whether the kernel has UDP GSO and GRO, what its
socket may hold (and so how much it keeps in flight with a peer), and whether every
``PYROCE_*`` variable is valid. It probes with sockets it closes at once, so it
leaves nothing bound, and it opens no device.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import pyroce
from pyroce.cli.nicd import describe_status
from pyroce.driver.build import DEFAULT_INCLUDE, BuildError, compiler, mlx5dv_header, verbs_header
from pyroce.host.registry import DeviceSettings, configured_address, device_settings, loopback_addresses, stats_dir
from pyroce.link.base import PEER_WINDOW, peer_window
from pyroce.link.errors import LinkError
from pyroce.link.udp import SOCKET_BUFFER, UdpLink, interface_mtu
from pyroce.nicd.client import NicError, ask
from pyroce.nicd.place import nic_place
from pyroce.verbs.addr import gid_of_address
from pyroce.wire.mtu import mtu_for_netdev, mtu_to_bytes


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    value: str  # what a device would use, or what is wrong
    why: str = ""  # where the value comes from
    fix: str = ""  # what to change, when not ok
    warning: bool = False  # not ok, yet not a problem: only `pyroce run` needs it (the exit status stays 0)


def _from_env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return f"{name}={value}" if value else f"{name} unset: the default, {default}"


def check_settings() -> tuple[list[Check], DeviceSettings | None]:
    try:
        settings = device_settings()
    except LinkError as exc:
        return [Check("settings", False, exc.strerror or str(exc), fix="correct or unset that variable")], None
    checks = [
        Check("progress", True, settings.progress, _from_env("PYROCE_PROGRESS", "inline")),
        Check("icrc", True, "checked" if settings.verify_icrc else "not checked", _from_env("PYROCE_VERIFY_ICRC", "1")),
        Check(
            "faults",
            True,
            os.environ.get("PYROCE_FAULTS", "") if settings.faults.active else "none",
            _from_env("PYROCE_FAULTS", "none"),
        ),
    ]
    folder = stats_dir()
    why = _from_env("PYROCE_STATS_DIR", "a folder per user in the temporary directory")
    fix = "" if folder else "set PYROCE_STATS_DIR to a folder you can write"
    checks.append(Check("stats", folder is not None, folder or "cannot be created", why, fix))
    return checks, settings


def check_address(settings: DeviceSettings | None) -> list[Check]:
    try:
        configured = configured_address()
    except LinkError as exc:
        return [Check("address", False, exc.strerror or str(exc), fix="set PYROCE_ADDR to an address of this host, "
                      "or unset it for a loopback address")]  # fmt: skip
    if configured is not None:
        address, why = configured, "PYROCE_ADDR"
    else:
        address = loopback_addresses(os.getpid())[0]
        why = ("PYROCE_ADDR unset: each process takes its own loopback address, 127.64.0.0/10 plus its pid "
               "(the next of 16 if taken); reachable from this host only")  # fmt: skip
    checks = [Check("address", True, address, why)]
    try:
        link = UdpLink(address)
    except LinkError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            return [Check("address", False, exc.strerror or str(exc), why,
                          "set PYROCE_ADDR to an address `ip -4 addr` lists, or unset it for a loopback address")]  # fmt: skip
        if exc.errno != errno.EADDRINUSE or configured is None:
            raise
        checks.append(Check("port", False, exc.strerror or str(exc), "RoCEv2 is UDP port 4791",
                            "stop the other device on this address (`pyroce stats` lists pyroce's; `rdma link` "
                            "shows rxe), or use another address in PYROCE_ADDR"))  # fmt: skip
        link = UdpLink(address, 0)  # for the GSO and GRO probe
    else:
        checks.append(Check("port", True, f"UDP {address}:4791 can be bound", "RoCEv2 is UDP port 4791"))
    try:
        gso, gro, receive_buffer = link.gso, link.gro, link.receive_buffer
    finally:
        link.close()
    checks.append(
        Check("gid", True, str(gid_of_address(address)), "the address (IPv4-mapped for IPv4): RoCEv2 GID index 3")
    )
    netdev = interface_mtu(address)
    try:
        mtu = f"{mtu_to_bytes(mtu_for_netdev(netdev))} B"
        checks.append(Check("active_mtu", True, mtu, f"interface MTU {netdev} less 96 bytes of headers"))
    except ValueError as exc:
        checks.append(Check("active_mtu", False, str(exc), fix="raise the interface's MTU to 352 or more"))
    used = settings is not None and settings.batching
    have = " and ".join(name for name, present in (("GSO", gso), ("GRO", gro)) if present) or "neither"
    checks.append(Check("gso_gro", gso and gro, f"the kernel has {have}; {'used' if used else 'not used'}",
                        _from_env("PYROCE_GSO", "1"), "" if gso and gro else "Linux 5.0 or later has both "
                        "(pyroce works without them, with one system call per packet)"))  # fmt: skip
    if receive_buffer is not None:
        checks.append(check_socket_buffer(receive_buffer))
    return checks


def check_socket_buffer(receive_buffer: int) -> Check:
    """What the link's socket holds, and so how much a NIC keeps in flight with one peer
    (``link.base.peer_window``): less than the most on a host that caps the buffer low, a
    warning (pyroce works, many QPs to one peer with less in flight)."""
    window = peer_window(receive_buffer)
    full = window == PEER_WINDOW
    return Check("socket_buffer", full, f"{receive_buffer // 1024} KiB: {window} packets in flight per peer at most",
                 f"pyroce asks {SOCKET_BUFFER >> 20} MiB for its socket, net.core.rmem_max caps it, the kernel "
                 "doubles that; half of it is kept for packets in flight",
                 "" if full else f"as root, sysctl -w net.core.rmem_max={SOCKET_BUFFER // 2} for {PEER_WINDOW} "
                 "(fewer means slower many-QP traffic, not lost packets)", warning=not full)  # fmt: skip


def check_build() -> list[Check]:
    """Which code runs: the modules compiled with mypyc, or every module's .py (``pyroce/__init__.py``)."""
    return [Check("build", True, "compiled with mypyc" if pyroce.COMPILED else "pure Python", pyroce.BUILD)]


def check_c_driver() -> list[Check]:
    """What ``pyroce run`` builds its libibverbs with: a C compiler and the system's verbs headers.
    Their absence is a warning, each missing one named with its Debian package: Python programs
    (the demo, the tools, ``pyroce.verbs``) need neither."""
    include = os.environ.get("PYROCE_VERBS_INCLUDE") or DEFAULT_INCLUDE
    why = "`pyroce run` builds pyroce's libibverbs.so.1 with them on first use (Python programs need neither)"
    found: list[str] = []
    missing: list[str] = []
    try:
        found.append(compiler())
    except BuildError as exc:
        missing.append(str(exc))
    try:  # both are libibverbs-dev's: the first one missing says so
        found += [str(verbs_header(include)), str(mlx5dv_header(include))]
    except BuildError as exc:
        missing.append(str(exc))
    if missing:
        return [Check("c_driver", False, "; ".join(missing), why, "only for `pyroce run`: install what is named, or "
                      "point CC and PYROCE_VERBS_INCLUDE at them", warning=True)]  # fmt: skip
    return [Check("c_driver", True, ", ".join(found), why)]


def check_shared_nic() -> list[Check]:
    """The shared NIC a C program (``pyroce run``) would use: running, or able to start."""
    try:
        place = nic_place()
    except LinkError:
        return []  # the address check says what is wrong with PYROCE_ADDR
    why = "C programs under `pyroce run` share it"
    try:
        return [Check("shared_nic", True, f"running: {describe_status(place, ask(place, 'status'))}", why)]
    except NicError:
        pass
    try:
        UdpLink(place.address).close()
    except LinkError as exc:
        return [Check("shared_nic", False, f"{place.describe()} cannot start: {exc.strerror or exc}", why,
                      "free UDP 4791 on that address, or set PYROCE_ADDR to another")]  # fmt: skip
    return [Check("shared_nic", True, f"{place.describe()}: not running; the first C program starts it", why)]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="what a device would use here (address, GID, MTU, progress, GSO), and what is wrong",
        description="Say which address, GID, active MTU and progress mode a pyroce device would use "
        "here and why, whether UDP 4791 can be bound and GSO/GRO are available, whether `pyroce run` "
        "finds a C compiler and <infiniband/verbs.h> (a warning when not: only it needs them), and what to "
        "change when something is wrong. Exit 0 when all is well, 1 otherwise.",
    )
    parser.add_argument("--json", action="store_true", help='print {"ok": ..., "checks": [...]} as JSON')
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    checks, settings = check_settings()
    checks = check_address(settings) + checks + check_build() + check_c_driver() + check_shared_nic()
    ok = all(check.ok or check.warning for check in checks)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [asdict(check) for check in checks]}, indent=2), file=out)
        return 0 if ok else 1
    width = max(len(check.name) for check in checks)
    for check in checks:
        mark = "ok" if check.ok else "WARN" if check.warning else "FAIL"
        print(f"{mark:<5} {check.name:<{width}}  {check.value}", file=out)
        if check.why:
            print(f"{'':<{width + 8}}({check.why})", file=out)
        if check.fix:
            print(f"{'':<{width + 8}}fix: {check.fix}", file=out)
    problems = sum(not check.ok and not check.warning for check in checks)
    warnings = sum(check.warning for check in checks)
    print(", ".join(filter(None, ("all is well" if ok else _count(problems, "problem"),
                                  warnings and _count(warnings, "warning")))), file=out)  # fmt: skip
    return 0 if ok else 1


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number > 1)}"
