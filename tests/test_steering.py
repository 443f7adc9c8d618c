"""Several engines on one NIC address: the kernel hands each datagram to the engine that owns
its destination QP (``link.steering``), and the engines' QPs talk to each other through it."""

from __future__ import annotations

import random
import select
import socket
import time
from collections import Counter

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.host.assembly import build_device
from pyroce.link.steering import Steering, engine_of, steering_program
from pyroce.link.udp import UdpLink
from pyroce.nic.port import Port
from pyroce.nic.tx import TxBatch
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from pyroce.wire.bth import BTH_STRUCT
from pyroce.wire.opcodes import Opcode


def fresh_address() -> str:
    return f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"


def engines_on(address: str, count: int) -> list[UdpLink]:
    """``count`` steered links on ``address``, bound in engine order (as the kernel numbers them)."""
    return [UdpLink(address, steering=Steering(count, index)) for index in range(count)]


def packet(dqpn: int, payload: bytes = b"x" * 8) -> bytes:
    return BTH_STRUCT.pack(Opcode.RC_SEND_ONLY, 0, 0xFFFF, dqpn, 0) + payload


def received(links: list[UdpLink]) -> list[list[int]]:
    """The DestQPs each link's socket holds now (a datagram too short for a BTH as -1)."""
    time.sleep(0.05)
    got: list[list[int]] = [[] for _ in links]
    for index, link in enumerate(links):
        while select.select([link.sock], [], [], 0)[0]:
            data = link.sock.recv(65536)
            got[index].append(int.from_bytes(data[5:8], "big") if len(data) >= 8 else -1)
    return got


def test_the_rule_and_the_program_agree_on_every_engine() -> None:
    """``engine_of`` keeps QP0 and QP1 on engine 0 and deals the rest out by residue; the BPF
    program is that rule (checked against the kernel below)."""
    assert [engine_of(qpn, 3) for qpn in (0, 1, 2, 3, 4, 0x11, 0xFFFFFF)] == [0, 0, 2, 0, 1, 2, 0]
    assert steering_program(3)[4][3] == 3
    with pytest.raises(ValueError, match="numbered 0 to 1"):
        Steering(2, 2)
    with pytest.raises(ValueError, match="1 to 64"):
        Steering(0, 0)


def test_the_kernel_hands_each_datagram_to_the_engine_of_its_qp() -> None:
    address = fresh_address()
    links = engines_on(address, 3)
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]  # three source ports
    try:
        qpns = [0, 1, 2, 3, 4, 5, 0x11, 0x12, 0x13, 0x100, 0xFFFFFE]
        for sender in senders:
            for qpn in qpns:
                sender.sendto(packet(qpn), (address, 4791))
            sender.sendto(b"abc", (address, 4791))  # no BTH: engine 0 (which drops it)
        got = received(links)
        for index in range(3):
            wanted = [qpn for qpn in qpns if engine_of(qpn, 3) == index] * 3 + ([-1] * 3 if index == 0 else [])
            assert sorted(got[index]) == sorted(wanted), index
    finally:
        for sock in (*links, *senders):
            sock.close()


def test_a_gso_send_carries_one_qps_packets() -> None:
    """Packets for two QPs of one peer leave in two sends, each steered to its own engine: one
    send would reach the engine of its first datagram's QP whole (a GRO socket's lookup)."""
    address = fresh_address()
    receivers = engines_on(address, 2)
    sender = UdpLink(fresh_address())
    try:
        if not (sender.gso and receivers[0].gro):
            pytest.fail("this kernel lacks UDP GSO/GRO (Linux 5.0+ has both)")
        batch = TxBatch(memoryview(bytearray(65536)), Port(sender, None, Counter(), time.monotonic), Counter())
        path = sender.tx_path(address)
        batch.send(address, 0x12, path, [packet(0x12), packet(0x12)])
        batch.send(address, 0x13, path, [packet(0x13), packet(0x13)])
        batch.flush()
        time.sleep(0.05)
        runs = []
        for receiver in receivers:
            buf = bytearray(65536)
            got = receiver.recv_into(buf)
            assert got is not None
            size, _, step, _ = got
            runs.append([int.from_bytes(buf[start + 5 : start + 8], "big") for start in range(0, size, step)])
        assert runs == [[0x12, 0x12], [0x13, 0x13]]
    finally:
        for link in (*receivers, sender):
            link.close()


@pytest.fixture
def two_engines():
    address = fresh_address()
    devices = [build_device(f"steered{index}", link, progress="thread") for index, link in
               enumerate(engines_on(address, 2))]  # fmt: skip
    contexts = [Context(device=device) for device in devices]
    yield contexts
    for context in contexts:
        context.close()
    for device in devices:
        device.close()


def test_qps_of_two_engines_on_one_address_talk_through_the_kernel(two_engines) -> None:
    """Each engine numbers its QPs in its own residue class; a QP of each, connected, moves a
    WRITE and a SEND both ways. A datagram to the address goes through the socket unless it is
    for the engine's own QP, so the kernel, steering, is the only way they meet."""
    a, b = (RcEndpoint.open(1 << 16, context=context, psn=0) for context in two_engines)
    assert (a.qp.qp_num % 2, b.qp.qp_num % 2) == (0, 1)
    a.connect(b.info())
    b.connect(a.info())
    for sender, receiver in ((a, b), (b, a)):
        data = random.randbytes(20000)
        sender.mr.write(data, len(data), 0)
        write = SendWR(1, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1,
                       sg=[SGE(sender.mr.buf, len(data), sender.mr.lkey)])  # fmt: skip
        write.set_wr_rdma(receiver.mr.rkey, receiver.mr.buf + 30000)
        sender.qp.post_send(write)
        assert [wc.status for wc in sender.poll()] == [ibv_wc_status.IBV_WC_SUCCESS]
        assert receiver.mr.read(len(data), 30000) == data
        receiver.qp.post_recv(RecvWR(2, 1, [SGE(receiver.mr.buf, 4096, receiver.mr.lkey)]))
        sender.qp.post_send(SendWR(3, num_sge=1, sg=[SGE(sender.mr.buf, 1000, sender.mr.lkey)]))
        assert [wc.status for wc in sender.poll()] == [ibv_wc_status.IBV_WC_SUCCESS]
        (wc,) = receiver.poll()
        assert (wc.status, wc.byte_len) == (ibv_wc_status.IBV_WC_SUCCESS, 1000)
        assert receiver.mr.read(1000, 0) == data[:1000]
    for endpoint in (a, b):
        assert endpoint.ctx.device.engine.counters["drop_unknown_qpn"] == 0
