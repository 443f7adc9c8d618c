"""A hostile peer controls every byte it sends (hostile-inputs.md). Whatever arrives, nothing
outside a registered region is read or written, the QP keeps answering, and a counter moves.

The responder and the requester here are real transport QPs with a real MR table; the
registered regions sit inside larger buffers whose guard bytes must never change."""

from __future__ import annotations

import os
import random

import pytest

from pyroce.nic.memory import MrTable
from pyroce.transport import Access, QpConfig, QpState, RcQp, RecvWork, SendWork, Sge, WcStatus, WorkOp
from pyroce.transport.demux import Demux
from pyroce.wire.aeth import NakCode, ack_syndrome, nak_syndrome, syndrome_kind, syndrome_value
from pyroce.wire.bth import BTH
from pyroce.wire.errors import MalformedPacket
from pyroce.wire.headers import Aeth, AtomicAckEth, AtomicEth, Feth, Reth
from pyroce.wire.opcodes import OPCODES, Opcode, OpFlag
from pyroce.wire.packet import Packet, build_packet_into, packet_length, parse_packet
from pyroce.wire.psn import psn_add

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
GUARD = 4096
REGION = 65536
BASE = 0x7F0000000000
PDN, OTHER_PDN = 1, 2
EPSN = 0x100


class Target:
    """A responder QP with: the target MR (all access) between guard bytes, an MR of another PD,
    an MR without remote access, a 12-byte MR (an atomic on its second word leaves it) and the
    key of a deregistered MR."""

    def __init__(self) -> None:
        self.memory = MrTable()
        self.arena = bytearray(os.urandom(GUARD + REGION + GUARD))
        self.guarded = memoryview(self.arena)[GUARD : GUARD + REGION]
        self.mr = self.memory.register(PDN, self.guarded, BASE, ALL)
        self.other = bytearray(os.urandom(4096))
        self.other_mr = self.memory.register(OTHER_PDN, memoryview(self.other), BASE + 0x100000, ALL)
        self.local_only = bytearray(os.urandom(4096))
        self.local_mr = self.memory.register(PDN, memoryview(self.local_only), BASE + 0x200000, Access.LOCAL_WRITE)
        gone = self.memory.register(PDN, memoryview(bytearray(4096)), BASE + 0x300000, ALL)
        self.memory.deregister(gone)
        self.stale_key = gone.key
        self.odd = bytearray(os.urandom(12))  # 8-aligned start, its last word cut short
        self.odd_mr = self.memory.register(PDN, memoryview(self.odd), BASE + 0x500000, ALL)
        self.recv = bytearray(os.urandom(GUARD + 8192 + GUARD))
        self.recv_mr = self.memory.register(PDN, memoryview(self.recv)[GUARD : GUARD + 8192], BASE + 0x400000, ALL)
        self.snapshot = self.outside()
        self.qp = self.fresh_qp()

    def fresh_qp(self) -> RcQp:
        qp = RcQp(QpConfig(qpn=0x22, pdn=PDN, dqpn=0x11, pmtu=1024, rq_psn=EPSN, sq_psn=0x500, access=ALL,
                           max_dest_rd_atomic=4, max_rd_atomic=4), self.memory)  # fmt: skip
        for state in (QpState.INIT, QpState.RTR, QpState.RTS):
            qp.modify(state)
        for index in range(4):
            qp.post_recv(RecvWork(index, (Sge(BASE + 0x400000, 8192, self.recv_mr.key),)))
        return qp

    def outside(self) -> tuple[bytes, ...]:
        """Every byte a peer must not change: guards, the other PD's MR, the local-only MR, the
    12-byte MR (only straddling atomics aim at it)."""
        return (bytes(self.arena[:GUARD]), bytes(self.arena[-GUARD:]), bytes(self.other), bytes(self.local_only),
                bytes(self.recv[:GUARD]), bytes(self.recv[-GUARD:]), bytes(self.odd))  # fmt: skip

    def send(self, pkt: Packet) -> list[Packet]:
        deliver(self.qp, pkt, 0.0)
        out = self.qp.packets_to_send(0.0, 1 << 20)
        self.qp.completions.clear()
        return out


def wire_bytes(pkt: Packet) -> bytes:
    """BTH through the (unchecked, zero) ICRC slot."""
    buf = bytearray(packet_length(pkt))
    build_packet_into(buf, 0, pkt)
    return bytes(buf)


def deliver(qp: RcQp, pkt: Packet, now: float) -> None:
    """As the NIC does: header prediction on the packet's bytes, else parse and the general path."""
    data = wire_bytes(pkt)
    deliver_run(qp, memoryview(data), len(data), now)


def deliver_run(qp: RcQp, run: memoryview, step: int, now: float) -> int:
    """As the NIC does with a GRO run: through ``transport.demux`` (ICRCs not checked here).
    Returns how many packets header prediction took."""
    demux = Demux(_raise)
    demux.qps[qp.config.qpn] = qp
    demux.receive(run, step, None, now)
    return demux.predicted_pkts


def _raise(qpn: int, exc: Exception) -> None:
    raise exc


def nak_code(responses: list[Packet]) -> int | None:
    naks = [p for p in responses if p.aeth is not None and syndrome_kind(p.aeth.syndrome) == 3]
    return syndrome_value(naks[0].aeth.syndrome) if naks else None  # type: ignore[union-attr]


def write(va: int, rkey: int, payload: bytes, dma_len: int | None = None, psn: int = EPSN) -> Packet:
    length = len(payload) if dma_len is None else dma_len
    return Packet(BTH(Opcode.RC_RDMA_WRITE_ONLY, 0x22, psn, True), payload, reth=Reth(va, rkey, length))


def read(va: int, rkey: int, length: int, psn: int = EPSN) -> Packet:
    return Packet(BTH(Opcode.RC_RDMA_READ_REQUEST, 0x22, psn, True), reth=Reth(va, rkey, length))


