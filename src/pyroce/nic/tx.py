"""Gathering built packets into as few system calls as the link allows.

UDP GSO sends equal-sized datagrams to one peer in one call (the last may be shorter), and
each leaves with the IPv4 ID of its place in the send, which its ICRC must cover
(``RocePath``). ``TxBatch`` hands out where the next packet goes and which segment it is,
and sends the batch when the next packet cannot join it, when packets for another QP come
next, or when the engine's pass ends (``flush``), so what a QP sends in a pass shares sends. Without GSO (no kernel support, faults injected per datagram, the internal
loopback) every packet is a batch of its own.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from pyroce.nic.port import Port
from pyroce.wire.framing import MAX_GSO_BYTES, MAX_GSO_SEGMENTS, RocePath
from pyroce.wire.icrc import ICRC_LEN
from pyroce.wire.opcodes import BTH_LEN
from pyroce.wire.packet import Packet, PacketRun, packet_length

_NO_ICRC: Final = bytes(ICRC_LEN)  # an unsealed packet's ICRC


class TxBatch:
    """The engine's transmit buffer as one GSO send being gathered (``view[:end]``)."""

    __slots__ = ("_counters", "_dqpn", "_peer", "_port", "end", "gso", "segment_size", "segments", "sent_bytes",
                 "view")  # fmt: skip

    def __init__(self, view: memoryview, port: Port, counters: Counter[str]) -> None:
        self.view = view  # the engine's transmit buffer
        # Sends the device's way (loopback, capture, link): a datagram of its own through the
        # fault injector if the port has one (``transmit``), else straight out (``put``: a native
        # call, compiled, where a bound method stored here was a generic one)
        self._port = port
        self._counters = counters  # the device's: drop_tx_full
        self.sent_bytes = 0  # counted per send, kept as an int (``pyroce.ib.counters``)
        self._peer = ""
        self._dqpn = -1
        self.gso = False
        self.end = self.segments = self.segment_size = 0

    def send(self, peer: str, dqpn: int, path: RocePath, items: list[Packet | PacketRun | bytes]) -> None:
        """Build ``items`` (a run's packets in one loop; ``bytes``: a packet built from BTH
        through padding, ``AckTemplate``'s or ``BthTemplate``'s) for QP ``dqpn`` at ``peer``
        into the batch; what is gathered for another QP goes first, what does not fit goes out
        on the way, the rest with the next ``flush`` (so a QP's packets of several messages
        share a send). One QP's packets only: a NIC with several engines on its address has the
        kernel steer each send by its first datagram's DestQP (``link.steering``). GSO batches
        go only where the port allows them: not through faults (which hit single datagrams),
        not to a joined group (which carries single datagrams); to this engine's own QPs as one
        loopback entry, to another engine of this address through the kernel."""
        port = self._port
        sealed = True  # each packet's ICRC computed
        if peer == port.address and not port.steered_away(dqpn):
            gso = port.loopback_runs
            # Without faults nothing checks the loopback's ICRCs (``Port.receive``), and
            # without a capture nothing shows them: left zero, as Linux leaves the UDP
            # checksums of its loopback's packets uncomputed
            sealed = not gso or port.capture is not None
        else:
            gso = port.gso and peer not in port.joined
        if self.segments and (dqpn != self._dqpn or peer != self._peer or gso != self.gso):
            self.flush()
        self._peer = peer
        self._dqpn = dqpn
        self.gso = gso
        view = self.view
        for item in items:
            if type(item) is bytes:  # built already: copied, its ICRC added
                if not gso:  # a datagram of its own, straight out (the batch holds nothing)
                    view[: len(item)] = item
                    size = path.seal(view, 0, len(item))
                    self.sent_bytes += size
                    if port.faults is None:
                        port.put(peer, view[:size])
                    else:
                        port.transmit(peer, view[:size])
                    continue
                offset, segment, _ = self.slot(len(item) + ICRC_LEN)
                view[offset : offset + len(item)] = item
                if sealed:
                    self.added(path.seal(view, offset, len(item), segment))
                else:
                    view[offset + len(item) : offset + len(item) + ICRC_LEN] = _NO_ICRC
                    self.added(len(item) + ICRC_LEN)
            elif type(item) is PacketRun:
                size = BTH_LEN + item.pmtu + ICRC_LEN
                index, total = 0, len(item.payload) // item.pmtu
                while index < total:
                    offset, segment, count = self.slot(size, total - index)
                    path.build_run_into(view, offset, item, index, count, segment, sealed)
                    self.added(size, count)
                    index += count
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
        self.sent_bytes += self.end
        try:
            if self.segments == 1:
                port = self._port
                if port.faults is None:
                    port.put(self._peer, data)
                else:
                    port.transmit(self._peer, data)
            elif not self._port.send_segments(data, self.segment_size, self._peer):
                self._counters["drop_tx_full"] += self.segments
        finally:  # whatever happened to them, these packets are not sent again
            self.end = self.segments = 0
