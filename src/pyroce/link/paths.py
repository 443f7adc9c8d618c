"""The IP and UDP headers of a link's flows, one ``RocePath`` per peer, built on first use.

Every link that carries RoCEv2 as IP/UDP datagrams needs them: to build each packet's ICRC
over the headers it will travel with, and to check a received one against the headers it
came with (IPv4 ID 0 and DF assumed: what a UDP socket cannot see). The link's address says
the family: an IPv4 link's paths are IPv4, an IPv6 link's IPv6."""

from __future__ import annotations

from pyroce.wire.framing import ROCE_UDP_PORT, RocePath, UdpHeader, ip_header


class RocePaths:
    """The paths from and to ``address``:``port``."""

    def __init__(self, address: str, port: int = ROCE_UDP_PORT) -> None:
        self.address = address
        self.port = port
        self._tx_paths: dict[str, RocePath] = {}
        self._rx_paths: dict[tuple[str, int, str], RocePath] = {}
        # The path of the last datagram received: the next is most often from the same peer and
        # port, to the same address, found with three compares (a lookup builds and hashes a
        # tuple: ~550 instructions)
        self._last_rx: RocePath | None = None
        self._last_peer = self._last_dest = ""
        self._last_sport = -1

    def tx_path(self, peer: str) -> RocePath:
        """Headers and ICRC seeds of datagrams from this link to ``peer``."""
        path = self._tx_paths.get(peer)
        if path is None:
            path = self._tx_paths[peer] = RocePath(ip_header(self.address, peer), UdpHeader(self.port, ROCE_UDP_PORT))
        return path

    def rx_path(self, peer: str, sport: int, dest: str | None = None) -> RocePath:
        """Headers of datagrams from ``peer``:``sport`` as they arrived (ID 0, DF assumed), to
        this link's address or to ``dest`` (a multicast group it joined)."""
        to = dest or self.address
        last = self._last_rx
        if last is not None and sport == self._last_sport and peer == self._last_peer and to == self._last_dest:
            return last
        key = (peer, sport, to)
        path = self._rx_paths.get(key)
        if path is None:
            path = self._rx_paths[key] = RocePath(ip_header(peer, to), UdpHeader(sport, self.port))
        self._last_rx, self._last_peer, self._last_sport, self._last_dest = path, peer, sport, to
        return path
