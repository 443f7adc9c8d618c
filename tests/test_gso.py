"""UDP GSO/GRO: packets built as segments of one send carry the ICRC of their own IPv4 ID,
and a receiver verifies them, however the kernel hands them over."""

from __future__ import annotations

import os
import random
import select
import socket
import time
from collections import Counter

import pytest

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.link.faults import FaultConfig, FaultInjector
from pyroce.link.memory import MemoryWire
from pyroce.link.udp import SOL_UDP, UDP_GRO, UdpLink
from pyroce.nic.capture import Capture
from pyroce.nic.port import Port
from pyroce.nic.tx import TxBatch
from pyroce.verbs.enums import ibv_mtu
from pyroce.wire import BTH, IPv4Header, IPv6Header, Opcode, Packet, UdpHeader, ipv4_id, parse_frame, parse_packet
from pyroce.wire.aeth import NakCode, nak_syndrome
from pyroce.wire.framing import LINKTYPE_RAW, MAX_GSO_SEGMENTS, RocePath
from pyroce.wire.headers import Reth
from pyroce.wire.icrc import verify_icrc
from pyroce.wire.packet import PacketRun
from tests.socket_buffer import granted_buffer

IP4 = IPv4Header(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
IP6 = IPv6Header(bytes(15) + b"\x01", bytes(15) + b"\x02")


def middle(psn: int, size: int = 1024) -> Packet:
    return Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, psn), os.urandom(size))


@pytest.mark.parametrize("segment", [0, 1, 2, 7, 63])
def test_segment_icrc_is_the_icrc_of_that_ipv4_id(segment):
    path = RocePath(IP4, UdpHeader(4791))
    buf = bytearray(2048)
    size = path.build_into(buf, 0, middle(5), segment)
    frame = parse_frame(bytes(path.headers(size, segment)) + bytes(buf[:size]), LINKTYPE_RAW)
    assert frame.ip.ident == segment and frame.icrc_ok
    wrong_id = parse_frame(bytes(path.headers(size, segment + 1)) + bytes(buf[:size]), LINKTYPE_RAW)
    assert not wrong_id.icrc_ok


def test_a_segment_checked_at_its_place_builds_no_id_solver():
    """A GSO segment's ID is its place in the send: checked there, its ICRC needs no solver
    for its length (tables built per length, which messages of many sizes would keep
    building); checked elsewhere, the solver finds its ID."""
    path = RocePath(IP4, UdpHeader(4791))
    buf = bytearray(2048)
    size = path.build_into(buf, 0, middle(3, 1004), 9)  # a length no other test checks
    ipv4_id._solvers.pop(size, None)
    assert path.verify(memoryview(buf)[:size], 9)
    assert size not in ipv4_id._solvers
    assert path.verify(memoryview(buf)[:size], 2)
    assert size in ipv4_id._solvers


def test_ipv6_segments_share_one_icrc():
    path = RocePath(IP6, UdpHeader(4791))
    pkt = middle(9)
    first, later = bytearray(2048), bytearray(2048)
    size = path.build_into(first, 0, pkt)
    path.build_into(later, 0, pkt, 5)
    assert first == later and parse_frame(bytes(path.headers(size)) + bytes(first[:size]), LINKTYPE_RAW).icrc_ok


def test_verify_accepts_every_segment_and_nothing_damaged():
    """Each segment's ICRC checks whether the receiver knows its place (the ID tried first) or
    not (the ID solved for), and a flipped bit fails either way."""
    path = RocePath(IP4, UdpHeader(4791))
    buf = bytearray(2048)
    rng = random.Random(4)
    for segment in range(MAX_GSO_SEGMENTS):
        size = path.build_into(buf, 0, middle(segment), segment)
        for place in (segment, 0, (segment + 1) % MAX_GSO_SEGMENTS):
            assert path.verify(memoryview(buf)[:size], place), (segment, place)
        bit = rng.randrange(size * 8)
        buf[bit // 8] ^= 1 << bit % 8
        for place in (segment, 0):
            assert not path.verify(memoryview(buf)[:size], place), (segment, place, bit)
    size = path.build_into(buf, 0, middle(0), 0)
    frame = bytearray(path.headers(size, MAX_GSO_SEGMENTS)) + buf[:size]
    frame[-4:] = parse_frame(bytes(frame), LINKTYPE_RAW).packet.bth.psn.to_bytes(4, "little")  # any wrong value
    assert not path.verify(memoryview(frame)[28:])


def loopback_links(count: int) -> list[UdpLink]:
    net = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}"
    return [UdpLink(f"{net}.{host}") for host in range(1, count + 1)]


