"""IPv4/IPv6 + UDP framing around RoCEv2 packets, for the ICRC and for raw links.

A UDP socket link only needs ``build_datagram`` (the UDP payload with its ICRC, computed over
the IP header the kernel will send: rocev2.md's IPv4 trap). Raw links and pcap files need
whole frames: ``parse_frame`` and ``build_frame`` handle Ethernet (with VLAN tags), Linux
cooked and raw-IP link types. Lengths and the IPv4 header checksum are always computed on
build, never taken from the value.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Final, NamedTuple

from pyroce.wire.bth import ACKREQ
from pyroce.wire.errors import BuildError, LengthMismatch, NotRoce, TruncatedPacket
from pyroce.wire.icrc import (
    ICRC_LEN,
    IPV4_UDP_LEN,
    IPV6_UDP_LEN,
    MEMORYVIEW,
    RESIDUE,
    byte4_correction,
    compute_icrc,
    crc32,
    icrc_from_seed,
    icrc_seed,
    residue_from_seed,
    seed_difference,
)
from pyroce.wire.ipv4_id import id_solver
from pyroce.wire.opcodes import BTH_LEN
from pyroce.wire.packet import Buffer, Packet, PacketRun, build_packet_into, packet_length, parse_packet
from pyroce.wire.psn import psn_add

ROCE_UDP_PORT: Final = 4791
IPPROTO_UDP: Final = 17
IPV4_DF: Final = 0x4000
DEFAULT_TTL: Final = 64

# pcap link types (tcpdump.org/linktypes.html)
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPES: Final = frozenset({LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6})
SUPPORTED_LINKTYPES: Final = "Ethernet, Linux cooked or raw IP"

ETHERTYPE_IPV4: Final = 0x0800
ETHERTYPE_IPV6: Final = 0x86DD
_ETHERTYPE_VLAN: Final = (0x8100, 0x88A8)
_ETH_LEN: Final = 14
_VLAN_LEN: Final = 4
_SLL_LEN: Final = 16

_IPV4: Final = struct.Struct(">BBHHHBBH4s4s")
_IPV6: Final = struct.Struct(">IHBB16s16s")
_UDP: Final = struct.Struct(">HHHH")
_IPV4_LEN: Final = 20
_IPV6_LEN: Final = 40
_UDP_LEN: Final = 8


class IPv4Header(NamedTuple):
    """IPv4 header fields; total length and checksum are computed on build. Defaults are
    what rxe and an unconnected Linux UDP socket with PMTU discovery send (ID 0, DF, TTL 64)."""

    src: bytes
    dst: bytes
    tos: int = 0
    ident: int = 0
    flags_frag: int = IPV4_DF
    ttl: int = DEFAULT_TTL
    proto: int = IPPROTO_UDP


class IPv6Header(NamedTuple):
    """IPv6 header fields; payload length is computed on build."""

    src: bytes
    dst: bytes
    traffic_class: int = 0
    flow_label: int = 0
    hop_limit: int = DEFAULT_TTL
    next_header: int = IPPROTO_UDP


class UdpHeader(NamedTuple):
    """UDP header fields; length is computed on build. RoCEv2 senders put checksum 0."""

    sport: int
    dport: int = ROCE_UDP_PORT
    checksum: int = 0


IpHeader = IPv4Header | IPv6Header


def ip_header(src: str, dst: str, ident: int = 0) -> IpHeader:
    """The IP header (with the defaults above) of a datagram between two addresses in text
    form: IPv4 for dotted quads, IPv6 otherwise; ``ident``: an IPv4 header's ID."""
    source, dest = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if source.version == 4 and dest.version == 4:
        return IPv4Header(source.packed, dest.packed, ident=ident)
    if source.version == 6 and dest.version == 6:
        return IPv6Header(source.packed, dest.packed)
    raise BuildError(f"no IP header goes from {src} to {dst}: one is IPv4, the other IPv6")


