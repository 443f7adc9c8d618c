"""UDP GSO super-datagrams in captures, split back into their RoCEv2 packets.

A capture on the sending host (tcpdump on ``lo``, an AF_PACKET socket) sees a UDP GSO send
before the kernel segments it: one IP datagram holding up to 64 packets back to back, each
with the ICRC of the IPv4 ID its segment gets on the wire (base + k). Nothing in the datagram
says it is one, but RoCEv2 says how long a packet can be: a packet's length follows from its
BTH opcode (headers, and a payload that is none, 8 bytes, or one path MTU for every packet but
a message's last), so a UDP payload longer than its first packet, cut every such length into
packets with the same destination QP and consecutive PSNs (or into packets that carry no
payload), is a super-datagram. Segments are equal-sized but the last, which may be shorter.
"""

from __future__ import annotations

from typing import Final

from pyroce.wire.errors import MalformedPacket
from pyroce.wire.framing import (
    LINKTYPE_ETHERNET,
    IPv4Header,
    IPv6Header,
    locate_datagram,
    pack_ip_udp,
)
from pyroce.wire.icrc import ICRC_LEN, IPV4_UDP_LEN, IPV6_UDP_LEN, Buffer
from pyroce.wire.mtu import Mtu, mtu_to_bytes
from pyroce.wire.opcodes import BTH_LEN, OPCODES, PayloadRule
from pyroce.wire.packet import parse_packet
from pyroce.wire.psn import psn_add

_FIXED_PAYLOAD: Final = {PayloadRule.NONE: 0, PayloadRule.FIXED8: 8}
_PMTUS: Final = tuple(mtu_to_bytes(mtu) for mtu in Mtu)


def gso_segment_size(udp_payload: Buffer) -> int | None:
    """The segment size of the GSO super-datagram ``udp_payload``, or None when it is one
    packet (or not RoCEv2 at all)."""
    view = memoryview(udp_payload)
    if len(view) < BTH_LEN or (info := OPCODES[view[0]]) is None:
        return None
    fixed = _FIXED_PAYLOAD.get(info.payload)
    payloads = (fixed,) if fixed is not None else _PMTUS
    for payload in payloads:
        size = info.hdr_len + payload + ICRC_LEN
        if size < len(view) and _splits(view, size, sequential=fixed is None):
            return size
    return None


def _splits(view: memoryview, size: int, sequential: bool) -> bool:
    """Whether every ``size`` bytes of ``view`` start a RoCEv2 packet (to the first one's QP at
    the next PSN, when ``sequential``)."""
    try:
        packets = [parse_packet(view[start : start + size]) for start in range(0, len(view), size)]
    except MalformedPacket:
        return False
    if not sequential:
        return True
    first = packets[0].bth
    return all(p.bth.dqpn == first.dqpn and p.bth.psn == psn_add(first.psn, k) for k, p in enumerate(packets))


def split_gso_frame(data: Buffer, linktype: int = LINKTYPE_ETHERNET) -> list[bytes]:
    """The frames of the packets in frame ``data``: itself alone, or for a GSO super-datagram
    one frame per segment, with the link header, an IP header of its own length (IPv4 ID
    base + k) and a UDP header of its own length (checksum 0, which the ICRC masks anyway).

    Raises what ``framing.locate_datagram`` raises for a frame that is not to UDP port 4791."""
    view = memoryview(data)
    where = locate_datagram(view, linktype)
    size = gso_segment_size(view[where.roce_at : where.end])
    if size is None:
        return [bytes(view)]
    link = view[: where.ip_at]
    header_len = IPV4_UDP_LEN if isinstance(where.ip, IPv4Header) else IPV6_UDP_LEN
    udp = where.udp._replace(checksum=0)
    frames = []
    for k, start in enumerate(range(where.roce_at, where.end, size)):
        segment = view[start : min(start + size, where.end)]
        ip: IPv4Header | IPv6Header = where.ip
        if isinstance(ip, IPv4Header):
            ip = ip._replace(ident=(ip.ident + k) & 0xFFFF)
        frame = bytearray(len(link) + header_len + len(segment))
        frame[: len(link)] = link
        pack_ip_udp(frame, len(link), ip, udp, len(segment))
        frame[len(link) + header_len :] = segment
        frames.append(bytes(frame))
    return frames