@pytest.fixture
def target() -> Target:
    return Target()


def case_packets(t: Target) -> dict[str, tuple[Packet, int | None]]:
    """Each hostile request and the NAK code rxe answers it with (None: a silent drop)."""
    key, end = t.mr.key, BASE + REGION
    return {
        "write past the end": (write(end - 10, key, b"x" * 20), NakCode.REMOTE_ACCESS_ERR),
        "write before the start": (write(BASE - 8, key, b"x" * 16), NakCode.REMOTE_ACCESS_ERR),
        "va + length wraps 2**64": (write((1 << 64) - 8, key, b"x" * 16), NakCode.REMOTE_ACCESS_ERR),
        "dma length larger than the MR": (write(BASE, key, b"x" * 16, dma_len=REGION + 1), NakCode.REMOTE_ACCESS_ERR),
        "payload longer than the dma length": (write(BASE, key, b"x" * 64, dma_len=8), NakCode.INVALID_REQUEST),
        "read longer than max_msg_sz": (read(BASE, key, (8 << 20) + 1), NakCode.INVALID_REQUEST),
        "read past the end": (read(end - 100, key, 200), NakCode.REMOTE_ACCESS_ERR),
        "another PD's key": (write(BASE + 0x100000, t.other_mr.key, b"x" * 16), NakCode.REMOTE_ACCESS_ERR),
        "no remote write access": (write(BASE + 0x200000, t.local_mr.key, b"x" * 16), NakCode.REMOTE_ACCESS_ERR),
        "deregistered MR's key": (write(BASE + 0x300000, t.stale_key, b"x" * 16), NakCode.REMOTE_ACCESS_ERR),
        "unaligned atomic": (
            Packet(BTH(Opcode.RC_FETCH_ADD, 0x22, EPSN, True), atomiceth=AtomicEth(BASE + 4, key, 1, 0)),
            NakCode.INVALID_REQUEST,
        ),
        "atomic outside the MR": (
            Packet(BTH(Opcode.RC_COMPARE_SWAP, 0x22, EPSN, True), atomiceth=AtomicEth(end, key, 1, 0)),
            NakCode.REMOTE_ACCESS_ERR,
        ),
        "unaligned atomic straddling the MR's end": (  # the range is checked first, as rxe
            Packet(BTH(Opcode.RC_FETCH_ADD, 0x22, EPSN, True), atomiceth=AtomicEth(end - 4, key, 1, 0)),
            NakCode.REMOTE_ACCESS_ERR,
        ),
        "aligned atomic straddling an odd-sized MR's end": (
            Packet(BTH(Opcode.RC_FETCH_ADD, 0x22, EPSN, True), atomiceth=AtomicEth(BASE + 0x500008, t.odd_mr.key, 1, 0)),
            NakCode.REMOTE_ACCESS_ERR,
        ),
        "middle with no first": (
            Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, EPSN), b"m" * 1024),
            NakCode.INVALID_REQUEST,
        ),
        "last with no first": (
            Packet(BTH(Opcode.RC_SEND_LAST, 0x22, EPSN, True), b"l" * 10),
            NakCode.INVALID_REQUEST,
        ),
        "FIRST shorter than the path MTU": (
            Packet(BTH(Opcode.RC_SEND_FIRST, 0x22, EPSN), b"f" * 100),
            NakCode.INVALID_REQUEST,
        ),
        "a well-formed SEND (the control case)": (
            Packet(BTH(Opcode.RC_SEND_ONLY, 0x22, EPSN, True), b"s" * 1024),
            None,
        ),
        "PSN far ahead": (write(BASE, key, b"x" * 16, psn=psn_add(EPSN, 1 << 22)), NakCode.PSN_SEQ_ERR),
        "PSN far behind": (write(BASE, key, b"x" * 16, psn=psn_add(EPSN, -(1 << 22))), None),  # re-ACKed duplicate
        "FLUSH (not executed)": (
            Packet(BTH(Opcode.RC_FLUSH, 0x22, EPSN, True), reth=Reth(BASE, key, 8), feth=Feth(1, 1)),
            NakCode.INVALID_REQUEST,
        ),
    }


@pytest.mark.parametrize("case", list(case_packets(Target()).keys()))
def test_hostile_request_gets_rxes_answer_and_touches_nothing(target: Target, case: str) -> None:
    pkt, expected_nak = case_packets(target)[case]
    region_before = bytes(target.guarded)
    responses = target.send(pkt)
    assert target.outside() == target.snapshot
    assert nak_code(responses) == expected_nak, responses
    if expected_nak is not None and expected_nak != NakCode.PSN_SEQ_ERR:
        assert bytes(target.guarded) == region_before  # refused before a byte was written
        assert target.qp.state is QpState.ERR  # RC class C/D errors are fatal (IBA 9.9.3)
    assert sum(target.qp.counts().values()) > 0


SURPRISES = {  # (opcode, PSN after the FIRST, payload length, BTH byte 1 bits, the general path's NAK)
    "ends past the WRITE's length": (Opcode.RC_RDMA_WRITE_MIDDLE, 2, 1024, 0, NakCode.INVALID_REQUEST),
    "PSN ahead": (Opcode.RC_RDMA_WRITE_MIDDLE, 3, 1024, 0, NakCode.PSN_SEQ_ERR),
    "PadCnt set": (Opcode.RC_RDMA_WRITE_MIDDLE, 2, 1024, 0x10, NakCode.INVALID_REQUEST),
    "TVer 1": (Opcode.RC_RDMA_WRITE_MIDDLE, 2, 1024, 0x01, None),  # malformed: dropped before the transport
    "LAST short of the WRITE's length": (Opcode.RC_RDMA_WRITE_LAST, 2, 900, 0, NakCode.INVALID_REQUEST),
    "LAST past the WRITE's length": (Opcode.RC_RDMA_WRITE_LAST, 2, 1000, 0, NakCode.INVALID_REQUEST),
    "LAST whose PadCnt eats a byte": (Opcode.RC_RDMA_WRITE_LAST, 2, 952, 0x10, NakCode.INVALID_REQUEST),
}


