"""``pyroce decode FILE.pcap``: one line per RoCEv2 packet, with the ICRC checked.

Wireshark 4.0 shows RoCEv2 headers but does not check the ICRC; this does both, and says in
one line per frame what a malformed packet got wrong. A capture taken on the sending host
holds UDP GSO sends whole; each is split into its packets (``wire.gso``), shown as
``FRAME.SEGMENT``, each checked with the IPv4 ID it has on the wire.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NamedTuple, TextIO

from pyroce.cli.decode_cm import cm_document, cm_of, describe_cm
from pyroce.cli.errors import CliError
from pyroce.wire import (
    MalformedPacket,
    NotRoce,
    Packet,
    PcapError,
    PcapReader,
    describe_syndrome,
    opcode_name,
    parse_frame,
    split_gso_frame,
)
from pyroce.wire.framing import LINKTYPES, SUPPORTED_LINKTYPES, Frame, format_address


class DecodeSummary(NamedTuple):
    frames: int
    roce: int  # RoCEv2 packets, a GSO send's counted one by one
    icrc_bad: int
    malformed: int
    other: int  # frames that are not RoCEv2
    gso_split: int  # frames that held a GSO send of several packets

    def line(self) -> str:
        split = f", {self.gso_split} GSO sends split" if self.gso_split else ""
        return (
            f"{self.roce} RoCEv2 packets in {self.frames} frames: {self.roce - self.icrc_bad} icrc=ok, "
            f"{self.icrc_bad} icrc=BAD, {self.malformed} malformed, {self.other} other frames{split}"
        )

    def document(self) -> dict[str, Any]:
        return {"type": "summary", **self._asdict(), "icrc_ok": self.roce - self.icrc_bad}


_HEADER_FORMATS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("deth", lambda d: f"deth(qkey=0x{d.qkey:08x} srcqp=0x{d.src_qp:06x})"),
    ("feth", lambda f: f"feth(plt={f.placement_type} sel={f.selectivity_level})"),
    ("reth", lambda r: f"reth(va=0x{r.va:x} rkey=0x{r.rkey:08x} dlen={r.dma_len})"),
    (
        "atomiceth",
        lambda a: f"atomic(va=0x{a.va:x} rkey=0x{a.rkey:08x} swap_add=0x{a.swap_add:x} compare=0x{a.compare:x})",
    ),
    ("aeth", lambda a: f"aeth({describe_syndrome(a.syndrome)} msn={a.msn})"),
    ("atomicacketh", lambda a: f"orig=0x{a.orig:x}"),
    ("immdt", lambda imm: f"imm=0x{imm:08x}"),
    ("ieth", lambda rkey: f"inv_rkey=0x{rkey:08x}"),
)
"""How each extension header shows, in wire order."""


def describe_packet(pkt: Packet) -> str:
    """The fields of ``pkt`` that matter, in the order of the headers."""
    bth = pkt.bth
    parts = [
        opcode_name(bth.opcode),
        f"qpn=0x{bth.dqpn:06x}",
        f"psn=0x{bth.psn:06x}",
        f"ackreq={int(bth.ackreq)}",
    ]
    if bth.se:
        parts.append("se=1")
    if bth.fecn or bth.becn:
        parts.append(f"fecn={int(bth.fecn)} becn={int(bth.becn)}")
    if bth.pkey != 0xFFFF:
        parts.append(f"pkey=0x{bth.pkey:04x}")
    parts.append(f"pay={len(pkt.payload)} pad={pkt.pad}")
    parts.extend(show(value) for field, show in _HEADER_FORMATS if (value := getattr(pkt, field)) is not None)
    cm = cm_of(pkt)
    if cm is not None:
        parts.append(describe_cm(cm))
    return " ".join(parts)


def describe_frame(label: str, frame: Frame) -> str:
    route = f"{format_address(frame.ip.src)}:{frame.udp.sport} > {format_address(frame.ip.dst)}"
    icrc = "icrc=ok" if frame.icrc_ok else f"icrc=BAD(0x{frame.icrc:08x})"
    return f"{label:>6} {route} {describe_packet(frame.packet)} {icrc}"


def frame_document(number: int, segment: int | None, frame: Frame) -> dict[str, Any]:
    """A packet as JSON (docs/cli.md): the same fields as its line, headers by name."""
    pkt = frame.packet
    bth = pkt.bth
    headers = {}
    for field, _ in _HEADER_FORMATS:
        value = getattr(pkt, field)
        if value is not None:
            headers[field] = value._asdict() if hasattr(value, "_asdict") else value
    if pkt.aeth is not None:
        headers["aeth"]["text"] = describe_syndrome(pkt.aeth.syndrome)
    cm = cm_of(pkt)
    if cm is not None:
        headers["cm"] = cm_document(cm)
    return {
        "type": "packet",
        "frame": number,
        "segment": segment,
        "src": format_address(frame.ip.src),
        "sport": frame.udp.sport,
        "dst": format_address(frame.ip.dst),
        "opcode": opcode_name(bth.opcode),
        "qpn": bth.dqpn,
        "psn": bth.psn,
        "ackreq": bth.ackreq,
        "se": bth.se,
        "fecn": bth.fecn,
        "becn": bth.becn,
        "pkey": bth.pkey,
        "payload": len(pkt.payload),
        "pad": pkt.pad,
        "headers": headers,
        "icrc": f"0x{frame.icrc:08x}",
        "icrc_ok": frame.icrc_ok,
    }


class _Entry(NamedTuple):
    """One decoded packet (``frame`` set) or malformed frame (``error`` set)."""

    number: int
    segment: int | None  # the packet's place in a GSO send; None for a frame of one packet
    frame: Frame | None
    error: MalformedPacket | None


class _Counts:
    """What ``_entries`` saw besides the packets it yields."""

    frames = other = gso_split = 0


def _entries(reader: PcapReader, counts: _Counts) -> Iterator[_Entry]:
    """The packets of every frame, a GSO send's one by one."""
    for number, record in enumerate(reader, start=1):
        counts.frames += 1
        try:
            frames = split_gso_frame(record.data, reader.linktype)
            counts.gso_split += len(frames) > 1
            parsed = [parse_frame(data, reader.linktype) for data in frames]
        except NotRoce:
            counts.other += 1
            continue
        except MalformedPacket as exc:
            yield _Entry(number, None, None, exc)
            continue
        for segment, frame in enumerate(parsed):
            yield _Entry(number, segment if len(parsed) > 1 else None, frame, None)


