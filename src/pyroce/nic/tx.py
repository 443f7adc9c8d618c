"""Gathering built packets into as few system calls as the link allows.

UDP GSO sends equal-sized datagrams to one peer in one call (the last may be shorter), and
each leaves with the IPv4 ID of its place in the send, which its ICRC must cover
(``RocePath``). ``TxBatch`` hands out where the next packet goes and which segment it is,
and sends the batch when the next packet cannot join it, when packets for another peer come
next, or when the engine's pass ends (``flush``), so what many QPs send to one peer in a pass
shares sends. Without GSO (no kernel support, faults injected per datagram, the internal
loopback) every packet is a batch of its own.
"""

from __future__ import annotations

from collections import Counter

from pyroce.nic.port import Port
from pyroce.wire.framing import MAX_GSO_BYTES, MAX_GSO_SEGMENTS, RocePath
from pyroce.wire.icrc import ICRC_LEN
from pyroce.wire.opcodes import BTH_LEN
from pyroce.wire.packet import Packet, PacketRun, packet_length


class TxBatch:
    """The engine's transmit buffer as one GSO send being gathered (``view[:end]``)."""

    __slots__ = ("_counters", "_peer", "_port", "end", "gso", "segment_size", "segments", "view")

    def __init__(self, view: memoryview, port: Port, counters: Counter[str]) -> None:
        self.view = view  # the engine's transmit buffer
        self._port = port  # sends the device's way (faults, loopback, capture, link)
        self._counters = counters  # the device's: sent_bytes, drop_tx_full
        self._peer = ""
        self.gso = False
        self.end = self.segments = self.segment_size = 0

    def start(self, peer: str, gso: bool) -> None:
        """Packets for ``peer`` come next: what is gathered for another peer goes first."""
        gso = gso and self._port.gso
        if self.segments and (peer != self._peer or gso != self.gso):
            self.flush()
        self._peer = peer
        self.gso = gso

    def send(self, path: RocePath, items: list[Packet | PacketRun | bytes]) -> None:
        """Build ``items`` (a run's packets in one loop; ``bytes``: a packet built from BTH
        through padding, ``AckTemplate``'s) into the batch; what does not fit goes
        out on the way, the rest with the next ``flush`` (so the ACKs of many QPs to one peer
        share a send)."""
        view = self.view
        for item in items:
            if type(item) is PacketRun:
                size = BTH_LEN + item.pmtu + ICRC_LEN
                index, total = 0, len(item.payload) // item.pmtu
                while index < total:
                    offset, segment, count = self.slot(size, total - index)
                    path.build_run_into(view, offset, item, index, count, segment)
                    self.added(size, count)
                    index += count
            elif type(item) is bytes:  # built already (an ACK): copied, its ICRC added
                offset, segment, _ = self.slot(len(item) + ICRC_LEN)
                view[offset : offset + len(item)] = item
                self.added(path.seal(view, offset, len(item), segment))
            else:
                offset, segment, _ = self.slot(packet_length(item))  # type: ignore[arg-type]
                self.added(path.build_into(view, offset, item, segment))  # type: ignore[arg-type]

    def slot(self, size: int, wanted: int = 1) -> tuple[int, int, int]:
        """Where the next ``size``-byte packets go: offset, GSO segment index of the first,
        and how many of the ``wanted`` fit there (at least one; the batch is sent first if
        not even one could join it)."""
        if self.segments and (size > self.segment_size or not self._room(size)):
            self.flush()
        if not self.segments:
            self.segment_size = size
        if size < self.segment_size or not self.gso:
            return self.end, self.segments, 1  # a shorter packet can only be the last
        return self.end, self.segments, max(1, min(wanted, self._room(size)))

    def _room(self, size: int) -> int:
        return min(MAX_GSO_SEGMENTS - self.segments, (MAX_GSO_BYTES - self.end) // size)

    def added(self, size: int, count: int = 1) -> None:
        """``count`` packets of ``size`` bytes are built at the offset ``slot`` gave."""
        self.end += size * count
        self.segments += count
        if size < self.segment_size or not self.gso:  # only the last segment may be shorter
            self.flush()

    def flush(self) -> None:
        if not self.segments:
            return
        data = self.view[: self.end]
        self._counters["sent_bytes"] += self.end
        try:
            if self.segments == 1:
                self._port.transmit(self._peer, data)
            elif not self._port.send_segments(data, self.segment_size, self._peer):
                self._counters["drop_tx_full"] += self.segments
        finally:  # whatever happened to them, these packets are not sent again
            self.end = self.segments = 0
