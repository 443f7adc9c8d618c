"""``pyroce stats``: the counters of every running pyroce device on this host, as rxe shows its
``hw_counters`` (packets, retransmissions, NAKs, duplicates, ICRC errors, drops by reason)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, TextIO

from pyroce.nic.registry import stats_dir


def running_devices(folder: str | None) -> list[dict[str, Any]]:
    """The documents published by devices whose process is still alive."""
    if folder is None or not os.path.isdir(folder):
        return []
    documents = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as handle:
                document = json.load(handle)
            os.kill(int(document["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue  # a device that is gone, or a file being replaced
        documents.append(document)
    return documents


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("stats", help="counters of the running pyroce devices")
    parser.add_argument("--qp", action="store_true", help="also show each QP's counters")
    parser.add_argument("--json", action="store_true", help="print the counters as JSON")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    documents = running_devices(stats_dir())
    if args.json:
        print(json.dumps(documents, indent=2), file=out)
        return 0
    if not documents:
        print("no pyroce device is running", file=out)
        return 0
    for document in documents:
        print(f"{document['device']} pid {document['pid']} address {document['address']}", file=out)
        _print_counters(document["counters"], out, "  ")
        if args.qp:
            for qpn, counters in document["qps"].items():
                print(f"  qp {qpn}", file=out)
                _print_counters(counters, out, "    ")
    return 0


def _print_counters(counters: dict[str, int], out: TextIO, indent: str) -> None:
    width = max((len(name) for name in counters), default=0)
    for name, value in counters.items():
        print(f"{indent}{name:<{width}}  {value}", file=out)