def decode(stream: BinaryIO, out: TextIO, quiet: bool = False, as_json: bool = False) -> DecodeSummary:
    """Print each RoCEv2 packet of the pcap ``stream`` to ``out``; returns the counts.

    Raises ``PcapError`` for a file that is not a pcap or is cut short, and ``CliError`` for
    a link type that cannot carry RoCEv2 as decoded here."""
    reader = PcapReader(stream)
    if reader.linktype not in LINKTYPES:
        raise CliError(f"link type {reader.linktype} is not supported ({SUPPORTED_LINKTYPES})")
    counts = _Counts()
    roce = icrc_bad = malformed = 0
    for entry in _entries(reader, counts):
        if entry.error is not None:
            malformed += 1
            if as_json:
                document = {"type": "malformed", "frame": entry.number, "error": type(entry.error).__name__,
                            "reason": str(entry.error)}  # fmt: skip
                out.write(json.dumps(document) + "\n")
            elif not quiet:
                out.write(f"{entry.number:6d} MALFORMED {type(entry.error).__name__}: {entry.error}\n")
            continue
        assert entry.frame is not None
        roce += 1
        icrc_bad += not entry.frame.icrc_ok
        if as_json:
            out.write(json.dumps(frame_document(entry.number, entry.segment, entry.frame)) + "\n")
        elif not quiet:
            label = str(entry.number) if entry.segment is None else f"{entry.number}.{entry.segment}"
            out.write(describe_frame(label, entry.frame) + "\n")
    summary = DecodeSummary(counts.frames, roce, icrc_bad, malformed, counts.other, counts.gso_split)
    out.write((json.dumps(summary.document()) if as_json else summary.line()) + "\n")
    return summary


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "decode",
        help="print the RoCEv2 packets of a pcap file, checking every ICRC",
        description="Print one line per RoCEv2 packet of a pcap file (Ethernet, Linux cooked or "
        "raw IP), with BTH, extension headers and the ICRC check, then a summary line. UDP GSO "
        "sends captured on the sending host are split into their packets.",
    )
    parser.add_argument("file", help="a pcap file (tcpdump -w, tshark -F pcap); - reads it from stdin")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--json", action="store_true", help="one JSON object per packet, then a summary object")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        if args.file == "-":
            decode(sys.stdin.buffer, out, quiet=args.quiet, as_json=args.json)
        else:
            with open(args.file, "rb") as stream:
                decode(stream, out, quiet=args.quiet, as_json=args.json)
    except (PcapError, CliError) as exc:
        raise CliError(f"{'<stdin>' if args.file == '-' else args.file}: {exc}") from None
    return 0
