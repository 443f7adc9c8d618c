"""The engine's side of the wire: the link, the internal loopback, and injected faults.

Datagrams to the device's own address (two contexts of one device, as rdma-core's tests
connect them, or two programs of one engine of the shared NIC) take the internal loopback: the
same bytes and checks, no socket (the ICRCs neither computed nor checked unless a fault plan or
a capture is on: ``receive``), and a run of them (a GSO batch) stays one entry that the
receive takes as a GRO run, as the kernel hands a GSO send on loopback to a GRO socket; so does
a copy of each datagram to a multicast group that QPs of this device joined (``joined``), as a
NIC delivers its own multicast sends to its attached QPs, while the original goes out. A
device that is one engine of several on its address (``link.steering``) loops back only what
is for its own QPs: the kernel steers the rest, and every group datagram, to their engines. With a
``FaultInjector`` each datagram may be dropped, duplicated, corrupted or held back; held ones
leave when their time comes on the engine's clock.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
from collections import Counter, deque
from collections.abc import Callable
from typing import Final

from pyroce.ib.addressing import IPV4_MAPPED, ipv4_of_link_local
from pyroce.link.base import Link
from pyroce.link.faults import FaultInjector
from pyroce.nic.capture import Capture
from pyroce.wire.bth import peek_dqpn
from pyroce.wire.framing import RocePath
from pyroce.wire.icrc import MEMORYVIEW

Clock = Callable[[], float]
_LINK_LOCAL: Final = b"\xfe\x80"  # fe80::/10 as GIDs carry it (the default GIDs): needs a scope to be an address


class Port:
    """Sends and receives datagrams for the engine, in the order the link, the loopback and
    the fault injector give them."""

    def __init__(self, link: Link, faults: FaultInjector | None, counters: Counter[str], clock: Clock) -> None:
        self.link = link
        self.address = link.address
        self.faults = faults  # fixed for the port's life
        self.gso = link.gso and faults is None  # GSO batches, never through faults (they hit single datagrams)
        self.loopback_runs = faults is None  # the loopback's runs (``send_segments``): not through faults either
        self._counters = counters
        self._clock = clock
        # datagrams, the address they were sent to, and the size of each but the last (a run)
        self._loopback: deque[tuple[bytes, str, int]] = deque()
        self.joined: set[str] = set()  # multicast groups with QPs of this device attached (``nic.multicast``)
        self.delayed: list[tuple[float, int, str, bytes]] = []  # a heap: (due, order, peer, datagram) held by faults
        self._order = itertools.count()
        self._self_path = link.rx_path(link.address, link.port)
        self.capture: Capture | None = None  # records what is sent and received when set
        self.active = True  # the port's state: down, nothing is sent or received (a fault plan)
        self.steering = link.steering

    def route(self, gid: bytes) -> str | None:
        """The link's address for a destination GID, or None if the link cannot reach it: on
        an IPv4 link an IPv4-mapped GID's IPv4 address, or the one a pyroce device's default
        link-local GID names (``ipv4_of_link_local``); on an IPv6 link any other GID but a
        link-local one (RoCEv2's GID is the IP address)."""
        if len(gid) != 16:
            return None
        mapped = gid[:12] == IPV4_MAPPED
        if ":" not in self.address:
            return ".".join(str(byte) for byte in gid[12:]) if mapped else ipv4_of_link_local(gid)
        if mapped or gid[:2] == _LINK_LOCAL:
            return None
        return str(ipaddress.IPv6Address(gid))

    def transmit(self, peer: str, data: memoryview | bytes) -> None:
        """One datagram to ``peer``: through the fault injector if one is set, else straight out."""
        faults = self.faults
        if faults is None:
            self.put(peer, data)
            return
        for delay, copy in faults.apply(bytes(data)):
            if delay:
                heapq.heappush(self.delayed, (self._clock() + delay, next(self._order), peer, copy))
            else:
                self.put(peer, copy)

    def put(self, peer: str, data: memoryview | bytes) -> None:
        if not self.active:
            self._counters["drop_port_down"] += 1
            return
        if self.capture is not None:
            self.capture.record(self._clock(), self.address, self.link.port, peer, data, len(data))
        if peer == self.address and not self.steered_away(peek_dqpn(data)):
            self._loopback.append((bytes(data), peer, len(data)))
            return
        if peer in self.joined and self.steering is None:
            # for this device's own members; the others hear the link
            self._loopback.append((bytes(data), peer, len(data)))
        if not self.link.send(data, peer):
            # a multicast address the host has no route for (a bare lo) fails here: counted apart
            self._counters["drop_mcast_unsent" if ipaddress.ip_address(peer).is_multicast else "drop_tx_full"] += 1

    def steered_away(self, dqpn: int) -> bool:
        """Whether QP ``dqpn`` of this address is another engine's (``link.steering``): what
        is for it leaves through the socket, for the kernel to hand over."""
        steering = self.steering
        return steering is not None and not steering.owns(dqpn)

    def send_segments(self, data: memoryview, segment_size: int, peer: str) -> bool:
        """One GSO send (``segment_size``-byte datagrams to ``peer``, all for one QP), or one
        loopback entry when that QP is this engine's; False if the socket buffer was full."""
        if not self.active:
            self._counters["drop_port_down"] += -(-len(data) // segment_size)
            return True
        if self.capture is not None:
            self.capture.record(self._clock(), self.address, self.link.port, peer, data, segment_size)
        if peer == self.address and not self.steered_away(peek_dqpn(data)):
            self._loopback.append((bytes(data), peer, segment_size))
            return True
        return self.link.send_segments(data, segment_size, peer)

    def release_due(self, now: float) -> bool:
        """Send the held-back datagrams whose time has come; whether there were any."""
        delayed = self.delayed
        released = False
        while delayed and delayed[0][0] <= now:
            _, _, peer, data = heapq.heappop(delayed)
            self.put(peer, data)
            released = True
        return released

    def next_due(self) -> float | None:
        return self.delayed[0][0] if self.delayed else None

    @property
    def has_loopback(self) -> bool:
        return bool(self._loopback)

    def receive(self, buf: bytearray, view: memoryview,
                socket: bool) -> tuple[memoryview, int, RocePath, str, bool] | None:  # fmt: skip
        """The next datagrams from one sender: the loopback's first, then (if ``socket``) the
        link's into ``buf``. Returns them, the size of each but the last (a GRO run), the path
        they came by, the sender's address, and whether their ICRCs are known good; None when
        nothing is waiting.

        The loopback's are, without a fault plan: they never left the engine's memory (a copy
        made as they were sealed), as Linux's loopback marks its packets CHECKSUM_UNNECESSARY.
        A fault plan may corrupt them on the way in, so then they are checked as any."""
        if self._loopback:
            data, dest, step = self._loopback.popleft()
            path = self._self_path if dest == self.address else self.link.rx_path(self.address, self.link.port, dest)
            return MEMORYVIEW(data), step, path, self.address, self.faults is None
        if not socket:
            return None
        got = self.link.recv_into(buf)
        while got is not None and not self.active:  # a port that is down hears nothing
            self._counters["drop_port_down"] += 1
            got = self.link.recv_into(buf)
        if got is None:
            return None
        size, (peer, sport), step, dest = got
        # (from another engine of this address: that engine recorded it as it sent it)
        if self.capture is not None and (self.steering is None or peer != self.address):
            self.capture.record(self._clock(), peer, sport, dest, view[:size], step or 1)
        return view[:size], step or 1, self.link.rx_path(peer, sport, dest), peer, False