class Frame(NamedTuple):
    """A whole captured or raw-link frame holding one RoCEv2 packet."""

    l2: bytes  # link-layer header as received (b"" for raw IP)
    ip: IpHeader
    udp: UdpHeader
    packet: Packet
    icrc: int  # as received
    icrc_ok: bool  # whether ``icrc`` is right for the rest of the frame
    trailer: bytes = b""  # bytes after the IP datagram (Ethernet padding)


def ipv4_checksum(header: Buffer) -> int:
    """RFC 791 header checksum of ``header`` with its checksum field taken as given."""
    words = struct.unpack(f">{len(header) // 2}H", header)
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pack_ip_udp(buf: bytearray | memoryview, offset: int, ip: IpHeader, udp: UdpHeader, udp_payload_len: int) -> int:
    """Write the IP and UDP headers for a ``udp_payload_len``-byte payload; returns their size."""
    udp_len = _UDP_LEN + udp_payload_len
    try:
        if isinstance(ip, IPv4Header):
            _IPV4.pack_into(
                buf,
                offset,
                0x45,
                ip.tos,
                _IPV4_LEN + udp_len,
                ip.ident,
                ip.flags_frag,
                ip.ttl,
                ip.proto,
                0,
                ip.src,
                ip.dst,
            )
            checksum = ipv4_checksum(buf[offset : offset + _IPV4_LEN])
            struct.pack_into(">H", buf, offset + 10, checksum)
            ip_len = _IPV4_LEN
        else:
            word0 = (6 << 28) | (ip.traffic_class << 20) | ip.flow_label
            _IPV6.pack_into(buf, offset, word0, udp_len, ip.next_header, ip.hop_limit, ip.src, ip.dst)
            ip_len = _IPV6_LEN
        _UDP.pack_into(buf, offset + ip_len, udp.sport, udp.dport, udp_len, udp.checksum)
    except struct.error as exc:
        raise BuildError(f"IP/UDP header field out of range: {exc}") from None
    return ip_len + _UDP_LEN


MAX_GSO_SEGMENTS: Final = 64  # segments of one UDP GSO send that carry their own IPv4 ID (UDP_MAX_SEGMENTS)
MAX_GSO_BYTES: Final = 65507 - 8  # UDP payload of one send (IPv4 datagram limit), whatever the segments
_MAX_SEEDS: Final = 4096  # cached (length, segment) seeds per path; a flood of odd lengths clears it


