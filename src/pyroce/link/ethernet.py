"""RoCEv2 in whole Ethernet frames, for a wire that carries frames rather than datagrams: a MAC
model in an RTL simulation, a packet generator, a frame-level test bench. No sockets.

The engine hands the link UDP payloads, as it would a socket; the link wraps each in the
Ethernet, IP and UDP headers a kernel would add (IPv4 ID 0 with DF, the headers the ICRC was
computed over; MACs by pyroce's rule, ``ib.addressing.mac_of``) and queues the frame for
whoever models the wire (``frames``). Frames the wire brings (``receive_frame``) are unwrapped
into the engine's inbox; one that is not RoCEv2 for this link's address, or for a multicast
group it joined (``join``), is dropped and counted, as a NIC's MAC and IP filters would drop it.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Final

from pyroce.ib.addressing import mac_of
from pyroce.ib.counters import Counters
from pyroce.link.memory import QueuedLink
from pyroce.wire.errors import MalformedPacket
from pyroce.wire.framing import ETHERTYPE_IPV4, ETHERTYPE_IPV6, format_address, locate_datagram, pack_ip_udp

ETH_HEADER_LEN: Final = 14


class EthernetLink(QueuedLink):
    """One address whose datagrams travel as Ethernet frames (``frames`` out, ``receive_frame`` in)."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.mac = mac_of(address)
        self._ethertype = (ETHERTYPE_IPV4 if "." in address else ETHERTYPE_IPV6).to_bytes(2, "big")
        self.frames: deque[bytes] = deque()  # sent, for the wire's model to take in order
        self.counters: Counter[str] = Counters()  # frames_sent, frames_received, and the drops by reason
        self.groups: set[str] = set()  # the multicast addresses whose frames it takes

    def send(self, data: memoryview | bytes, peer: str) -> bool:
        path = self.tx_path(peer)
        frame = bytearray(ETH_HEADER_LEN + path.header_len + len(data))
        frame[:ETH_HEADER_LEN] = mac_of(peer) + self.mac + self._ethertype
        start = ETH_HEADER_LEN + pack_ip_udp(frame, ETH_HEADER_LEN, path.ip, path.udp, len(data))
        frame[start:] = data
        self.frames.append(bytes(frame))
        self.counters["frames_sent"] += 1
        return True

    def receive_frame(self, frame: bytes) -> None:
        """A frame off the wire: its RoCEv2 datagram joins the inbox if it is for this address."""
        try:
            where = locate_datagram(frame)
        except MalformedPacket as exc:
            self.counters[f"drop_{type(exc).__name__}"] += 1
            return
        dest = format_address(where.ip.dst)
        ours = dest == self.address or dest in self.groups
        if not ours or frame[:6] != (self.mac if dest == self.address else mac_of(dest)):
            self.counters["drop_not_ours"] += 1
            return
        self.counters["frames_received"] += 1
        self.deliver(bytes(frame[where.roce_at : where.end]), format_address(where.ip.src), dest)

    def join(self, group: str) -> None:
        self.groups.add(group)

    def leave(self, group: str) -> None:
        self.groups.discard(group)
