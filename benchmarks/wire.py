#!/usr/bin/env python3
"""Cost of pyroce.wire per 4 KiB RDMA WRITE packet: build (with ICRC) and parse + verify.

Prints a table and, with --json FILE, writes the figures. Beside pyroce's figures it measures,
in the same run, the floors any Python implementation pays on this machine: copying 4 KiB
into a buffer and a CRC-32 over 4 KiB (isal and zlib), so the overhead of the codec itself
shows as the difference.

    python benchmarks/wire.py [--iterations N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
import zlib

from pyroce.wire import BTH, IPv4Header, Opcode, Packet, Reth, UdpHeader, packet_length, parse_packet
from pyroce.wire.framing import RocePath
from pyroce.wire.icrc import crc32

PAYLOAD = 4096


def best_us(func, iterations: int, repeat: int = 5) -> float:
    """Best of ``repeat`` runs, in µs per call: the least disturbed by a noisy machine."""
    return min(timeit.repeat(func, number=iterations, repeat=repeat)) / iterations * 1e6


def measure(iterations: int) -> dict:
    pkt = Packet(
        BTH(Opcode.RC_RDMA_WRITE_FIRST, dqpn=0x11, psn=5), bytes(PAYLOAD), reth=Reth(0x7F0000001000, 0x1F03, 65536)
    )
    path = RocePath(IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])), UdpHeader(0xC011))
    buf = bytearray(packet_length(pkt))
    path.build_into(buf, 0, pkt)
    datagram = bytes(buf)
    assert parse_packet(datagram) == pkt and path.verify(datagram)
    payload = bytes(PAYLOAD)
    scratch = bytearray(PAYLOAD + 64)
    rows = {
        "build_us": best_us(lambda: path.build_into(buf, 0, pkt), iterations),
        "parse_verify_us": best_us(lambda: (parse_packet(datagram), path.verify(datagram)), iterations),
        "parse_us": best_us(lambda: parse_packet(datagram), iterations),
        "verify_us": best_us(lambda: path.verify(datagram), iterations),
        "floor_copy_4k_us": best_us(lambda: scratch.__setitem__(slice(28, 28 + PAYLOAD), payload), iterations),
        "floor_crc_4k_us": best_us(lambda: crc32(payload), iterations),
        "floor_zlib_crc_4k_us": best_us(lambda: zlib.crc32(payload), iterations),
    }
    return {
        "packet": "RC_RDMA_WRITE_FIRST, 4096-byte payload, IPv4",
        "crc": crc32.__module__,
        "python": platform.python_version(),
        **{key: round(value, 3) for key, value in rows.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=50_000)
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    result = measure(args.iterations)
    print(f"pyroce.wire, {result['packet']} (crc: {result['crc']}, Python {result['python']})")
    print(f"{'operation':<28}{'µs/packet':>10}")
    for key, label in [
        ("build_us", "build + ICRC"),
        ("parse_verify_us", "parse + verify ICRC"),
        ("parse_us", "  parse only"),
        ("verify_us", "  verify only"),
        ("floor_copy_4k_us", "floor: copy 4 KiB"),
        ("floor_crc_4k_us", "floor: CRC-32 4 KiB"),
        ("floor_zlib_crc_4k_us", "floor: zlib CRC-32 4 KiB"),
    ]:
        print(f"{label:<28}{result[key]:>10.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