def test_gso_send_arrives_as_segments_that_verify():
    sender, gro, plain = loopback_links(3)
    try:
        if not (sender.gso and gro.gro):
            pytest.fail("this kernel lacks UDP GSO/GRO (Linux 5.0+ has both)")
        plain.sock.setsockopt(SOL_UDP, UDP_GRO, 0)
        plain.gro = False
        packets = [middle(psn) for psn in range(4)] + [Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x11, 4), b"tail")]
        for receiver in (gro, plain):
            path = sender.tx_path(receiver.address)
            buf = bytearray(16384)
            end = 0
            for index, pkt in enumerate(packets):
                end += path.build_into(buf, end, pkt, index)
            segment_size = 12 + 1024 + 4
            assert sender.send_segments(memoryview(buf)[:end], segment_size, receiver.address)
            got: list[Packet] = []
            rx = bytearray(65536)
            while len(got) < len(packets):
                assert select.select([receiver.sock], [], [], 2)[0], f"{len(got)} of {len(packets)} arrived"
                received = receiver.recv_into(rx)
                assert received is not None
                size, (peer, sport), step, _ = received
                for start in range(0, size, step):
                    datagram = memoryview(rx)[start : min(start + step, size)]
                    assert receiver.rx_path(peer, sport).verify(datagram)
                    got.append(parse_packet(bytes(datagram)))
            assert got == packets
            if receiver is gro:
                assert step == segment_size and size == end  # one call handed over the whole run
    finally:
        for link in (sender, gro, plain):
            link.close()


MIDDLES = (Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_MIDDLE)  # a run's first and last opcodes


@pytest.mark.parametrize("ends", [MIDDLES, (Opcode.RC_SEND_FIRST, Opcode.RC_SEND_LAST),
                                  (Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_LAST)])  # fmt: skip
@pytest.mark.parametrize("ip", [IP4, IP6])
def test_a_run_builds_the_bytes_of_its_packets(ip, ends):
    path = RocePath(ip, UdpHeader(4791))
    pmtu = 256
    payload = memoryview(os.urandom(5 * pmtu))
    middle = Opcode.RC_SEND_MIDDLE if ends[0] == Opcode.RC_SEND_FIRST else Opcode.RC_RDMA_WRITE_MIDDLE
    run = PacketRun(middle, 0x123, 0xFFFFFE, 0x7FFF, payload, pmtu, True, *ends)
    packets = run.packets()
    assert [p.bth.opcode for p in packets] == [ends[0], middle, middle, middle, ends[1]]
    assert [p.bth.psn for p in packets] == [0xFFFFFE, 0xFFFFFF, 0, 1, 2]  # PSNs wrap
    assert [p.bth.ackreq for p in packets] == [False] * 4 + [True]
    for index, pkt in enumerate(packets):
        for segment in (0, index + 1):
            fast, slow = bytearray(1024), bytearray(1024)
            size = path.build_run_into(memoryview(fast), 8, run, index, 1, segment)
            assert size == path.build_into(slow, 8, pkt, segment) and fast == slow
    whole, one_by_one = bytearray(4096), bytearray(4096)
    end = path.build_run_into(memoryview(whole), 0, run, 0, 5, 2)
    offset = 0
    for index in range(5):
        offset += path.build_run_into(memoryview(one_by_one), offset, run, index, 1, 2 + index)
    assert end == offset and whole == one_by_one
    tail, tail_by_one = bytearray(4096), bytearray(4096)  # a run's later packets, its last among them
    end = path.build_run_into(memoryview(tail), 0, run, 1, 4, 3)
    offset = 0
    for index in range(1, 5):
        offset += path.build_run_into(memoryview(tail_by_one), offset, run, index, 1, 2 + index)
    assert end == offset and tail == tail_by_one


