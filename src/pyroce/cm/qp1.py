"""QP1 of the NIC's address: CM MADs in and out, as UD SEND_ONLY packets to and from QP 1.

The engine treats it as one more datagram QP (``transport.demux`` hands it the packets to QP
1, ``nic.engine`` sends what ``output`` gives), but it has no rings: the connection manager
is its only consumer, inside the NIC, as the kernel's MAD layer is for a real one. What is
not a well-formed CM MAD for this port is dropped and counted (``cm_drop_*``) before any state
is touched, so a flood of them costs a parse each and nothing more (one such datagram stops
Linux rxe's QP1 for good).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from pyroce.ib.cm import QP1_QKEY
from pyroce.wire.bth import BTH, QP1
from pyroce.wire.cm import CmMessage, parse_cm
from pyroce.wire.errors import WireError
from pyroce.wire.framing import carries_ipv4
from pyroce.wire.headers import Deth
from pyroce.wire.mad import MAD_LEN, MadHeader
from pyroce.wire.opcodes import Opcode
from pyroce.wire.packet import Packet
from pyroce.wire.psn import psn_add

Route = Callable[[bytes], str | None]  # a GID to the link's address for it (None: unreachable)
OnMad = Callable[[bytes, MadHeader, CmMessage, float], None]  # source GID, header, message, now
_IPV4_MAPPED = bytes(10) + b"\xff\xff"
MAX_OUTBOX = 4096  # MADs waiting to leave; beyond, the oldest go (a send queue is finite)


def source_gid(network: bytes) -> bytes:
    """The sender's GID from the 40 bytes ``wire.framing.network_header`` gives: an IPv4
    header's source address, IPv4-mapped, or an IPv6 header's source address."""
    if carries_ipv4(network):
        return _IPV4_MAPPED + bytes(network[32:36])
    return bytes(network[8:24])


class Qp1:
    """QP1: takes CM MADs to ``on_mad`` and sends the ones queued with ``send``."""

    def __init__(self, on_mad: OnMad, counters: Counter[str]) -> None:
        self.on_mad = on_mad
        self.counters = counters
        self.outbox: deque[tuple[bytes, bytes]] = deque(maxlen=MAX_OUTBOX)  # (destination GID, MAD)
        self.psn = 0

    def receive(self, pkt: Packet, now: float, network: bytes | None = None) -> None:
        """One packet to QP 1 (ICRC checked): a CM MAD, or dropped and counted."""
        counters = self.counters
        if pkt.bth.opcode != Opcode.UD_SEND_ONLY or pkt.deth is None or network is None:
            counters["cm_drop_not_ud_send"] += 1
            return
        if pkt.deth.qkey != QP1_QKEY or pkt.bth.pkey & 0x7FFF != 0x7FFF:
            counters["cm_drop_qkey_or_pkey"] += 1
            return
        if len(pkt.payload) != MAD_LEN:
            counters["cm_drop_mad_length"] += 1
            return
        try:
            header, message = parse_cm(bytes(pkt.payload))
        except WireError as exc:
            counters[f"cm_drop_{type(exc).__name__}"] += 1
            return
        counters["cm_mads_received"] += 1
        self.on_mad(source_gid(network), header, message, now)

    def send(self, gid: bytes, mad: bytes) -> None:
        """Queue ``mad`` for QP 1 at ``gid``; it leaves on the engine's next pass."""
        self.outbox.append((gid, mad))

    def output(self, budget: int, route: Route) -> list[tuple[str, Packet]]:
        """Up to ``budget`` queued MADs as packets, each with its destination's address (a GID
        the link cannot reach is dropped and counted: the exchange's timeout reports it)."""
        out: list[tuple[str, Packet]] = []
        outbox = self.outbox
        while outbox and len(out) < budget:
            gid, mad = outbox.popleft()
            peer = route(gid)
            if peer is None:
                self.counters["cm_drop_no_route"] += 1
                continue
            bth = BTH(Opcode.UD_SEND_ONLY, QP1, self.psn, ackreq=True)
            self.psn = psn_add(self.psn, 1)
            out.append((peer, Packet(bth, mad, deth=Deth(QP1_QKEY, QP1))))
        self.counters["cm_mads_sent"] += len(out)
        return out
