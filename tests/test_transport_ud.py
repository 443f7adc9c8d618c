"""The UD transport without a NIC, against Linux rxe's own UD traffic (the captures'
``guest2guest.pcap`` and ``udaddy.pcap``): pyroce builds the same bytes rxe sent (ICRC
included) from the same fields, and receiving rxe's datagrams through ``Demux`` places each
after the 40-byte network header, which is the frame's own IPv4 header byte for byte. Then the
hostile cases: wrong Q_Key, P_Key, transport, truncated DETH, unknown QPN, no receive WQE,
a datagram longer than the buffer; each dropped, counted, nothing written, the QP going on."""

from __future__ import annotations

import pytest

from pyroce.ib.enums import Access, QpState, WcFlag, WcOpcode, WcStatus
from pyroce.nic.memory import MrTable
from pyroce.transport.demux import Demux
from pyroce.transport.rc import QpConfig
from pyroce.transport.ud import UdQp
from pyroce.transport.work import RecvWork, SendWork, Sge, UdDest, WorkOp
from pyroce.wire import Frame, IPv6Header, RocePath, Transport
from pyroce.wire.bth import BTH
from pyroce.wire.framing import GRH_LEN, IPV4_UDP_LEN, network_header
from pyroce.wire.headers import Deth
from pyroce.wire.opcodes import Opcode
from pyroce.wire.packet import Packet, build_packet_into, packet_length
from tests.test_captures import roce_frames

BASE = 0x10000


def ud_frames(capture_records: dict, name: str) -> list[tuple[bytes, Frame]]:
    linktype, records = capture_records[name]
    return [(record.data, frame) for _, record, frame in roce_frames(linktype, records)
            if frame.packet.bth.opcode in (Opcode.UD_SEND_ONLY, Opcode.UD_SEND_ONLY_WITH_IMMEDIATE)]  # fmt: skip


def ud_qp(qpn: int, qkey: int, size: int = 1 << 16) -> tuple[UdQp, bytearray, int]:
    memory = MrTable()
    buf = bytearray(size)
    mr = memory.register(1, memoryview(buf), BASE, Access.LOCAL_WRITE)
    qp = UdQp(QpConfig(qpn=qpn, pdn=1, transport=Transport.UD, pmtu=1024, qkey=qkey), memory)
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)
    return qp, buf, mr.key


