"""Invariant CRC (IBA annex A17.3.3, rocev2.md): compute and verify, IPv4 and IPv6.

The ICRC is zlib's CRC-32 over ``8 x 0xFF | IP header | UDP header | BTH .. pad`` with the
fields routers may change replaced by ones: IPv4 TOS, TTL and header checksum; IPv6 traffic
class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN, reserved). It goes
on the wire least-significant byte first. The CRC of the 8-byte prefix is computed once.
``isal``'s crc32 gives the same values as zlib's, several times faster, when installed.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; zlib is the fallback
    from zlib import crc32

from pyroce.wire.errors import LengthMismatch

Buffer = bytes | bytearray | memoryview

ICRC_LEN = 4
IPV4_UDP_LEN = 28
IPV6_UDP_LEN = 48
_PREFIX_CRC = crc32(b"\xff" * 8)
_MASKED_BTH_BYTE4 = b"\xff"


def _masked_headers(ip_udp: Buffer) -> bytearray:
    """A copy of the raw IP + UDP headers with the variant fields set to ones."""
    hdr = bytearray(ip_udp)
    if len(hdr) == IPV4_UDP_LEN:
        hdr[1] = 0xFF  # TOS
        hdr[8] = 0xFF  # TTL
        hdr[10:12] = b"\xff\xff"  # header checksum
    elif len(hdr) == IPV6_UDP_LEN:
        hdr[0] |= 0x0F  # version kept; traffic class and flow label masked
        hdr[1:4] = b"\xff\xff\xff"
        hdr[7] = 0xFF  # hop limit
    else:
        raise LengthMismatch(f"IP+UDP headers are {len(hdr)} bytes, expected 28 (IPv4) or 48 (IPv6)")
    hdr[-2:] = b"\xff\xff"  # UDP checksum
    return hdr


def compute_icrc(ip_udp: Buffer, roce: Buffer) -> int:
    """ICRC of a RoCEv2 packet.

    ``ip_udp``: the raw IPv4 (20 bytes, no options) or IPv6 (40) header and the UDP header,
    exactly as on the wire (lengths included). ``roce``: BTH through padding, without the ICRC.
    """
    view = memoryview(roce)
    crc = crc32(_masked_headers(ip_udp), _PREFIX_CRC)
    crc = crc32(view[:4], crc)
    crc = crc32(_MASKED_BTH_BYTE4, crc)
    return crc32(view[5:], crc)


def verify_icrc(ip_udp: Buffer, udp_payload: Buffer) -> bool:
    """Whether the last 4 bytes of ``udp_payload`` are the right ICRC for the rest."""
    view = memoryview(udp_payload)
    if len(view) < ICRC_LEN + 5:
        return False
    received = int.from_bytes(view[-ICRC_LEN:], "little")
    return compute_icrc(ip_udp, view[:-ICRC_LEN]) == received