def test_a_64k_write_leaves_in_two_gso_sends():
    """FIRST (RETH, 16 bytes longer) can only lead a send whose next segment is the last, so
    a 64 KiB WRITE at PMTU 4096 goes as [FIRST, MIDDLE] and [13 x MIDDLE, LAST]; the GRO
    receiver gets the same two runs back, every segment with a good ICRC."""
    sender, receiver = loopback_links(2)
    try:
        if not (sender.gso and receiver.gro):
            pytest.fail("this kernel lacks UDP GSO/GRO (Linux 5.0+ has both)")
        data = memoryview(os.urandom(65536))
        first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x11, 0), data[:4096], reth=Reth(0x1000, 0x77, 65536))
        run = PacketRun(Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, 1, 0xFFFF, data[4096:61440], 4096, False, *MIDDLES)
        last = Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x11, 15, True), data[61440:])
        view = memoryview(bytearray(65536))
        port = Port(sender, None, Counter(), time.monotonic)
        port.capture = Capture()
        batch = TxBatch(view, port, Counter())
        batch.send(receiver.address, 0x11, sender.tx_path(receiver.address), [first, run, last])
        batch.flush()
        # the capture shows the datagrams the kernel makes of the two sends, each ICRC good
        frames = [parse_frame(frame, LINKTYPE_RAW) for _, frame in port.capture.frames]
        assert [f.packet for f in frames] == [first, *run.packets(), last] and all(f.icrc_ok for f in frames)
        runs = []
        rx = bytearray(65536)
        got: list[Packet] = []
        while len(got) < 16:
            assert select.select([receiver.sock], [], [], 2)[0], f"{len(got)} of 16 packets arrived"
            size, (peer, sport), step, _ = receiver.recv_into(rx)  # type: ignore[misc]
            runs.append((size, step))
            for start in range(0, size, step):
                datagram = memoryview(rx)[start : min(start + step, size)]
                assert receiver.rx_path(peer, sport).verify(datagram)
                got.append(parse_packet(bytes(datagram)))
        assert runs == [(4128 + 4112, 4128), (14 * 4112, 4112)]
        assert got == [first, *run.packets(), last]
    finally:
        sender.close()
        receiver.close()


