"""What a device sent and received, as IP frames a pcap reader (tshark, ``pyroce decode``)
takes: the view of a capture on the wire, taken inside the NIC.

A UDP GSO send is recorded as the datagrams the kernel makes of it (segment k with IPv4 ID
k, as its ICRC was built), and received datagrams with the IPv4 header a UDP socket does not
show rebuilt as ID 0: the ICRCs of pyroce's own traffic verify in the capture. An IPv6
device's frames are IPv6 (no ID to rebuild).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import BinaryIO

from pyroce.wire.framing import LINKTYPE_RAW, ROCE_UDP_PORT, RocePath, UdpHeader, ip_header
from pyroce.wire.pcap import PcapWriter

DEFAULT_KEEP = 100_000  # frames kept; the oldest go first

FrameSink = Callable[[tuple[float, bytes]], None]
"""Takes each frame, (time, raw IPv4 frame), as it is recorded (``host.capture_stream``)."""


class Capture:
    """A bounded record of frames (time, raw IPv4 frame), newest last; or, with a ``sink``,
    each frame handed to it as it is recorded and none kept."""

    def __init__(self, keep: int = DEFAULT_KEEP, sink: FrameSink | None = None) -> None:
        self.frames: deque[tuple[float, bytes]] = deque(maxlen=keep)
        self._add = sink if sink is not None else self.frames.append

    def record(self, now: float, src: str, sport: int, dst: str, data: memoryview | bytes, step: int) -> None:
        """Datagrams of ``step`` bytes (the last may be shorter) from ``src``:``sport`` to
        ``dst``:4791; the k-th as IPv4 ID k (GSO), a lone one as ID 0."""
        udp = UdpHeader(sport, ROCE_UDP_PORT)
        for index, start in enumerate(range(0, max(len(data), 1), step)):
            payload = bytes(data[start : start + step])
            path = RocePath(ip_header(src, dst, ident=index), udp)
            self._add((now, bytes(path.headers(len(payload))) + payload))

    def write(self, stream: BinaryIO) -> int:
        """Write the frames as a pcap (raw IPv4 link type); returns how many."""
        writer = PcapWriter(stream, LINKTYPE_RAW)
        for timestamp, frame in list(self.frames):
            writer.write(frame, timestamp)
        return len(self.frames)