class RocePath:
    """The IP and UDP headers that carry one flow's packets, with the ICRC state after them
    cached per UDP length (a flow sends few distinct lengths), so building or checking a
    packet CRCs only its own bytes. This is what a UDP or raw link keeps per peer.

    The IPv4 trap: the ICRC covers the IPv4 ID, which a UDP socket does not show. UDP GSO
    gives segment k of a send the ID k, so a packet built as ``segment`` k carries the ICRC for
    ID k; other peers (Linux rxe) count their IDs up. ``verify`` accepts the ICRC of whichever
    ID makes it valid (``wire.ipv4_id``); an IPv6 header has no ID, and all 32 bits check."""

    __slots__ = ("_differences", "_seeds", "header_len", "ip", "udp")

    def __init__(self, ip: IpHeader, udp: UdpHeader) -> None:
        self.ip = ip
        self.udp = udp
        self.header_len = IPV4_UDP_LEN if isinstance(ip, IPv4Header) else IPV6_UDP_LEN
        self._seeds: dict[int, int] = {}
        self._differences: dict[int, int] = {}  # (length, segment) -> residue of that segment's ID against ID 0's

    def headers(self, udp_payload_len: int, segment: int = 0) -> bytearray:
        """The raw IP and UDP headers of a datagram with ``udp_payload_len`` bytes of payload
        (sent as GSO ``segment``: an IPv4 ID one higher per segment)."""
        buf = bytearray(self.header_len)
        ip = self.ip
        if segment and isinstance(ip, IPv4Header):
            ip = ip._replace(ident=(ip.ident + segment) & 0xFFFF)
        pack_ip_udp(buf, 0, ip, self.udp, udp_payload_len)
        return buf

    def seed(self, udp_payload_len: int, segment: int = 0) -> int:
        """ICRC state after the masked headers of a ``udp_payload_len``-byte datagram."""
        if self.header_len == IPV6_UDP_LEN:
            segment = 0
        key = udp_payload_len * MAX_GSO_SEGMENTS + segment
        seed = self._seeds.get(key)
        if seed is None:
            if len(self._seeds) >= _MAX_SEEDS:
                self._seeds.clear()
            seed = self._seeds[key] = icrc_seed(self.headers(udp_payload_len, segment))
        return seed

    def build_into(self, buf: bytearray | memoryview, offset: int, pkt: Packet, segment: int = 0) -> int:
        """Write ``pkt`` and its ICRC at ``offset`` of ``buf``; returns the UDP payload length."""
        return self.seal(buf, offset, build_packet_into(buf, offset, pkt), segment)

    def seal(self, buf: bytearray | memoryview, offset: int, written: int, segment: int = 0) -> int:
        """Write the ICRC after the ``written`` bytes (BTH through padding) at ``offset``, for
        GSO ``segment``; returns the UDP payload length."""
        size = written + ICRC_LEN
        seed = self._seeds.get(size * MAX_GSO_SEGMENTS + segment)  # runs per packet: the cache is read inline
        view = buf if isinstance(buf, MEMORYVIEW) else MEMORYVIEW(buf)
        icrc = icrc_from_seed(self.seed(size, segment) if seed is None else seed, view[offset : offset + written])
        _ICRC.pack_into(buf, offset + written, icrc)
        return size

    def build_run_into(self, buf: memoryview, offset: int, run: PacketRun, first: int, count: int,
                       segment: int = 0, sealed: bool = True) -> int:  # fmt: skip
        """Write packets ``first`` .. ``first + count - 1`` of ``run`` back to back from
        ``offset``, as GSO segments from ``segment`` on: per packet one BTH pack, one payload
        copy and one CRC (the bytes ``build_into`` writes for ``run.packets()``). Returns the
        bytes written. ``sealed=False`` leaves each ICRC zero, for packets nothing will check
        (an engine's own loopback: ``nic.tx``)."""
        pmtu = run.pmtu
        size = BTH_LEN + pmtu + ICRC_LEN
        correction: int = byte4_correction(size - ICRC_LEN, 0)  # byte 4 (FECN, BECN, reserved) is 0
        last = len(run.payload) // pmtu - 1
        ackreq_at = last if run.ackreq_last else -1
        psn, payload, seeds = run.psn, run.payload, self._seeds
        # Per packet: one copy, one CRC and one pack that writes its ICRC and the next packet's
        # BTH (adjacent in the batch), as little-endian words of byte-swapped values (the BTH
        # is big-endian): the BTH's first 8 bytes (opcode, flags, P_Key, DestQP), AckReq|PSN.
        # Compiled, the callables are locals (no global or method lookup per packet) and the
        # three first words are three locals (a tuple indexed by a variable is boxed per read).
        # The opcode is the word's top byte: swapped, its lowest (one swap for the three).
        head = _swap64((run.pkey << 32) | run.dqpn)
        first_head, middle_head, last_head = head | run.first_opcode, head | run.opcode, head | run.last_opcode
        pack_icrc, pack_icrc_bth, checksum = _ICRC.pack_into, _ICRC_BTH.pack_into, crc32
        stop = first + count
        word = psn_add(psn, first) | (ACKREQ if first == ackreq_at else 0)
        _BTH_WORDS.pack_into(buf, offset, first_head if first == 0 else last_head if first == last else middle_head,
                             _swap32(word))  # fmt: skip
        for index in range(first, stop):
            end = offset + BTH_LEN + pmtu
            start = index * pmtu
            buf[offset + BTH_LEN : end] = payload[start : start + pmtu]
            icrc = 0
            if sealed:
                seed = seeds.get(size * MAX_GSO_SEGMENTS + segment)  # read inline: once per packet
                crc: int = checksum(buf[offset:end], self.seed(size, segment) if seed is None else seed)
                icrc = crc ^ correction
            following = index + 1
            if following < stop:
                word = psn_add(psn, following) | (ACKREQ if following == ackreq_at else 0)
                pack_icrc_bth(buf, end, icrc, last_head if following == last else middle_head, _swap32(word))
            else:
                pack_icrc(buf, end, icrc)
            offset = end + ICRC_LEN
            segment += 1
        return count * size

    def verify(self, udp_payload: Buffer, segment: int = 0) -> bool:
        """Whether ``udp_payload`` (BTH through ICRC) carries the right ICRC for this path: for
        IPv4, with any IPv4 ID (the ID 0 this path assumes, a GSO segment's, a counter's).
        ``segment``: its place in the datagram the socket gave; the ID a GSO send gives that
        place is tried before any other is solved for (``wire.ipv4_id``), as one compare: the
        solver's tables are built per length, which the last packets of messages of many
        sizes would keep rebuilding."""
        size = len(udp_payload)
        seed = self._seeds.get(size * MAX_GSO_SEGMENTS)  # runs per packet: the cache is read inline
        residue = residue_from_seed(self.seed(size) if seed is None else seed, udp_payload)
        if residue == RESIDUE:
            return True
        if self.header_len != IPV4_UDP_LEN:
            return False
        difference = residue ^ RESIDUE
        if 0 < segment < MAX_GSO_SEGMENTS:
            expected = self._differences.get(size * MAX_GSO_SEGMENTS + segment)
            if (self._difference(size, segment) if expected is None else expected) == difference:
                return True
        return id_solver(size, _ipv4_headers_with_id).solve(difference) is not None

    def _difference(self, udp_payload_len: int, segment: int) -> int:
        """How the residue of a packet built as GSO ``segment`` differs from RESIDUE when it is
        checked as if its ID were ``ip.ident`` (cached like the seeds)."""
        if len(self._differences) >= _MAX_SEEDS:
            self._differences.clear()
        difference = seed_difference(self.seed(udp_payload_len, segment), self.seed(udp_payload_len), udp_payload_len)
        self._differences[udp_payload_len * MAX_GSO_SEGMENTS + segment] = difference
        return difference


