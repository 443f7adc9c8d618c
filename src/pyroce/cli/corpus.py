"""``pyroce corpus``: the golden corpus (``pyroce.sim.corpus``) as files a NIC developer replays
against a design: per exchange, a pcap of the responder's port and a JSON index of its packets,
each marked stimulus (received) or expected (sent), with the values a replay maps."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any, TextIO

from pyroce.cli.decode import frame_document
from pyroce.cli.errors import CliError
from pyroce.sim.corpus import RESPONDER, SCENARIOS, Scenario, run_scenario
from pyroce.wire.framing import LINKTYPE_RAW, parse_frame
from pyroce.wire.pcap import PcapWriter

DESCRIPTION = """Write the golden corpus: RC exchanges as the responder sees them, for replaying
against a NIC design in its simulation. Each exchange runs two pyroce NICs in simulated time and
writes NAME.pcap (the responder's port, both directions, raw IPv4) and NAME.json (the setup a
replay maps onto the design: QPNs, PSNs, the MR's address, R_Key and length, the SHA-256 of the
responder's MR after; and each packet decoded as `pyroce decode --json` does, marked "stimulus"
when the responder received it and "expected" when it sent it)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("corpus", help="write the golden corpus of RC exchanges (pcap + JSON)",
                                   description=DESCRIPTION)  # fmt: skip
    parser.add_argument("directory", metavar="DIR", help="where the files go (made if missing)")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"exchanges to write (default all: {', '.join(SCENARIOS)})")
    parser.set_defaults(run=_run)
    return parser


def document(scenario: Scenario) -> dict[str, Any]:
    """The JSON index of a scenario: what it is, its setup, and its packets in order."""
    packets = []
    for number, (timestamp, raw) in enumerate(scenario.frames, 1):
        packet = frame_document(number, None, parse_frame(raw, LINKTYPE_RAW))
        packet["direction"] = "expected" if packet["src"] == RESPONDER else "stimulus"
        packet["time_us"] = round(timestamp * 1e6, 3)
        packets.append(packet)
    return {"scenario": scenario.name, "description": scenario.description, "setup": scenario.setup,
            "packets": packets}  # fmt: skip


def _run(args: argparse.Namespace, out: TextIO) -> int:
    unknown = [name for name in args.names if name not in SCENARIOS]
    if unknown:
        raise CliError(f"no exchange named {', '.join(unknown)} (there are {', '.join(SCENARIOS)})")
    folder = Path(args.directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot make {folder}: {exc.strerror}") from None
    for name in args.names or SCENARIOS:
        scenario = run_scenario(name)
        pcap = io.BytesIO()
        writer = PcapWriter(pcap, LINKTYPE_RAW)
        for timestamp, raw in scenario.frames:
            writer.write(raw, timestamp)
        (folder / f"{name}.pcap").write_bytes(pcap.getvalue())
        index = document(scenario)
        (folder / f"{name}.json").write_text(json.dumps(index, indent=1) + "\n")
        expected = sum(packet["direction"] == "expected" for packet in index["packets"])
        print(f"{name}: {len(scenario.frames)} packets ({expected} expected), {folder / name}.pcap/.json", file=out)
    return 0