@pytest.mark.parametrize("case", SURPRISES)
def test_header_prediction_leaves_every_surprise_to_the_general_path(target: Target, case: str) -> None:
    opcode, psn_step, length, flag_bits, nak = SURPRISES[case]
    first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x22, EPSN), os.urandom(1024),
                   reth=Reth(BASE + REGION - 3000, target.mr.key, 3000))  # fmt: skip
    assert nak_code(target.send(first)) is None
    middle = Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, psn_add(EPSN, 1)), os.urandom(1024))
    assert target.qp.receive_predicted(wire_bytes(middle), 0.0)  # as predicted: placed on the fast path
    assert bytes(target.guarded[REGION - 1976 : REGION - 952]) == middle.payload
    surprise = bytearray(wire_bytes(Packet(BTH(opcode, 0x22, psn_add(EPSN, psn_step), True), os.urandom(length))))
    surprise[1] |= flag_bits
    tail = bytes(target.guarded[REGION - 952 :])
    assert not target.qp.receive_predicted(bytes(surprise), 0.0)
    try:
        answer = target.send(parse_packet(bytes(surprise)))
    except MalformedPacket:
        answer = []
    assert nak_code(answer) == nak
    assert target.outside() == target.snapshot
    assert bytes(target.guarded[REGION - 952 :]) == tail  # the surprise placed nothing


def test_header_prediction_ends_a_message_as_the_general_path_does(target: Target) -> None:
    """A WRITE's MIDDLE and LAST on the fast path, then a SEND's: bytes placed, the message
    ended (MSN, ACK with it, the receive WQE completed with the right length)."""
    first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x22, EPSN), os.urandom(1024), reth=Reth(BASE, target.mr.key, 2100))
    middle = Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, psn_add(EPSN, 1)), os.urandom(1024))
    last = Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x22, psn_add(EPSN, 2), True), os.urandom(52))
    target.send(first)
    assert target.qp.receive_predicted(wire_bytes(middle), 0.0)
    assert target.qp.receive_predicted(wire_bytes(last), 0.0)
    assert bytes(target.guarded[:2100]) == first.payload + middle.payload + last.payload
    acks = target.qp.packets_to_send(0.0)
    assert [(p.bth.opcode, p.bth.psn, p.aeth.msn) for p in acks] == [(Opcode.RC_ACKNOWLEDGE, psn_add(EPSN, 2), 1)]  # type: ignore[union-attr]
    send = [Packet(BTH(Opcode.RC_SEND_FIRST, 0x22, psn_add(EPSN, 3)), os.urandom(1024)),
            Packet(BTH(Opcode.RC_SEND_LAST, 0x22, psn_add(EPSN, 4), True), os.urandom(7))]  # fmt: skip
    deliver(target.qp, send[0], 0.0)
    assert target.qp.receive_predicted(wire_bytes(send[1]), 0.0)
    assert bytes(target.recv[GUARD : GUARD + 1031]) == send[0].payload + send[1].payload
    [completion] = target.qp.completions
    assert (completion.is_recv, completion.status, completion.byte_len) == (True, WcStatus.SUCCESS, 1031)


def gro_run(packets: list[Packet]) -> memoryview:
    """Packets back to back, as GRO hands a run over."""
    return memoryview(b"".join(wire_bytes(pkt) for pkt in packets))


STEP = 12 + 1024 + 4  # a MIDDLE segment at PMTU 1024: BTH, payload, ICRC


def test_a_run_of_middles_is_placed_in_one_loop(target: Target) -> None:
    """A WRITE's MIDDLE packets in one GRO run: the first by prediction, the rest by the loop;
    every byte placed, the PSN moved past them, one ACK for the AckReq inside the run."""
    first = Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x22, EPSN), os.urandom(1024), reth=Reth(BASE, target.mr.key, 6000))
    middles = [Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, psn_add(EPSN, n), n == 3), os.urandom(1024))
               for n in range(1, 5)]  # fmt: skip
    target.send(first)
    assert target.qp.receive_run(gro_run(middles), STEP, 0.0) == 4 * STEP
    assert bytes(target.guarded[:5120]) == first.payload + b"".join(m.payload for m in middles)
    assert target.qp.responder.epsn == psn_add(EPSN, 5) and target.qp.responder.offset == 5120
    acks = target.qp.packets_to_send(0.0)
    assert [(p.bth.opcode, p.bth.psn) for p in acks] == [(Opcode.RC_ACKNOWLEDGE, psn_add(EPSN, 4))]


@pytest.mark.parametrize("split", [None, 1500])
def test_a_run_of_send_middles_fills_the_receive_buffer_across_its_sges(target: Target, split: int | None) -> None:
    """A SEND's MIDDLEs in one GRO run land in the receive WQE's buffer, one SGE or two."""
    qp = target.fresh_qp()
    qp.responder.recv_queue.clear()
    base, key = BASE + 0x400000, target.recv_mr.key
    sges = (Sge(base, 8192, key),) if split is None else (Sge(base + 4096, split, key), Sge(base, 4096, key))
    qp.post_recv(RecvWork(9, sges))
    data = os.urandom(5 * 1024 + 10)
    deliver(qp, Packet(BTH(Opcode.RC_SEND_FIRST, 0x22, EPSN), data[:1024]), 0.0)
    middles = [Packet(BTH(Opcode.RC_SEND_MIDDLE, 0x22, psn_add(EPSN, n)), data[1024 * n : 1024 * (n + 1)])
               for n in range(1, 5)]  # fmt: skip
    assert qp.receive_run(gro_run(middles), STEP, 0.0) == 4 * STEP
    deliver(qp, Packet(BTH(Opcode.RC_SEND_LAST, 0x22, psn_add(EPSN, 5), True), data[5120:]), 0.0)
    [completion] = qp.completions
    assert (completion.wqe_counter, completion.status, completion.byte_len) == (9, WcStatus.SUCCESS, len(data))
    received = target.recv[GUARD : GUARD + 8192]
    if split is None:
        assert bytes(received[: len(data)]) == data
    else:  # the first SGE is the upper half of the region, the second its start
        assert bytes(received[4096 : 4096 + split]) + bytes(received[: len(data) - split]) == data
    assert target.outside() == target.snapshot