_REFERENCE_IP: Final = IPv4Header(bytes(4), bytes(4))
_REFERENCE_UDP: Final = UdpHeader(ROCE_UDP_PORT)


GRH_LEN: Final = 40  # what a UD receive buffer starts with: the GRH, or on RoCEv2/IPv4 20 zero bytes and the IPv4 header


def network_header(ip: IpHeader, udp_payload_len: int) -> bytes:
    """The 40 bytes a UD receive buffer starts with for a packet that came with ``ip``
    (IBA 11.4.1.1; on RoCEv2 the GRH is the IP header): an IPv6 header as it is, or 20 zero
    bytes and the IPv4 header, checksum included (Linux rxe's ``rdma_network_hdr``), so
    ``ibv_init_ah_from_wc`` can tell the two apart and answer the sender."""
    buf = bytearray(GRH_LEN + _UDP_LEN)
    offset = GRH_LEN - _IPV4_LEN if isinstance(ip, IPv4Header) else 0
    pack_ip_udp(buf, offset, ip, _REFERENCE_UDP, udp_payload_len)
    return bytes(buf[:GRH_LEN])


def carries_ipv4(network: bytes) -> bool:
    """Whether the 40 bytes ``network_header`` wrote hold an IPv4 header (20 zero bytes first:
    an IPv6 header or a GRH starts with its version)."""
    return not any(network[:GRH_LEN - _IPV4_LEN])


def _ipv4_headers_with_id(udp_payload_len: int, ident: int) -> bytearray:
    """IPv4 and UDP headers with ID ``ident`` (for ``wire.ipv4_id``: the addresses cancel out)."""
    buf = bytearray(IPV4_UDP_LEN)
    pack_ip_udp(buf, 0, _REFERENCE_IP._replace(ident=ident), _REFERENCE_UDP, udp_payload_len)
    return buf


