"""``pyroce devinfo``: a device's attributes, ports and (with ``-v``) GID table, as
``ibv_devinfo`` prints them (``pyroce.apps.devinfo``)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pyroce.apps.devinfo import devinfo_lines
from pyroce.cli.errors import CliError
from pyroce.verbs.device import Context, get_device_list

DESCRIPTION = """Print the attributes of the pyroce devices (or of DEV), as ibv_devinfo does:
the device, then each port (or PORT); -v adds every limit and the port's GID table
(Linux's for a RoCE port: GID[0] and GID[1] the link-local GID as RoCE v1 and v2, GID[2] and
GID[3] the device's address, ::ffff:<IPv4> or the IPv6 address itself, as RoCE v1 and v2; a v1
entry's traffic is RoCE v2 too, pyroce's link being UDP). Each process has its own pyroce0: this shows the one this command opens."""


def port_number(text: str) -> int:
    """``-i``: strtol, and a port of 0 or less is a usage error."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"port {value} is not 1 or more")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("devinfo", help="print device attributes (ibv_devinfo)", description=DESCRIPTION)
    parser.add_argument("-d", "--ib-dev", help="use IB device DEV (default all devices)")
    parser.add_argument(
        "-i", "--ib-port", type=port_number, default=0, help="use port PORT of the device (default all)"
    )
    parser.add_argument("-l", "--list", action="store_true", help="print only the IB devices names")
    parser.add_argument("-v", "--verbose", action="store_true", help="print all the attributes of the device(s)")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    devices = get_device_list()
    if args.list:
        names = "".join(f"\t{device.name.decode()}\n" for device in devices)
        print(f"{len(devices)} HCA{'s' if len(devices) != 1 else ''} found:\n{names}", file=out)
        return 0
    if args.ib_dev is not None:
        devices = [device for device in devices if device.name.decode() == args.ib_dev]
        if not devices:
            raise CliError(f"IB device '{args.ib_dev}' wasn't found")
    for device in devices:
        with Context(name=device.name) as ctx:
            try:
                lines = devinfo_lines(ctx, device, args.ib_port, args.verbose)
            except ValueError as exc:
                raise CliError(str(exc)) from None
        print("\n".join(lines), file=out)
    return 0
