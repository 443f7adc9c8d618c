"""An in-memory fabric with virtual time: RC QPs exchange real RoCEv2 datagrams (ICRC built
and checked) through a ``FaultInjector``, with no sockets, threads or clocks.

Tests and tools drive it: ``run_until(done)`` moves every datagram, fires every transport timer
at its deadline and advances the virtual clock to the next event, so a run with loss, reorder
and retransmission timeouts of seconds finishes in milliseconds and replays exactly.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable

from pyroce.link.faults import FaultConfig, FaultInjector
from pyroce.transport.demux import Demux
from pyroce.transport.rc import RcQp
from pyroce.wire.framing import ROCE_UDP_PORT, IPv4Header, RocePath, UdpHeader
from pyroce.wire.packet import Packet

LATENCY_S = 0.000005  # one-way wire latency of the fabric
_PATH = RocePath(IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])), UdpHeader(ROCE_UDP_PORT))


def _raise(qpn: int, exc: Exception) -> None:
    """A test bench shows the transport's bugs rather than containing them."""
    raise RuntimeError(f"the transport of QP 0x{qpn:x} raised") from exc


class FabricStalled(RuntimeError):
    """Nothing left to deliver and no timer armed, but the goal was not reached."""


class Fabric:
    def __init__(self, faults: FaultConfig | None = None) -> None:
        self.now = 0.0
        self.faults = FaultInjector(faults or FaultConfig())
        self.qps: list[RcQp] = []
        self.demux = Demux(_raise)  # the QPs by QPN, and the same receive path as a NIC's
        self._in_flight: list[tuple[float, int, int, bytes]] = []  # (arrival, order, dest QPN, datagram)
        self._order = itertools.count()
        self._buf = bytearray(65536)
        self.counters: Counter[str] = self.demux.counters
        self.sent: list[Packet] = []  # every packet the QPs sent, in order (for assertions)

    def attach(self, qp: RcQp) -> None:
        self.demux.qps[qp.config.qpn] = qp
        self.qps.append(qp)

    def transmit(self) -> bool:
        """Take what every QP has to send and put it on the wire; True if anything went."""
        moved = False
        for qp in self.qps:
            for pkt in qp.packets_to_send(self.now, 1 << 30):
                self.sent.append(pkt)
                size = _PATH.build_into(self._buf, 0, pkt)
                for delay, data in self.faults.apply(bytes(self._buf[:size])):
                    arrival = self.now + LATENCY_S + delay
                    heapq.heappush(self._in_flight, (arrival, next(self._order), pkt.bth.dqpn, data))
                moved = True
        return moved

    def deliver_due(self) -> bool:
        moved = False
        while self._in_flight and self._in_flight[0][0] <= self.now:
            data = heapq.heappop(self._in_flight)[3]
            moved = True
            self.demux.receive(memoryview(data), len(data), _PATH, self.now)
        return moved

    def next_event(self) -> float | None:
        times = [t for qp in self.qps if (t := qp.get_timer()) is not None]
        if self._in_flight:
            times.append(self._in_flight[0][0])
        return min(times) if times else None

    def run_until(self, done: Callable[[], bool], max_time: float = 600.0) -> None:
        """Run until ``done()``; ``FabricStalled`` if nothing can happen any more, or
        ``TimeoutError`` past ``max_time`` virtual seconds."""
        while not done():
            moved = self.transmit()
            moved = self.deliver_due() or moved
            for qp in self.qps:
                timer = qp.get_timer()
                if timer is not None and timer <= self.now:
                    qp.handle_timer(self.now)
                    moved = True
            if moved:
                continue
            upcoming = self.next_event()
            if upcoming is None:
                if done():
                    return
                raise FabricStalled(f"stalled at t={self.now:.6f}")
            if upcoming > max_time:
                raise TimeoutError(f"not done after {max_time} virtual seconds")
            self.now = max(self.now, upcoming)
