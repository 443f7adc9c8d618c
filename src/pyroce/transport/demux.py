"""The one way datagrams enter the transport: ICRC, header prediction, then the general path.

A NIC engine and the in-memory fabric both hand what they received to a ``Demux``: a run of
``step``-byte datagrams from one sender (UDP GRO hands several over as one; a lone datagram
is a run of one). For each, the ICRC is checked against the path it came by; the QP it is
addressed to tries header prediction (``RcQp.receive_run``: a message's MIDDLE packets in one
loop); what prediction leaves is parsed into a ``Packet`` and goes through every rule and NAK
of ``RcQp.receive``. A UD QP's packets go to ``UdQp.receive`` with the network header they came
with (for the receive buffer's first 40 bytes); a datagram to QP 0xFFFFFF at a multicast address
goes to every UD QP attached to that group (``groups``, by MGID), each checking it as its own. Device-level outcomes (ICRC errors, malformed packets, unknown QPNs) are
counted here; a QP's own in its counters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Protocol

from pyroce.ib.addressing import gid_of_packed
from pyroce.ib.counters import Counters
from pyroce.transport.rc import RcQp
from pyroce.wire.bth import BTH, BTH_STRUCT, MAX_QPN, MULTICAST_QPN
from pyroce.wire.errors import BadPadCount, MalformedPacket
from pyroce.wire.framing import IpHeader, RocePath, network_header
from pyroce.wire.opcodes import BTH_LEN
from pyroce.wire.packet import Packet, parse_packet

OnError = Callable[[int, Exception], None]  # a QP's transport raised (a bug): its QPN and the exception


class DatagramQp(Protocol):
    """A QP that takes packets from any source with their network header: a UD QP (``UdQp``),
    or QP1 (``pyroce.cm.qp1.Qp1``, which the transport does not import)."""

    def receive(self, pkt: Packet, now: float, network: bytes | None = None) -> None: ...


class Demux:
    """Datagrams to the QPs they are addressed to (by BTH DestQP).

    RC and UC packets are taken only from the QP's peer (``peers``, its address): another source is
    dropped and counted (``drop_wrong_source``), as rxe's ``check_addr`` does, so a spoofed
    packet can neither write nor be answered. ``touched`` collects the QPNs that took packets, for the caller to service. When a QP's
    transport raises (a bug), ``on_error`` is told at once, so the caller can contain it to
    that QP (move it to ERROR) before the next datagram; the other datagrams still go on."""

    def __init__(self, on_error: OnError, counters: Counter[str] | None = None) -> None:
        self.qps: dict[int, RcQp] = {}  # connected QPs (RC, UC)
        self.datagram_qps: dict[int, DatagramQp] = {}  # UD QPs and QP1: any source, no header prediction
        self.peers: dict[int, str] = {}  # the address each connected QP takes packets from
        self.groups: dict[bytes, list[int]] = {}  # multicast groups: MGID -> the UD QPs attached, in order
        self.counters: Counter[str] = Counters() if counters is None else counters
        self.rcvd_bytes = 0  # the per-packet counts, kept as ints (``pyroce.ib.counters``)
        self.predicted_pkts = 0  # how much header prediction takes
        self.touched: set[int] = set()
        self.on_error = on_error

    def receive(self, datagrams: memoryview, step: int, path: RocePath | None, now: float,
                source: str | None = None, network: IpHeader | None = None) -> None:  # fmt: skip
        """Datagrams from one sender (``source``, its address; None: not known, not checked),
        ``step`` bytes each but the last, that came by ``path`` (whose ICRC each must carry;
        None skips the check); ``network``: the IP header they came with, when known (a UD
        receive reports it). ICRCs are checked ahead in runs, so prediction only ever sees
        segments that passed. (The path, not its bound ``verify``: a method object made and
        called generically per packet cost ~1 500 instructions compiled.)"""
        qps, touched, peers = self.qps, self.touched, self.peers
        opcode: int  # the BTH's fields typed: compiled, machine ints
        flags: int
        pkey: int
        word1: int
        psn: int
        predicted = predicted_bytes = 0
        end = len(datagrams) or 1  # an empty datagram is looked at (and counted)
        alone = end <= step  # one datagram: it is its own segment (no slice made of it, ~280 instructions each)
        start = checked = 0  # the segments before ``checked`` passed their ICRC check
        while start < end:
            if path is None:
                checked = end
            elif start >= checked:
                checked = start
                while checked < end and path.verify(datagrams if alone else datagrams[checked : checked + step],
                                                    checked // step):  # fmt: skip
                    checked += step
                if checked == start:
                    self.counters["icrc_errors"] += 1
                    start += step
                    continue
            good = datagrams if alone else datagrams[start:checked]
            if len(good) >= BTH_LEN:
                # The BTH, read once here for the QP's prediction too (its DestQP byte by byte
                # and then again there cost ~900 instructions more a packet, compiled)
                opcode, flags, pkey, word1, psn = BTH_STRUCT.unpack_from(good)
                qpn = word1 & MAX_QPN  # DestQP, the low 24 bits
                qp = qps.get(qpn)
                if source is not None and peers.get(qpn, source) != source:
                    self.counters["drop_wrong_source"] += 1
                    start += step
                    continue
                if qp is not None:
                    try:
                        if len(good) > step:  # a GRO run
                            taken = qp.receive_run(good, step, now)
                        else:  # one packet (the run's first, as ``receive_run`` takes it)
                            taken = len(good) if qp.receive_predicted_bth(good, opcode, flags, pkey, psn, now) else 0
                    except Exception as exc:  # noqa: BLE001 - contained: the caller fails this QP alone
                        self.on_error(qpn, exc)
                        start += step
                        continue
                    if taken:
                        predicted += -(-taken // step)
                        predicted_bytes += taken
                        touched.add(qpn)
                        start += taken
                        continue
            self._receive_one(good[:step], now, network)
            start += step
        if predicted:
            self.rcvd_bytes += predicted_bytes
            self.predicted_pkts += predicted

    def _receive_one(self, data: memoryview, now: float, network: IpHeader | None) -> None:
        """One packet, ICRC checked, through the general path: parse, then the QP's rules."""
        try:
            pkt = parse_packet(data)
        except MalformedPacket as exc:
            self.counters[f"malformed_{type(exc).__name__}"] += 1
            if isinstance(exc, BadPadCount) and exc.bth is not None and exc.bth.dqpn in self.qps:
                self._receive_malformed(exc.bth, now)
            return
        qpn = pkt.bth.dqpn
        if qpn == MULTICAST_QPN:
            self._receive_multicast(pkt, len(data), now, network)
            return
        qp = self.qps.get(qpn)
        datagram_qp = self.datagram_qps.get(qpn) if qp is None else None
        if qp is None and datagram_qp is None:
            self.counters["drop_unknown_qpn"] += 1
            return
        self.rcvd_bytes += len(data)
        try:
            if datagram_qp is not None:
                datagram_qp.receive(pkt, now, None if network is None else network_header(network, len(data)))
            else:
                qp.receive(pkt, now)  # type: ignore[union-attr]
        except Exception as error:  # noqa: BLE001 - contained: the caller fails this QP alone
            self.on_error(qpn, error)  # not ``exc``: mypyc types one name once, and it is a MalformedPacket above
            return
        self.touched.add(qpn)

    def _receive_multicast(self, pkt: Packet, length: int, now: float, network: IpHeader | None) -> None:
        """A datagram to a multicast group: a copy to each QP attached to the group its IP
        destination names (rxe ``rxe_rcv_mcast_pkt``); a QP's failure is its own, the others
        still get theirs. No group here, or no IP header to name one: dropped and counted."""
        group = self.groups.get(gid_of_packed(network.dst)) if network is not None else None
        if not group:
            self.counters["drop_mcast_no_group"] += 1
            return
        self.rcvd_bytes += length
        header = network_header(network, length)  # type: ignore[arg-type]
        for qpn in group:
            try:
                self.datagram_qps[qpn].receive(pkt, now, header)
            except Exception as exc:  # noqa: BLE001 - contained: the caller fails this QP alone
                self.on_error(qpn, exc)
                continue
            self.touched.add(qpn)

    def _receive_malformed(self, bth: BTH, now: float) -> None:
        """A packet whose PadCnt does not pad its payload, for a connected QP: its BTH alone, for
        the QP to answer as a length error (``RcQp.receive``)."""
        try:
            self.qps[bth.dqpn].receive(Packet(bth), now, malformed=True)
        except Exception as exc:  # noqa: BLE001 - contained: the caller fails this QP alone
            self.on_error(bth.dqpn, exc)
            return
        self.touched.add(bth.dqpn)