RUN_SURPRISES = {  # the third MIDDLE of a run is instead: (BTH byte, value or XOR mask), the general path's NAK
    "PSN ahead": ((11, 0x04, "xor"), NakCode.PSN_SEQ_ERR),
    "a SEND MIDDLE in a WRITE": ((0, Opcode.RC_SEND_MIDDLE, "set"), NakCode.INVALID_REQUEST),
    "PadCnt set": ((1, 0x10, "xor"), NakCode.INVALID_REQUEST),
    "TVer 1": ((1, 0x01, "xor"), None),  # malformed: dropped before the transport
    "another QP": ((7, 0x01, "xor"), None),  # the NIC hands it to that QP, not this one
    "another P_Key": ((3, 0x01, "xor"), None),  # dropped and counted
    "past the WRITE's length": ((None, 0, "set"), NakCode.INVALID_REQUEST),
}


@pytest.mark.parametrize("case", RUN_SURPRISES)
def test_the_run_loop_stops_at_every_surprise(target: Target, case: str) -> None:
    (at, value, how), nak = RUN_SURPRISES[case]
    length = 3 * 1024 + 10 if at is None else 6000  # past the length: the third MIDDLE does not fit
    first = Packet(
        BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x22, EPSN), os.urandom(1024), reth=Reth(BASE, target.mr.key, length)
    )
    middles = [Packet(BTH(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, psn_add(EPSN, n)), os.urandom(1024)) for n in range(1, 5)]
    target.send(first)
    run = bytearray(gro_run(middles))
    if at is not None:
        run[2 * STEP + at] = run[2 * STEP + at] ^ value if how == "xor" else value
    after = bytes(target.guarded[3072:])
    assert target.qp.receive_run(memoryview(run), STEP, 0.0) == 2 * STEP  # two placed, the loop stopped
    assert bytes(target.guarded[1024:3072]) == middles[0].payload + middles[1].payload
    assert bytes(target.guarded[3072:]) == after  # the surprise placed nothing
    assert target.qp.responder.epsn == psn_add(EPSN, 3)
    if case != "another QP":
        try:
            answer = target.send(parse_packet(bytes(run[2 * STEP : 3 * STEP])))
        except MalformedPacket:
            answer = []
        assert nak_code(answer) == nak
    assert target.outside() == target.snapshot


def requester(work: SendWork | None = None) -> RcQp:
    """A requester QP in RTS whose first request goes out at PSN 0x10 (``work``, if given, is sent)."""
    qp = RcQp(QpConfig(qpn=0x11, pdn=PDN, dqpn=0x22, pmtu=1024, sq_psn=0x10, access=ALL), MrTable())
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)
    if work is not None:
        qp.post_send(work)
        assert [p.bth.psn for p in qp.packets_to_send(0.0)] == [0x10]
    return qp


def read_posted(length: int) -> tuple[RcQp, bytearray]:
    """A requester QP with a READ of ``length`` bytes sent (PSN 0x10 on) and its buffer."""
    qp = requester()
    buf = bytearray(length)
    mr = qp.memory.register(PDN, memoryview(buf), BASE, ALL)  # type: ignore[attr-defined]
    qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(BASE, length, mr.key),), raddr=0x1000, rkey=7))
    assert [p.bth.psn for p in qp.packets_to_send(0.0)] == [0x10]
    return qp, buf


def test_read_responses_first_and_only_are_predicted_when_their_aeth_says_ack() -> None:
    qp, buf = read_posted(2)
    nak = Packet(
        BTH(Opcode.RC_RDMA_READ_RESPONSE_ONLY, 0x11, 0x10), b"hi", aeth=Aeth(nak_syndrome(NakCode.REMOTE_ACCESS_ERR), 1)
    )
    assert not qp.receive_predicted(wire_bytes(nak), 0.0)  # a NAK syndrome: the general path's to judge
    assert qp.receive_predicted(wire_bytes(nak._replace(aeth=Aeth(ack_syndrome(), 1))), 0.0)
    assert bytes(buf) == b"hi"
    [completion] = qp.completions
    assert (completion.status, completion.byte_len) == (WcStatus.SUCCESS, 2)
    qp, buf = read_posted(2048)
    data = os.urandom(2048)
    first = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_FIRST, 0x11, 0x10), data[:1024], aeth=Aeth(ack_syndrome(), 1))
    assert not qp.receive_predicted(wire_bytes(first._replace(bth=first.bth._replace(psn=0x11))), 0.0)  # not next
    assert qp.receive_predicted(wire_bytes(first), 0.0) and qp.requester.comp_psn == 0x11
    last = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_LAST, 0x11, 0x11), data[1024:], aeth=Aeth(ack_syndrome(), 1))
    assert qp.receive_predicted(wire_bytes(last), 0.0)
    assert bytes(buf) == data and qp.completions[0].byte_len == 2048