_ICRC: Final = struct.Struct("<I")
_BTH_WORDS: Final = struct.Struct("<QI")  # a BTH as two byte-swapped words: opcode through DestQP, AckReq|PSN
_ICRC_BTH: Final = struct.Struct("<IQI")  # a packet's ICRC, then the next packet's BTH as _BTH_WORDS


def _swap32(value: int) -> int:
    """``value``'s four bytes in the other order."""
    return (value >> 24) | (value >> 8 & 0xFF00) | (value << 8 & 0xFF0000) | (value & 0xFF) << 24


def _swap64(value: int) -> int:
    """``value``'s eight bytes in the other order."""
    return _swap32(value & 0xFFFFFFFF) << 32 | _swap32(value >> 32)


def build_datagram(pkt: Packet, ip: IpHeader, udp: UdpHeader) -> bytearray:
    """The UDP payload of ``pkt``: BTH through padding, then the ICRC computed over the IP and
    UDP headers that will carry it."""
    buf = bytearray(packet_length(pkt))
    RocePath(ip, udp).build_into(buf, 0, pkt)
    return buf


def build_frame(frame: Frame) -> bytearray:
    """The bytes of ``frame``: link header, IP, UDP, packet, a freshly computed ICRC and the
    trailer (``frame.icrc`` and ``frame.icrc_ok`` are ignored)."""
    size = packet_length(frame.packet)
    hdr_len = IPV4_UDP_LEN if isinstance(frame.ip, IPv4Header) else IPV6_UDP_LEN
    l2 = len(frame.l2)
    buf = bytearray(l2 + hdr_len + size + len(frame.trailer))
    buf[:l2] = frame.l2
    end = _fill(buf, l2, frame.ip, frame.udp, frame.packet, size)
    buf[end:] = frame.trailer
    return buf


def _fill(buf: bytearray, offset: int, ip: IpHeader, udp: UdpHeader, pkt: Packet, size: int) -> int:
    """Headers, packet and ICRC at ``offset``; returns the end offset."""
    hdr_len = pack_ip_udp(buf, offset, ip, udp, size)
    start = offset + hdr_len
    written = build_packet_into(buf, start, pkt)
    view = memoryview(buf)
    icrc = compute_icrc(view[offset:start], view[start : start + written])
    end = start + written + ICRC_LEN
    buf[end - ICRC_LEN : end] = icrc.to_bytes(ICRC_LEN, "little")
    return end


def _ip_offset(view: memoryview, linktype: int) -> int:
    """Offset of the IP header in a frame of ``linktype``."""
    if linktype == LINKTYPE_ETHERNET:
        offset, ethertype_at = _ETH_LEN, 12
        if len(view) < _ETH_LEN:
            raise TruncatedPacket(f"{len(view)}-byte frame is shorter than an Ethernet header")
        ethertype = int.from_bytes(view[12:14], "big")
        while ethertype in _ETHERTYPE_VLAN:
            ethertype_at = offset - 2 + _VLAN_LEN
            offset += _VLAN_LEN
            if len(view) < offset:
                raise TruncatedPacket("frame ends inside a VLAN tag")
            ethertype = int.from_bytes(view[ethertype_at : ethertype_at + 2], "big")
        if ethertype not in (ETHERTYPE_IPV4, ETHERTYPE_IPV6):
            raise NotRoce(f"ethertype 0x{ethertype:04x} is not IP")
        return offset
    if linktype == LINKTYPE_LINUX_SLL:
        if len(view) < _SLL_LEN:
            raise TruncatedPacket(f"{len(view)}-byte frame is shorter than a Linux cooked header")
        return _SLL_LEN
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return 0
    raise NotRoce(f"link type {linktype} is not supported ({SUPPORTED_LINKTYPES})")


class Datagram(NamedTuple):
    """Where a frame's RoCEv2 UDP datagram lies, and its IP and UDP headers."""

    ip_at: int  # offset of the IP header
    roce_at: int  # offset of the UDP payload (the BTH)
    end: int  # end of the IP datagram (Ethernet padding may follow)
    ip: IpHeader
    udp: UdpHeader


