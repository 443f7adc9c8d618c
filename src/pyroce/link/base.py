"""``Link``: what the engine needs of a link, the base class of pyroce's links.

A class, not a protocol: the port calls its link several times a packet, and compiled code
calls a compiled base class's methods directly, where it looks a protocol's up by name and
boxes every argument (~300 instructions a call, 9 calls a 2-byte SEND's round)."""

from __future__ import annotations

from typing import Final

from pyroce.link.paths import RocePaths
from pyroce.link.steering import Steering
from pyroce.wire.framing import ROCE_UDP_PORT

PEER_WINDOW: Final = 1024  # PSNs in flight with one peer before no QP begins a message to it (~4 MiB at 4 KiB)
MIN_PEER_WINDOW: Final = 16  # ... however small the socket's buffer: a 64 KiB message at a 4 KiB MTU
WINDOW_PSN_BYTES: Final = 4096  # what a PSN in flight may hold (a 4 KiB MTU's packet) when the window is sized


def peer_window(receive_buffer: int | None) -> int:
    """The window per peer for a link whose socket holds ``receive_buffer`` bytes: half of
    it in 4 KiB PSNs (the kernel counts each datagram's overhead in the buffer too, releases
    what was read in batches of a quarter of it while more waits, and the resends after a
    timeout come on top), at most ``PEER_WINDOW``. A peer on this host has the same buffer;
    another host's is not known, and is assumed alike."""
    if receive_buffer is None:
        return PEER_WINDOW
    return max(MIN_PEER_WINDOW, min(PEER_WINDOW, receive_buffer // 2 // WINDOW_PSN_BYTES))


class Link(RocePaths):
    """Datagrams to and from ``address``:``port`` (``pyroce.link.udp.UdpLink``, or links in
    memory: ``pyroce.link.memory``)."""

    def __init__(self, address: str, port: int = ROCE_UDP_PORT) -> None:
        super().__init__(address, port)
        self.gso = False  # sends may carry a segment size (UDP GSO)
        self.steering: Steering | None = None  # one engine of several on ``address``: which QPs are this one's
        # Bytes the host's socket holds for the link before it drops what comes (None: no such
        # limit, a link in memory); the engine keeps its window per peer within it
        self.receive_buffer: int | None = None

    def fileno(self) -> int:
        """Readable while a datagram waits."""
        raise NotImplementedError

    def send(self, data: memoryview | bytes, peer: str) -> bool:
        """One datagram to ``peer``; False if the link could not take it now."""
        raise NotImplementedError

    def send_segments(self, data: memoryview, segment_size: int, peer: str) -> bool:
        """Datagrams of ``segment_size`` bytes each but the last, to ``peer``, in one send."""
        raise NotImplementedError

    def recv_into(self, buf: bytearray) -> tuple[int, tuple[str, int], int, str] | None:
        """The next datagrams from one sender into ``buf``: their bytes, the sender's address
        and port, the size of each but the last (a GRO run), the address they were sent to;
        None when none waits."""
        raise NotImplementedError

    def join(self, group: str) -> None:
        """Receive what is sent to multicast address ``group``."""
        raise NotImplementedError

    def leave(self, group: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