def test_an_ack_is_predicted_only_for_what_was_sent_and_only_when_it_says_ack() -> None:
    """A WRITE sent at PSN 0x10: an ACK for PSN 0x11 (never sent), a NAK and a TVer-1 ACK go
    the general way (a ghost, a NAK, a drop); the ACK for 0x10 is taken on the fast path and
    completes the WRITE; its duplicate is then a ghost again."""
    qp = requester(SendWork(5, WorkOp.RDMA_WRITE, (), raddr=0x1000, rkey=7))

    def ack(psn: int, syndrome: int = ack_syndrome()) -> bytes:
        return wire_bytes(Packet(BTH(Opcode.RC_ACKNOWLEDGE, 0x11, psn), aeth=Aeth(syndrome, 1)))

    assert not qp.receive_predicted(ack(0x11), 0.0)
    assert not qp.receive_predicted(ack(0x10, nak_syndrome(NakCode.PSN_SEQ_ERR)), 0.0)
    tver = bytearray(ack(0x10))
    tver[1] |= 1
    assert not qp.receive_predicted(bytes(tver), 0.0)
    assert not qp.completions
    assert qp.receive_predicted(ack(0x10), 0.0)
    [completion] = qp.completions
    assert (completion.wqe_counter, completion.status) == (5, WcStatus.SUCCESS)
    assert not qp.receive_predicted(ack(0x10), 0.0)  # nothing outstanding: a ghost for the general path


def test_read_response_middles_in_a_run_are_placed_in_one_loop_up_to_the_last() -> None:
    """A 4-packet READ's responses: FIRST, then a GRO run [MIDDLE, MIDDLE, MIDDLE] whose third
    MIDDLE stands where the LAST must be: the loop places the two that fit and stops; the
    LAST then completes the READ with every byte."""
    qp, buf = read_posted(4096)
    data = os.urandom(4096)
    deliver(
        qp, Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_FIRST, 0x11, 0x10), data[:1024], aeth=Aeth(ack_syndrome(), 1)), 0.0
    )
    run = gro_run([Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0x11, 0x11 + n), data[1024 * (n + 1) : 1024 * (n + 2)])
                   for n in range(3)])  # fmt: skip
    assert qp.receive_run(run, STEP, 0.0) == 2 * STEP
    assert qp.requester.comp_psn == 0x13 and not qp.completions
    last = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_LAST, 0x11, 0x13), data[3072:], aeth=Aeth(ack_syndrome(), 1))
    alone = memoryview(wire_bytes(last))  # longer than a MIDDLE (its AETH): a datagram of its own
    assert qp.receive_run(alone, len(alone), 0.0) == len(alone)
    assert bytes(buf) == data
    [completion] = qp.completions
    assert (completion.status, completion.byte_len) == (WcStatus.SUCCESS, 4096)


def test_a_late_read_response_after_a_rewind_is_a_ghost_on_the_fast_path_too() -> None:
    """After a local ACK timeout the requester rewinds to the oldest unacknowledged PSN and has
    not resent yet: a response for that PSN from the first request is a ghost for the general
    path, and header prediction must not place it (it did, and the requester's PSNs went
    backwards: a hang under injected faults)."""
    memory = MrTable()
    buf = bytearray(3072)
    mr = memory.register(PDN, memoryview(buf), BASE, ALL)
    qp = RcQp(QpConfig(qpn=0x11, pdn=PDN, dqpn=0x22, pmtu=1024, sq_psn=0x10, access=ALL, max_rd_atomic=1,
                       timeout=1), memory)  # fmt: skip
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)
    qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(BASE, 3072, mr.key),), raddr=0x1000, rkey=7))
    assert [p.bth.psn for p in qp.packets_to_send(0.0)] == [0x10]  # READ for PSNs 0x10-0x12
    data = os.urandom(3072)
    first = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_FIRST, 0x11, 0x10), data[:1024], aeth=Aeth(ack_syndrome(), 1))
    middle = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0x11, 0x11), data[1024:2048])
    last = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_LAST, 0x11, 0x12), data[2048:], aeth=Aeth(ack_syndrome(), 1))
    deliver(qp, first, 0.0)
    qp.handle_timer(1.0)  # the ACK timeout: rewind to PSN 0x11, nothing resent yet
    assert not qp.receive_predicted(wire_bytes(middle), 1.0)
    deliver(qp, middle, 1.0)
    assert qp.counters["ghost_responses"] == 1 and not qp.completions
    resent = qp.packets_to_send(1.0)  # a READ for the 2048 bytes left, at PSN 0x11
    assert [(p.bth.opcode, p.bth.psn, p.reth.dma_len) for p in resent] == [(Opcode.RC_RDMA_READ_REQUEST, 0x11, 2048)]  # type: ignore[union-attr]
    resent_first = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_FIRST, 0x11, 0x11), data[1024:2048],
                          aeth=Aeth(ack_syndrome(), 1))  # fmt: skip
    deliver(qp, resent_first, 1.0)
    assert qp.receive_predicted(wire_bytes(last), 1.0)  # the LAST of the resent READ, as predicted
    assert bytes(buf) == data
    [completion] = qp.completions
    assert (completion.status, completion.byte_len) == (WcStatus.SUCCESS, 3072)


