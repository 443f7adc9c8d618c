"""``pyroce decode FILE.pcap``: one line per RoCEv2 packet, with the ICRC checked.

Wireshark 4.0 shows RoCEv2 headers but does not check the ICRC; this does both, and says in
one line per frame what a malformed packet got wrong.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple, TextIO

from pyroce.wire import (
    MalformedPacket,
    NotRoce,
    Packet,
    PcapReader,
    describe_syndrome,
    opcode_name,
    parse_frame,
)
from pyroce.wire.framing import Frame, format_address


class DecodeSummary(NamedTuple):
    frames: int
    roce: int
    icrc_bad: int
    malformed: int

    def line(self) -> str:
        other = self.frames - self.roce - self.malformed
        return (
            f"{self.roce} RoCEv2 packets in {self.frames} frames: {self.roce - self.icrc_bad} icrc=ok, "
            f"{self.icrc_bad} icrc=BAD, {self.malformed} malformed, {other} other frames"
        )


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
    return " ".join(parts)


def describe_frame(number: int, frame: Frame) -> str:
    route = f"{format_address(frame.ip.src)}:{frame.udp.sport} > {format_address(frame.ip.dst)}"
    icrc = "icrc=ok" if frame.icrc_ok else f"icrc=BAD(0x{frame.icrc:08x})"
    return f"{number:6d} {route} {describe_packet(frame.packet)} {icrc}"


def decode(stream, out: TextIO, quiet: bool = False) -> DecodeSummary:
    """Print each RoCEv2 packet of the pcap ``stream`` to ``out``; returns the counts.

    Raises ``PcapError`` for a file that is not a pcap or is cut short."""
    reader = PcapReader(stream)
    frames = roce = icrc_bad = malformed = 0
    for number, record in enumerate(reader, start=1):
        frames += 1
        try:
            frame = parse_frame(record.data, reader.linktype)
        except NotRoce:
            continue
        except MalformedPacket as exc:
            malformed += 1
            if not quiet:
                out.write(f"{number:6d} MALFORMED {type(exc).__name__}: {exc}\n")
            continue
        roce += 1
        icrc_bad += not frame.icrc_ok
        if not quiet:
            out.write(describe_frame(number, frame) + "\n")
    summary = DecodeSummary(frames, roce, icrc_bad, malformed)
    out.write(summary.line() + "\n")
    return summary


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "decode",
        help="print the RoCEv2 packets of a pcap file, checking every ICRC",
        description="Print one line per RoCEv2 packet of a pcap file (Ethernet, Linux cooked or "
        "raw IP), with BTH, extension headers and the ICRC check, then a summary line.",
    )
    parser.add_argument("file", help="a pcap file (tcpdump -w, tshark -F pcap)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    with open(args.file, "rb") as stream:
        decode(stream, out, quiet=args.quiet)
    return 0
