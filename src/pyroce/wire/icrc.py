"""Invariant CRC (IBA annex A17.3.3, rocev2.md): compute and verify, IPv4 and IPv6.

The ICRC is zlib's CRC-32 over ``8 x 0xFF | IP header | UDP header | BTH .. pad`` with the
fields routers may change replaced by ones: IPv4 TOS, TTL and header checksum; IPv6 traffic
class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN, reserved). It goes
on the wire least-significant byte first. The CRC of the 8-byte prefix is computed once.
``isal``'s crc32 gives the same values as zlib's, several times faster, when installed.
"""

from __future__ import annotations

from typing import Final

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; zlib is the fallback
    from zlib import crc32

from pyroce.wire.errors import LengthMismatch

Buffer = bytes | bytearray | memoryview
# ``memoryview`` for compiled code: mypyc has no C type for it and looks the builtin's name up
# on every use (~270 instructions); a ``Final`` name is a C static (an ``isinstance`` ~60)
MEMORYVIEW: Final = memoryview

ICRC_LEN: Final = 4
IPV4_UDP_LEN: Final = 28
IPV6_UDP_LEN: Final = 48
_PREFIX_CRC: Final = crc32(b"\xff" * 8)


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


def icrc_seed(ip_udp: Buffer) -> int:
    """CRC state after the 0xFF prefix and the masked IP + UDP headers.

    Every packet of one path and one length shares it, so a link can compute it once per
    (path, length) and pass it to ``icrc_from_seed``."""
    return crc32(_masked_headers(ip_udp), _PREFIX_CRC)


RESIDUE: Final = 0x2144DF1C  # CRC-32 of any message followed by its own CRC, little-endian
_BTH_BYTE4: Final = 4
_MAX_CORRECTIONS: Final = 4096
_corrections: Final[dict[int, int]] = {}
# byte4_correction(length, 0) by length (-1: not yet known): byte 4 holds FECN, BECN and
# reserved bits, 0 in nearly every packet, and a list read is a fraction of a lookup by an int key
_ZERO_BYTE4_LEN: Final = 9216  # up to a jumbo frame's payload
_ZERO_BYTE4: Final[list[int]] = [-1] * _ZERO_BYTE4_LEN


def byte4_correction(length: int, byte4: int) -> int:
    """What to XOR into the CRC of ``length`` bytes whose byte 4 is ``byte4`` to get the CRC
    with byte 4 masked to 0xFF.

    CRC-32 is affine: two inputs of one length differ in CRC by the raw CRC of their XOR,
    which here is zero but for byte 4. So one CRC call covers BTH through padding, with no
    slicing and no copy; the correction is cached per (length, byte 4)."""
    if byte4 == 0 and length < _ZERO_BYTE4_LEN and _ZERO_BYTE4[length] >= 0:
        return _ZERO_BYTE4[length]
    key = (length << 8) | byte4
    value = _corrections.get(key)
    if value is None:
        if len(_corrections) >= _MAX_CORRECTIONS:
            _corrections.clear()
        diff = bytearray(length)
        diff[_BTH_BYTE4] = byte4 ^ 0xFF
        value = _corrections[key] = crc32(diff, 0xFFFFFFFF) ^ 0xFFFFFFFF
        if byte4 == 0 and length < _ZERO_BYTE4_LEN:
            _ZERO_BYTE4[length] = value
    return value


def icrc_from_seed(seed: int, roce: Buffer) -> int:
    """ICRC of ``roce`` (BTH through padding, no ICRC) after headers summarised by ``seed``."""
    length, byte4 = len(roce), roce[_BTH_BYTE4]
    # byte4_correction's cache read inline (once per packet: a call costs more than the read)
    correction = _ZERO_BYTE4[length] if byte4 == 0 and length < _ZERO_BYTE4_LEN else -1
    crc: int = crc32(roce, seed)  # typed: compiled, the XOR below is on machine ints
    return crc ^ (correction if correction >= 0 else byte4_correction(length, byte4))


def compute_icrc(ip_udp: Buffer, roce: Buffer) -> int:
    """ICRC of a RoCEv2 packet.

    ``ip_udp``: the raw IPv4 (20 bytes, no options) or IPv6 (40) header and the UDP header,
    exactly as on the wire (lengths included). ``roce``: BTH through padding, without the ICRC.
    """
    return icrc_from_seed(icrc_seed(ip_udp), roce)


def residue_from_seed(seed: int, udp_payload: Buffer) -> int:
    """The CRC residue of ``udp_payload`` (BTH through ICRC) after headers summarised by
    ``seed``: ``RESIDUE`` when its ICRC is right, else off by the CRC of what differs."""
    size = len(udp_payload)
    if size < ICRC_LEN + _BTH_BYTE4 + 1:
        return ~RESIDUE & 0xFFFFFFFF
    byte4 = udp_payload[_BTH_BYTE4]
    correction = _ZERO_BYTE4[size] if byte4 == 0 and size < _ZERO_BYTE4_LEN else -1  # as icrc_from_seed reads it
    crc: int = crc32(udp_payload, seed)  # typed: compiled, the XOR below is on machine ints
    return crc ^ (correction if correction >= 0 else byte4_correction(size, byte4))


def verify_icrc_from_seed(seed: int, udp_payload: Buffer) -> bool:
    """Whether the last 4 bytes of ``udp_payload`` are its ICRC, given the headers' seed
    (checked as the CRC residue of the whole payload, ICRC included)."""
    return residue_from_seed(seed, udp_payload) == RESIDUE


def seed_difference(seed_a: int, seed_b: int, length: int) -> int:
    """How the CRCs of the same ``length`` bytes differ when started from ``seed_a`` and from
    ``seed_b`` (CRC-32 is affine: the difference does not depend on the bytes)."""
    zeros = bytes(length)
    return crc32(zeros, seed_a) ^ crc32(zeros, seed_b)


def verify_icrc(ip_udp: Buffer, udp_payload: Buffer) -> bool:
    """Whether the last 4 bytes of ``udp_payload`` are the right ICRC for the rest."""
    return verify_icrc_from_seed(icrc_seed(ip_udp), udp_payload)