@pytest.mark.parametrize("path", ["predicted", "general"])
def test_a_late_ack_after_a_rewind_acknowledges_past_the_resend_pointer(path: str) -> None:
    """Four WRITEs sent (PSNs 0x10-0x13) and no ACK: the ACK timeout rewinds to 0x10 and one
    is resent; then an ACK for 0x12 (late, from the first sending, or the responder's answer to
    the duplicate: ``epsn - 1``) completes three, and only 0x13 goes out again. Before, an ACK
    past the resend pointer was a ghost and everything sent was resent before one was taken."""
    qp = RcQp(QpConfig(qpn=0x11, pdn=PDN, dqpn=0x22, pmtu=1024, sq_psn=0x10, access=ALL, timeout=1), MrTable())
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)

    def ack(psn: int) -> None:
        packet = Packet(BTH(Opcode.RC_ACKNOWLEDGE, 0x11, psn), aeth=Aeth(ack_syndrome(), 1))
        if path == "predicted":
            assert qp.receive_predicted(wire_bytes(packet), 1.0)
        else:
            qp.receive(packet, 1.0)

    for counter in range(4):
        qp.post_send(SendWork(counter, WorkOp.RDMA_WRITE, (), raddr=0x1000, rkey=7))
    assert [p.bth.psn for p in qp.packets_to_send(0.0)] == [0x10, 0x11, 0x12, 0x13]
    qp.handle_timer(1.0)
    assert [p.bth.psn for p in qp.packets_to_send(1.0, budget=1)] == [0x10]
    ack(0x12)
    assert [c.wqe_counter for c in qp.completions] == [0, 1, 2] and qp.counters["ghost_responses"] == 0
    assert [p.bth.psn for p in qp.packets_to_send(1.0)] == [0x13]
    assert qp.counters["retransmitted_pkts"] == 2
    ack(0x13)
    assert [c.wqe_counter for c in qp.completions] == [0, 1, 2, 3] and qp.packets_to_send(1.0) == []
    qp.post_send(SendWork(4, WorkOp.RDMA_WRITE, (), raddr=0x1000, rkey=7))
    assert [p.bth.psn for p in qp.packets_to_send(1.0)] == [0x14]  # new work goes on from there


def test_after_an_ack_timeout_the_resend_starts_small_and_doubles_with_each_ack() -> None:
    """A 16-packet WRITE sent and no ACK: the timeout resends one PSN, asking for an ACK; each
    ACK that moves on doubles what may go (2, 4, ...: a slow peer is not flooded with the whole
    window at every retry), each window's last packet asks for the ACK that opens the next; a
    late ACK (the peer did get the first sending) takes back what it acknowledges at once."""
    memory = MrTable()
    region = memory.register(PDN, memoryview(bytearray(16 * 1024)), 0x4000, ALL)
    qp = RcQp(QpConfig(qpn=0x11, pdn=PDN, dqpn=0x22, pmtu=1024, sq_psn=0, access=ALL, timeout=1), memory)
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)

    def ack(psn: int) -> None:
        qp.receive(Packet(BTH(Opcode.RC_ACKNOWLEDGE, 0x11, psn), aeth=Aeth(ack_syndrome(), 1)), 1.0)

    def sent() -> list[tuple[int, bool]]:
        return [(p.bth.psn, p.bth.ackreq) for p in qp.packets_to_send(1.0)]

    qp.post_send(SendWork(1, WorkOp.RDMA_WRITE, (Sge(0x4000, 16 * 1024, region.key),), raddr=0x1000, rkey=7))
    assert len(qp.packets_to_send(0.0)) == 16
    qp.handle_timer(1.0)
    assert sent() == [(0, True)]
    assert sent() == []  # the window is full until an ACK
    ack(0)
    assert sent() == [(1, False), (2, True)]
    ack(2)
    assert sent() == [(3, False), (4, False), (5, False), (6, True)]
    ack(14)  # late: the first sending of 7-14 arrived
    assert sent() == [(15, True)]  # the LAST, not 7-14 again
    ack(15)
    assert [c.wqe_counter for c in qp.completions] == [1] and qp.requester.window == 16
    assert qp.counters["retransmitted_pkts"] == 8


def test_zero_length_read_and_write_need_no_valid_key(target: Target) -> None:
    responses = target.send(write(0xDEAD, 0x12345678, b""))
    assert [p.bth.opcode for p in responses] == [Opcode.RC_ACKNOWLEDGE] and nak_code(responses) is None
    responses = target.send(read(0xBEEF, 0x87654321, 0, psn=EPSN + 1))
    assert [(p.bth.opcode, len(p.payload)) for p in responses] == [(Opcode.RC_RDMA_READ_RESPONSE_ONLY, 0)]
    assert target.outside() == target.snapshot


def test_read_flood_beyond_max_dest_rd_atomic_is_refused(target: Target) -> None:
    for index in range(4):  # four reads fill the responder's resources (nothing sent yet)
        target.qp.receive(read(BASE, target.mr.key, 4096, psn=psn_add(EPSN, 4 * index)), 0.0)
    assert target.qp.state is QpState.RTS
    target.qp.receive(read(BASE, target.mr.key, 4096, psn=psn_add(EPSN, 16)), 0.0)
    out = target.qp.packets_to_send(0.0, 1 << 20)
    assert nak_code(out) == NakCode.INVALID_REQUEST
    assert target.qp.counters["resp_err_too_many_rd_atomic"] == 1


def test_duplicate_requests_after_the_qp_moved_on(target: Target) -> None:
    key = target.mr.key
    target.send(write(BASE, key, b"a" * 8))
    target.send(Packet(BTH(Opcode.RC_FETCH_ADD, 0x22, EPSN + 1, True), atomiceth=AtomicEth(BASE + 64, key, 5, 0)))
    before = bytes(target.guarded)
    for _ in range(3):  # replays of both: the write re-ACKed, the atomic answered from its saved result
        ack = target.send(write(BASE, key, b"b" * 8))
        assert [p.bth.opcode for p in ack] == [Opcode.RC_ACKNOWLEDGE]
        replay = target.send(Packet(BTH(Opcode.RC_FETCH_ADD, 0x22, EPSN + 1, True),
                                    atomiceth=AtomicEth(BASE + 64, key, 5, 0)))  # fmt: skip
        assert [p.bth.opcode for p in replay] == [Opcode.RC_ATOMIC_ACKNOWLEDGE]
    assert bytes(target.guarded) == before  # neither executed again
    assert target.qp.counters["duplicate_request"] == 6


def test_packets_for_a_qp_in_the_wrong_state_are_dropped(target: Target) -> None:
    target.qp.modify(QpState.ERR)
    before = bytes(target.guarded)
    assert target.send(write(BASE, target.mr.key, b"z" * 8)) == []
    assert bytes(target.guarded) == before and target.qp.counters["drop_qp_state"] == 1