def _raise(qpn: int, exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize("name", ["guest2guest.pcap", "udaddy.pcap"])
def test_pyroce_builds_the_bytes_rxe_sent(capture_records: dict, name: str) -> None:
    frames = [f for f in ud_frames(capture_records, name) if f[1].packet.bth.dqpn != 1]  # not QP1's MADs
    assert frames
    for raw, frame in frames:
        pkt = frame.packet
        qp, buf, key = ud_qp(pkt.deth.src_qp, pkt.deth.qkey)  # type: ignore[union-attr]
        qp.psn = pkt.bth.psn
        buf[: len(pkt.payload)] = pkt.payload
        op = WorkOp.SEND if pkt.immdt is None else WorkOp.SEND_WITH_IMM
        dest = UdDest(bytes(16), pkt.bth.dqpn, pkt.deth.qkey)  # type: ignore[union-attr]
        qp.post_send(SendWork(1, op, (Sge(BASE, len(pkt.payload), key),), imm=pkt.immdt or 0, ud=dest))
        ((peer, built),) = qp.output(0.0, 8, lambda gid: "peer")[0]
        assert peer == "peer"
        out = bytearray(packet_length(built))
        RocePath(frame.ip, frame.udp).build_into(out, 0, built)
        start = len(raw) - len(frame.trailer) - len(out)
        assert bytes(out) == raw[start : start + len(out)]
        assert [c.status for c in qp.completions] == [WcStatus.SUCCESS]


def test_rxe_datagrams_land_after_their_own_ipv4_header(capture_records: dict) -> None:
    frames = [f for f in ud_frames(capture_records, "guest2guest.pcap")]
    dqpn, qkey = frames[0][1].packet.bth.dqpn, frames[0][1].packet.deth.qkey  # type: ignore[union-attr]
    mine = [(raw, f) for raw, f in frames if f.packet.bth.dqpn == dqpn]
    qp, buf, key = ud_qp(dqpn, qkey)
    demux = Demux(_raise)
    demux.datagram_qps[dqpn] = qp
    slot = 2048
    for counter in range(len(mine)):
        qp.post_recv(RecvWork(counter, (Sge(BASE + counter * slot, slot, key),)))
    for counter, (raw, frame) in enumerate(mine):
        udp_payload = raw[len(frame.l2) + IPV4_UDP_LEN : len(raw) - len(frame.trailer)]
        demux.receive(memoryview(bytes(udp_payload)), len(udp_payload), RocePath(frame.ip, frame.udp), 0.0,
                      "10.77.0.3", frame.ip)  # fmt: skip
        at = counter * slot
        ip_at = len(frame.l2)
        assert bytes(buf[at : at + 20]) == bytes(20)
        assert bytes(buf[at + 20 : at + GRH_LEN]) == raw[ip_at : ip_at + 20]  # the frame's IPv4 header, exactly
        assert bytes(buf[at + GRH_LEN : at + GRH_LEN + len(frame.packet.payload)]) == bytes(frame.packet.payload)
    assert [(c.wqe_counter, c.status, c.opcode) for c in qp.completions] == [
        (n, WcStatus.SUCCESS, WcOpcode.RECV) for n in range(len(mine))]  # fmt: skip
    assert all(c.flags & WcFlag.GRH and c.src_qp == mine[0][1].packet.deth.src_qp for c in qp.completions)  # type: ignore[union-attr]
    assert demux.counters["icrc_errors"] == 0


def datagram(dqpn: int, qkey: int, payload: bytes, opcode: int = Opcode.UD_SEND_ONLY, pkey: int = 0xFFFF) -> bytes:
    """A UD packet as a UDP payload, ICRC left zero (these tests give ``Demux`` no ICRC check)."""
    pkt = Packet(BTH(opcode, dqpn, 5, pkey=pkey), payload, deth=Deth(qkey, 0x42))
    out = bytearray(packet_length(pkt))
    build_packet_into(out, 0, pkt)
    return bytes(out)


@pytest.mark.parametrize(("case", "data", "counter"), [
    ("wrong Q_Key", datagram(0x99, 0x1234, b"x" * 8), "drop_qkey"),
    ("wrong P_Key", datagram(0x99, 0x7777, b"x" * 8, pkey=0x8001), "drop_pkey"),
    ("UC opcode at a UD QP", bytes([Opcode.UC_SEND_ONLY]) + datagram(0x99, 0x7777, b"x" * 8)[1:],
     "drop_wrong_transport"),
    ("too long for the buffer", datagram(0x99, 0x7777, b"x" * 100), "drop_ud_too_long"),
], ids=["wrong-qkey", "wrong-pkey", "uc-opcode", "too-long"])  # fmt: skip
def test_hostile_datagrams_are_dropped_and_counted(case: str, data: bytes, counter: str) -> None:
    qp, buf, key = ud_qp(0x99, 0x7777, size=4096)
    qp.post_recv(RecvWork(0, (Sge(BASE, GRH_LEN + 64, key),)))
    demux = Demux(_raise)
    demux.datagram_qps[0x99] = qp
    demux.receive(memoryview(data), len(data), None, 0.0)
    assert qp.counters[counter] == 1, case
    assert qp.completions == [] and bytes(buf) == bytes(len(buf))
    good = datagram(0x99, 0x7777, b"ok")
    demux.receive(memoryview(good), len(good), None, 0.0)
    (completion,) = qp.completions  # the receive WQE served the next good datagram
    assert completion.status == WcStatus.SUCCESS and completion.byte_len == GRH_LEN + 2
    assert not completion.flags & WcFlag.GRH  # no IP header known: zeros, no GRH flag
    assert bytes(buf[GRH_LEN : GRH_LEN + 2]) == b"ok"


def test_truncated_deth_unknown_qpn_and_no_receive_wqe_are_counted() -> None:
    qp, buf, _ = ud_qp(0x99, 0x7777)
    demux = Demux(_raise)
    demux.datagram_qps[0x99] = qp
    truncated = datagram(0x99, 0x7777, b"")[:16]  # BTH and half a DETH
    demux.receive(memoryview(truncated), len(truncated), None, 0.0)
    stranger = datagram(0x98, 0x7777, b"x" * 4)
    demux.receive(memoryview(stranger), len(stranger), None, 0.0)
    nobody = datagram(0x99, 0x7777, b"x" * 4)
    demux.receive(memoryview(nobody), len(nobody), None, 0.0)  # no receive WQE posted
    assert sum(v for k, v in demux.counters.items() if k.startswith("malformed_")) == 1
    assert demux.counters["drop_unknown_qpn"] == 1
    assert qp.counters["drop_no_recv_wqe"] == 1 and qp.state is QpState.RTS
    assert bytes(buf) == bytes(len(buf))


def test_network_header_for_ipv6_is_the_header_itself() -> None:
    ip = IPv6Header(bytes(15) + b"\x01", bytes(15) + b"\x02", traffic_class=0x20, flow_label=0x12345, hop_limit=7)
    header = network_header(ip, 100)
    assert len(header) == GRH_LEN
    assert header[0] >> 4 == 6 and header[7] == 7 and header[8:24] == ip.src and header[24:40] == ip.dst
    assert int.from_bytes(header[4:6], "big") == 108  # payload length: UDP header and datagram
