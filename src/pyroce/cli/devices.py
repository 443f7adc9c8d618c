"""``pyroce devices``: the devices and their node GUIDs, as ``ibv_devices`` prints them."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pyroce.apps.devinfo import devices_lines
from pyroce.verbs.device import Context, get_device_list

DESCRIPTION = """List the pyroce devices and their node GUIDs, as ibv_devices does. A device's
GUID follows its IPv4 address (the GID's interface id), which it takes when it opens, so each
device is opened to read it (each process has its own pyroce0: this one's address shows)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("devices", help="list the devices (ibv_devices)", description=DESCRIPTION)
    parser.set_defaults(run=_run)
    return parser


def node_guid(name: bytes) -> int:
    with Context(name=name) as ctx:
        return ctx.query_device().node_guid


def _run(args: argparse.Namespace, out: TextIO) -> int:
    rows = [(device.name.decode(), node_guid(device.name)) for device in get_device_list()]
    print("\n".join(devices_lines(rows)), file=out)
    return 0