def test_hostile_responses_never_write_outside_the_read_buffer() -> None:
    memory = MrTable()
    arena = bytearray(os.urandom(GUARD + 8192 + GUARD))
    mr = memory.register(PDN, memoryview(arena)[GUARD : GUARD + 8192], BASE, ALL)
    guards = bytes(arena[:GUARD]), bytes(arena[-GUARD:])
    qp = RcQp(QpConfig(qpn=0x11, pdn=PDN, dqpn=0x22, pmtu=1024, sq_psn=0x10, access=ALL, max_rd_atomic=4), memory)
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)
    qp.post_send(SendWork(1, WorkOp.RDMA_READ, (Sge(BASE, 3000, mr.key),), raddr=0x1000, rkey=7))
    qp.post_send(SendWork(2, WorkOp.ATOMIC_FETCH_AND_ADD, (Sge(BASE + 4096, 8, mr.key),), raddr=0x2000, rkey=7))
    assert len(qp.packets_to_send(0.0)) == 2  # READ (PSNs 0x10-0x12) and FETCH_ADD (0x13)
    rng = random.Random(5)
    for _ in range(3000):
        opcode = rng.choice([Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
                             Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY,
                             Opcode.RC_ACKNOWLEDGE, Opcode.RC_ATOMIC_ACKNOWLEDGE])  # fmt: skip
        flags = OPCODES[opcode].flags  # type: ignore[union-attr]
        psn = rng.choice([0x10, 0x11, 0x12, 0x13, 0x14, 0xF, rng.randrange(1 << 24)])
        payload = b"" if not flags & OpFlag.READ else os.urandom(rng.choice([0, 1, 1000, 1024, 2000]))
        syndrome = rng.choice([ack_syndrome(), nak_syndrome(NakCode.PSN_SEQ_ERR), 0x20 | rng.randrange(32),
                               rng.randrange(256)])  # fmt: skip
        pkt = Packet(BTH(opcode, 0x11, psn), payload[:1024] if flags & OpFlag.READ else b"",
                     aeth=Aeth(syndrome, rng.randrange(1 << 24)) if flags & OpFlag.AETH else None,
                     atomicacketh=AtomicAckEth(rng.randrange(1 << 64)) if flags & OpFlag.ATMACK else None)  # fmt: skip
        deliver(qp, pkt, rng.random())
        qp.packets_to_send(rng.random())
        qp.handle_timer(rng.random() * 10)
    assert (bytes(arena[:GUARD]), bytes(arena[-GUARD:])) == guards
    assert all(c.status in WcStatus for c in qp.completions)


FUZZ_PACKETS = int(os.environ.get("PYROCE_FUZZ_PACKETS", "100000"))
FUZZ_SEED = int(os.environ.get("PYROCE_FUZZ_SEED", "1"))


def test_fuzzed_requests_leave_every_byte_outside_the_mrs_unchanged(target: Target) -> None:
    """A seeded stream of mutated and random packets at a responder (``PYROCE_FUZZ_PACKETS``,
    default 100 000; ``PYROCE_FUZZ_SEED``). Afterwards the guard bytes and the other regions
    are unchanged, and the QP still answers a normal request."""
    rng = random.Random(FUZZ_SEED)
    executed = 0
    key, keys = target.mr.key, [target.mr.key, target.other_mr.key, target.local_mr.key, target.stale_key]
    rc_opcodes = [info.opcode for info in OPCODES if info is not None and info.opcode < 0x20]
    buf = bytearray(8192)
    psn = EPSN
    resets = malformed = predicted = runs = 0
    for count in range(FUZZ_PACKETS):
        opcode = rng.choice(rc_opcodes)
        open_message = target.qp.responder.in_message
        if open_message and rng.random() < 0.1:  # a GRO run of MIDDLEs, some bytes mutated: the run loop
            opcode = Opcode.RC_RDMA_WRITE_MIDDLE if open_message & OpFlag.WRITE else Opcode.RC_SEND_MIDDLE
            run = bytearray(gro_run([Packet(BTH(opcode, 0x22, psn_add(psn, n), rng.random() < 0.2), os.urandom(1024))
                                     for n in range(rng.randrange(2, 6))]))  # fmt: skip
            for _ in range(rng.choice([0, 1, 2])):
                run[rng.randrange(len(run))] = rng.randrange(256)
            predicted += deliver_run(target.qp, memoryview(run), STEP, count * 1e-6)
            runs += 1
            target.qp.packets_to_send(count * 1e-6, 1 << 20)
            target.qp.completions.clear()
            psn = target.qp.responder.epsn
            continue
        if open_message and rng.random() < 0.3:  # go deeper into messages: what header prediction takes
            opcode = Opcode.RC_RDMA_WRITE_MIDDLE if open_message & OpFlag.WRITE else Opcode.RC_SEND_MIDDLE
        flags = OPCODES[opcode].flags  # type: ignore[union-attr]
        va = rng.choice([BASE, BASE + rng.randrange(REGION), BASE + REGION - rng.randrange(64), BASE - 8,
                         rng.randrange(1 << 64), (1 << 64) - rng.randrange(64)])  # fmt: skip
        length = rng.choice([0, 1, 8, 1024, 4096, REGION, rng.randrange(1 << 32)])
        payload = os.urandom(rng.choice([0, 1, 8, 1023, 1024, 1024, 1025]) if flags & OpFlag.REQ else 0)
        if OPCODES[opcode].payload.name == "NONE":  # type: ignore[union-attr]
            payload = b""
        elif OPCODES[opcode].payload.name == "FIXED8":  # type: ignore[union-attr]
            payload = payload[:8].ljust(8, b"\0")
        fields: dict[str, object] = {}
        if flags & OpFlag.RETH:
            fields["reth"] = Reth(va & ((1 << 64) - 1), rng.choice(keys), length)
        if flags & OpFlag.ATMETH:
            fields["atomiceth"] = AtomicEth(va & ((1 << 64) - 1), rng.choice(keys), rng.randrange(1 << 64), 0)
        if flags & OpFlag.AETH:
            fields["aeth"] = Aeth(rng.randrange(256), 0)
        if flags & OpFlag.ATMACK:
            fields["atomicacketh"] = AtomicAckEth(0)
        if flags & OpFlag.IMMDT:
            fields["immdt"] = rng.randrange(1 << 32)
        if flags & OpFlag.IETH:
            fields["ieth"] = rng.choice(keys)
        if flags & OpFlag.FETH:
            fields["feth"] = Feth(1, 1)
        psn_choice = rng.choice([psn, psn, psn, psn_add(psn, 1), psn_add(psn, -1), rng.randrange(1 << 24)])
        pkt = Packet(BTH(opcode, 0x22, psn_choice, rng.random() < 0.5), payload, **fields)  # type: ignore[arg-type]
        size = build_packet_into(buf, 0, pkt) + 4
        data = bytearray(buf[:size])
        for _ in range(rng.choice([0, 0, 1, 3])):  # mutate some bytes (lengths and headers disagree)
            data[rng.randrange(size)] = rng.randrange(256)
        if rng.random() < 0.05:
            data = data[: rng.randrange(size + 1)]
        before = target.qp.responder.msn
        if target.qp.receive_predicted(bytes(data), count * 1e-6):
            predicted += 1
        else:
            try:
                parsed = parse_packet(bytes(data))
            except MalformedPacket:
                malformed += 1
                continue
            target.qp.receive(parsed, count * 1e-6)
        executed += target.qp.responder.msn != before
        target.qp.packets_to_send(count * 1e-6, 1 << 20)
        target.qp.completions.clear()
        psn = target.qp.responder.epsn
        if target.qp.state is QpState.ERR:
            resets += 1
            for state in (QpState.RESET, QpState.INIT, QpState.RTR, QpState.RTS):
                target.qp.modify(state)
            target.qp.responder.start(psn)
            for index in range(4):
                target.qp.post_recv(RecvWork(index, (Sge(BASE + 0x400000, 8192, target.recv_mr.key),)))
    assert target.outside() == target.snapshot
    assert malformed > 0 and resets > 0 and predicted > 0 and runs > 0, (malformed, resets, predicted, runs)
    # still alive: a normal WRITE is executed and ACKed
    psn = target.qp.responder.epsn
    out = target.send(write(BASE + 8, key, b"alive!!!", psn=psn))
    assert nak_code(out) is None and [p.bth.opcode for p in out] == [Opcode.RC_ACKNOWLEDGE]
    assert bytes(target.guarded[8:16]) == b"alive!!!"
    assert executed > FUZZ_PACKETS // 100  # a real share of the stream got through every check