def _a_64k_write_to_itself(faults: FaultInjector | None, capture: Capture | None = None) -> list[tuple[int, int]]:
    """A 64 KiB WRITE's packets sent by a port to its own address (on an in-memory link, which
    has no GSO of its own) and taken back, every packet whole: the (size, step) of each
    loopback entry. Each packet carries the ICRC of its place in its entry where something
    looks at it (a fault plan, whose damage the receive must catch; a capture), and a zero
    ICRC where nothing does, which the receive then does not check."""
    port = Port(MemoryWire().link("10.9.0.1"), faults, Counter(), time.monotonic)
    port.capture = capture
    data = memoryview(os.urandom(65536))
    first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x11, 0), data[:4096], reth=Reth(0x1000, 0x77, 65536))
    run = PacketRun(Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, 1, 0xFFFF, data[4096:61440], 4096, False, *MIDDLES)
    last = Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x11, 15, True), data[61440:])
    batch = TxBatch(memoryview(bytearray(65536)), port, Counter())
    batch.send(port.address, 0x11, port.link.tx_path(port.address), [first, run, last])
    batch.flush()
    entries, got = [], []
    rx = bytearray(65536)
    sealed = faults is not None or capture is not None
    while (taken := port.receive(rx, memoryview(rx), socket=False)) is not None:
        datagrams, step, path, source, checked = taken
        assert source == port.address
        assert checked is (faults is None)  # a fault plan's loopback is checked as the link's
        entries.append((len(datagrams), step))
        for start in range(0, len(datagrams), step):
            datagram = datagrams[start : start + step]
            if sealed or datagram[0] != Opcode.RC_RDMA_WRITE_MIDDLE:  # (the FIRST and LAST: ``Packet``s, sealed)
                assert path.verify(datagram, start // step)
            else:
                assert bytes(datagram[-4:]) == bytes(4)
            got.append(parse_packet(bytes(datagram)))
    assert got == [first, *run.packets(), last]
    return entries


def test_a_64k_write_to_its_own_address_stays_two_loopback_runs():
    """Packets for the engine's own QPs (two programs of one shared NIC engine, two contexts
    of one device) keep their GSO batches on the internal loopback: the receive takes the
    same two runs a GRO socket would get, not 16 single datagrams."""
    assert _a_64k_write_to_itself(None) == [(4128 + 4112, 4128), (14 * 4112, 4112)]


def test_a_capture_seals_the_loopbacks_packets():
    """A capture shows the loopback's packets with their ICRCs (checked above), as the same
    two runs."""
    capture = Capture(64)
    assert _a_64k_write_to_itself(None, capture) == [(4128 + 4112, 4128), (14 * 4112, 4112)]
    assert len(capture.frames) == 16
    assert all(verify_icrc(frame[:28], frame[28:]) for _, frame in capture.frames)  # IPv4 and UDP, then the packet


def test_faults_keep_the_loopback_to_single_datagrams():
    """A fault plan acts on single datagrams, on the loopback as on the link."""
    assert _a_64k_write_to_itself(FaultInjector(FaultConfig(seed=1))) == [(4128, 4128), *[(4112, 4112)] * 15]


def test_a_damaged_segment_fails_alone():
    """GRO hands over a run; each datagram is checked on its own, so one corrupted segment is
    refused and its neighbours (built for IDs 1 and 3) still verify."""
    sender, receiver = loopback_links(2)
    try:
        if not (sender.gso and receiver.gro):
            pytest.fail("this kernel lacks UDP GSO/GRO (Linux 5.0+ has both)")
        path = sender.tx_path(receiver.address)
        buf = bytearray(8192)
        end = 0
        for index in range(5):
            end += path.build_into(buf, end, middle(index), index)
        buf[2 * 1040 + 100] ^= 0x40  # a payload bit of segment 2
        assert sender.send_segments(memoryview(buf)[:end], 1040, receiver.address)
        assert select.select([receiver.sock], [], [], 2)[0]
        rx = bytearray(65536)
        size, (peer, sport), step, _ = receiver.recv_into(rx)  # type: ignore[misc]
        assert (size, step) == (end, 1040)
        check = receiver.rx_path(peer, sport)
        assert [check.verify(memoryview(rx)[start : start + step]) for start in range(0, size, step)] == [
            True, True, False, True, True]  # fmt: skip
    finally:
        sender.close()
        receiver.close()


@pytest.mark.embedded_nic  # the receiver's GRO prediction counters of its own NIC
def test_a_damaged_segment_in_a_run_stops_prediction_and_is_counted():
    """A NIC receives a GRO run of a WRITE's MIDDLE packets whose third segment is damaged: the
    two before it are placed (the run loop), the damaged one is counted and dropped, and the
    next one, now out of sequence, gets the sequence NAK for the damaged packet's PSN."""
    peer = UdpLink("127.97.0.1")
    ep = RcEndpoint.open(65536, psn=0)
    try:
        if not (peer.gso and peer.gro):
            pytest.fail("this kernel lacks UDP GSO/GRO (Linux 5.0+ has both)")
        gid = bytes(10) + b"\xff\xff" + socket.inet_aton(peer.address)
        ep.connect(PeerInfo(gid, 0x999, 0, 0, 0), path_mtu=ibv_mtu.IBV_MTU_1024)
        to, qpn = ep.ctx.device.address, ep.qp.qp_num
        path = peer.tx_path(to)
        data = os.urandom(6 * 1024)
        first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, qpn, 0), data[:1024], reth=Reth(ep.mr.buf, ep.mr.rkey, 6144))
        buf = bytearray(8192)
        assert peer.send(buf[: path.build_into(buf, 0, first)], to)
        end = 0
        for psn in range(1, 5):
            end += path.build_into(buf, end, Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, qpn, psn),
                                                    data[psn * 1024 : psn * 1024 + 1024]), psn - 1)  # fmt: skip
        buf[2 * 1040 + 100] ^= 0x40  # a payload bit of PSN 3
        assert peer.send_segments(memoryview(buf)[:end], 1040, to)
        deadline = time.monotonic() + 5
        rx = bytearray(65536)
        while not select.select([peer.sock], [], [], 0.01)[0]:
            ep.cq.poll()  # runs the engine
            assert time.monotonic() < deadline, "no answer from the NIC"
        size, _, _, _ = peer.recv_into(rx)  # type: ignore[misc]
        answer = parse_packet(bytes(rx[:size]))
        assert (answer.bth.opcode, answer.bth.psn) == (Opcode.RC_ACKNOWLEDGE, 3)
        assert answer.aeth.syndrome == nak_syndrome(NakCode.PSN_SEQ_ERR)  # type: ignore[union-attr]
        assert ep.mr.read(3072, 0) == data[:3072]  # FIRST and the two MIDDLEs before the damage
        assert ep.ctx.device.stats()["icrc_errors"] == 1
    finally:
        ep.close()
        peer.close()


def test_a_udp_link_knows_what_its_socket_holds():
    """What the engine sizes its window per peer by (``link.base.peer_window``): the receive
    buffer the kernel granted, which ``net.core.rmem_max`` caps and the kernel doubles."""
    (link,) = loopback_links(1)
    try:
        granted = link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert granted == granted_buffer()
        assert link.receive_buffer == granted
    finally:
        link.close()