def locate_datagram(data: Buffer, linktype: int = LINKTYPE_ETHERNET) -> Datagram:
    """The IP and UDP headers of a frame to UDP port 4791, and where its payload lies.

    Raises ``NotRoce`` for frames that are not IP/UDP to port 4791 (or are IP fragments or
    carry IPv4 options), ``TruncatedPacket`` and ``LengthMismatch`` when IP and UDP lengths
    disagree with the bytes present."""
    view = memoryview(data)
    ip_at = _ip_offset(view, linktype)
    if len(view) < ip_at + 1:
        raise TruncatedPacket("frame ends before the IP header")
    version = view[ip_at] >> 4
    if version == 4:
        if len(view) < ip_at + _IPV4_LEN:
            raise TruncatedPacket("frame ends inside the IPv4 header")
        vihl, tos, total, ident, flags_frag, ttl, proto, _, src, dst = _IPV4.unpack_from(view, ip_at)
        if vihl != 0x45:
            raise NotRoce(f"IPv4 header of {(vihl & 0xF) * 4} bytes: RoCEv2 uses no IPv4 options")
        if flags_frag & 0x3FFF:
            raise NotRoce("IPv4 fragment: RoCEv2 packets are never fragmented")
        ip: IpHeader = IPv4Header(src, dst, tos, ident, flags_frag, ttl, proto)
        udp_at, ip_end = ip_at + _IPV4_LEN, ip_at + total
        if total < _IPV4_LEN:
            raise LengthMismatch(f"IPv4 total length {total} is shorter than its header")
    elif version == 6:
        if len(view) < ip_at + _IPV6_LEN:
            raise TruncatedPacket("frame ends inside the IPv6 header")
        word0, payload_len, proto, hop, src, dst = _IPV6.unpack_from(view, ip_at)
        ip = IPv6Header(src, dst, (word0 >> 20) & 0xFF, word0 & 0xFFFFF, hop, proto)
        udp_at = ip_at + _IPV6_LEN
        ip_end = udp_at + payload_len
    else:
        raise NotRoce(f"IP version {version}")
    if proto != IPPROTO_UDP:
        raise NotRoce(f"IP protocol {proto} is not UDP")
    if ip_end > len(view):
        raise TruncatedPacket(f"IP says {ip_end - ip_at} bytes, the frame holds {len(view) - ip_at}")
    if ip_end < udp_at + _UDP_LEN:
        raise LengthMismatch("IP datagram too short for a UDP header")
    sport, dport, udp_len, checksum = _UDP.unpack_from(view, udp_at)
    if dport != ROCE_UDP_PORT:
        raise NotRoce(f"UDP port {dport} is not RoCEv2 ({ROCE_UDP_PORT})")
    if udp_len != ip_end - udp_at:
        raise LengthMismatch(f"UDP length {udp_len} disagrees with the IP length ({ip_end - udp_at})")
    return Datagram(ip_at, udp_at + _UDP_LEN, ip_end, ip, UdpHeader(sport, dport, checksum))


def parse_frame(data: Buffer, linktype: int = LINKTYPE_ETHERNET) -> Frame:
    """Parse a whole frame carrying RoCEv2 and check its ICRC.

    Raises what ``locate_datagram`` and ``parse_packet`` raise."""
    view = memoryview(data)
    where = locate_datagram(view, linktype)
    udp_payload = view[where.roce_at : where.end]
    packet = parse_packet(udp_payload)
    icrc = int.from_bytes(udp_payload[-ICRC_LEN:], "little")
    icrc_ok = compute_icrc(view[where.ip_at : where.roce_at], udp_payload[:-ICRC_LEN]) == icrc
    return Frame(bytes(view[: where.ip_at]), where.ip, where.udp, packet, icrc, icrc_ok, bytes(view[where.end :]))


def format_address(raw: bytes) -> str:
    """``10.0.0.2`` or ``fe80::1`` for a 4- or 16-byte address."""
    return str(ipaddress.ip_address(bytes(raw)))
