"""``pyroce stats``: the counters of every running pyroce device on this host, as rxe shows its
``hw_counters`` (packets, retransmissions, NAKs, duplicates, ICRC errors, drops by reason)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any, TextIO

from pyroce.host.registry import stats_dir


def running_devices(folder: str | None) -> list[dict[str, Any]]:
    """The documents published by devices whose process is still alive; the files of ended
    processes (``<pid>-<device>.json``, and a ``.tmp`` one cut short) are removed."""
    if folder is None or not os.path.isdir(folder):
        return []
    documents = []
    for name in sorted(os.listdir(folder)):
        pid, dash, rest = name.partition("-")
        if not (dash and pid.isdigit() and rest.endswith((".json", ".json.tmp"))):
            continue  # not a device's file
        path = os.path.join(folder, name)
        if not _alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        if name.endswith(".tmp"):
            continue  # being written
        try:
            with open(path) as handle:
                documents.append(json.load(handle))
        except (OSError, ValueError):
            continue  # replaced or removed while read
    return documents


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process (EPERM): alive
    return True


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("stats", help="counters of the running pyroce devices")
    parser.add_argument("--qp", action="store_true", help="also show each QP's counters")
    parser.add_argument("--json", action="store_true", help="print the counters as JSON")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    documents = running_devices(stats_dir())
    if args.json:
        print(json.dumps(documents, indent=2), file=out)
        return 0
    if not documents:
        print("no pyroce device is running", file=out)
        return 0
    for document in documents:
        engine = document.get("engine")
        of_nic = f" (engine {engine['index']} of {engine['of']})" if engine else ""
        print(f"{document['device']} pid {document['pid']} address {document['address']}{of_nic}", file=out)
        _print_counters(document["counters"], out, "  ")
        if args.qp:
            owners = document.get("owners", {})  # a shared NIC's: the program of each QP
            for qpn, counters in document["qps"].items():
                print(f"  qp {qpn}" + (f" (pid {owners[qpn]})" if qpn in owners else ""), file=out)
                _print_counters(counters, out, "    ")
    return 0


def _print_counters(counters: dict[str, int], out: TextIO, indent: str) -> None:
    width = max((len(name) for name in counters), default=0)
    for name, value in sorted(counters.items()):
        print(f"{indent}{name:<{width}}  {value}", file=out)