def unpadded(pkt: Packet) -> bytes:
    """``pkt``'s bytes with the last payload byte cut and PadCnt 0: a payload of 4n - 1 bytes
    that no pad makes 4-byte aligned (RoCE's UDP length allows it; IB's packet length does not)."""
    data = bytearray(wire_bytes(pkt))
    data[1] &= ~0x30 & 0xFF
    return bytes(data[:-5] + data[-4:])


PAD_CASES = {  # the malformed packet, after the FIRST of its message when it is a LAST
    "SEND ONLY": (None, Packet(BTH(Opcode.RC_SEND_ONLY, 0x22, EPSN, True), b"s" * 64)),
    "WRITE ONLY": (None, write(BASE, 1, b"w" * 64)),
    "SEND LAST": (Packet(BTH(Opcode.RC_SEND_FIRST, 0x22, EPSN), b"f" * 1024),
                  Packet(BTH(Opcode.RC_SEND_LAST, 0x22, psn_add(EPSN, 1), True), b"l" * 64)),
    "WRITE LAST": (Packet(BTH(Opcode.RC_RDMA_WRITE_FIRST, 0x22, EPSN), b"f" * 1024, reth=Reth(BASE, 1, 1024 + 63)),
                   Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, 0x22, psn_add(EPSN, 1), True), b"l" * 64)),
}  # fmt: skip


@pytest.mark.parametrize("case", PAD_CASES)
def test_a_pad_count_that_does_not_pad_the_payload_is_an_invalid_request(target: Target, case: str) -> None:
    """As rxe answers a WRITE whose pad disagrees with its length: NAK invalid request, the QP
    in error, nothing placed; the wire layer refuses the packet, the QP still answers it."""
    first, pkt = PAD_CASES[case]
    if pkt.reth is not None:
        pkt = write(BASE, target.mr.key, pkt.payload)
    if first is not None:
        if first.reth is not None:
            first = Packet(first.bth, first.payload, reth=Reth(BASE, target.mr.key, first.reth.dma_len))
        assert nak_code(target.send(first)) is None
    data = unpadded(pkt)
    with pytest.raises(MalformedPacket):
        parse_packet(data)
    region_before = bytes(target.guarded)
    deliver_run(target.qp, memoryview(data), len(data), 0.0)
    responses = target.qp.packets_to_send(0.0, 1 << 20)
    assert nak_code(responses) == NakCode.INVALID_REQUEST, responses
    assert responses[-1].bth.psn == pkt.bth.psn
    assert target.qp.state is QpState.ERR
    assert bytes(target.guarded[1024:]) == region_before[1024:] and target.outside() == target.snapshot


def test_a_duplicate_with_a_bad_pad_count_is_not_answered(target: Target) -> None:
    assert nak_code(target.send(write(BASE, target.mr.key, b"x" * 16))) is None
    data = unpadded(write(BASE, target.mr.key, b"y" * 16))  # the same PSN again: a duplicate
    deliver_run(target.qp, memoryview(data), len(data), 0.0)
    assert target.qp.packets_to_send(0.0, 1 << 20) == [] and target.qp.state is QpState.RTS
