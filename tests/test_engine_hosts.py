"""The engine is given its link and its time: two NICs on an in-memory wire, in host mode,
moving data through their rings in simulated time (as under a simulator), with no socket, no
thread and no wall clock involved."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pyroce.host.assembly import build_device
from pyroce.ib.enums import Access, QpState, WcStatus
from pyroce.link.memory import MemoryWire
from pyroce.nic.cqe import CQE_SIZE, ERROR_OPCODES, STATUS_OF_SYNDROME
from pyroce.nic.device import NicDevice
from pyroce.nic.memory import MemoryRegion
from pyroce.nic.queues import HwCq
from pyroce.nic.rings import CqRing, DoorbellRecord, RecvRing, SendRing
from pyroce.nic.wqe import WQEBB, FmCeSe, SendWqe, Sge, WqeOpcode, write_recv_wqe
from pyroce.wire.opcodes import Transport

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SQ_WQEBBS, CQES, RQ_STRIDE = 64, 64, 64


@dataclass
class Host:
    """One simulated host's NIC with a PD, an MR, a CQ and a QP, driven by hand."""

    device: NicDevice
    buf: bytearray
    mr: MemoryRegion
    cq: HwCq
    cq_ring: CqRing
    qpn: int
    sq: SendRing
    rq: RecvRing
    doorbell: DoorbellRecord
    produced: int = 0
    consumed: int = 0

    def post_write(self, index: int, length: int, raddr: int, rkey: int) -> None:
        self.post(WqeOpcode.RDMA_WRITE, index, length, raddr, rkey)

    def post(self, opcode: WqeOpcode, index: int, length: int, raddr: int = 0, rkey: int = 0) -> None:
        wqe = SendWqe(opcode, index, self.qpn, FmCeSe.CQ_UPDATE, raddr=raddr, rkey=rkey,
                      sges=(Sge(self.mr.addr, length, self.mr.key),))  # fmt: skip
        self.produced = self.sq.post(self.produced, wqe, self.sq.wqebb_count)
        self.doorbell.publish(DoorbellRecord.SEND, self.produced & 0xFFFF)
        self.device.ring_doorbell(self.qpn)

    def write_receive(self, offset: int, length: int) -> None:
        """One receive WQE in the ring and the doorbell record moved past it, as a driver posts,
        but without the doorbell's wake-up (``note_receives``): it has not reached the NIC."""
        write_recv_wqe(self.rq.buf, 0, (Sge(self.mr.addr + offset, length, self.mr.key),), RQ_STRIDE)
        self.doorbell.publish(DoorbellRecord.RECV, 1)

    def completions(self) -> list[tuple[int, int]]:
        """(wqe_counter, WC status) of the CQEs written since the last call."""
        found = []
        while (cqe := self.cq_ring.poll(self.consumed)) is not None:
            status = STATUS_OF_SYNDROME[cqe.syndrome] if cqe.opcode in ERROR_OPCODES else WcStatus.SUCCESS
            found.append((cqe.wqe_counter, status))
            self.consumed += 1
        return found


def make_host(device: NicDevice, base: int, transport: Transport = Transport.RC) -> Host:
    pdn = device.alloc_pd()
    buf = bytearray(1 << 16)
    mr = device.reg_mr(pdn, memoryview(buf), base, ALL)
    cq_buf, consumer = memoryview(bytearray(CQES * CQE_SIZE)), memoryview(bytearray(4))
    cq = device.create_cq(cq_buf, CQES, consumer)
    sq_buf, doorbell = memoryview(bytearray(SQ_WQEBBS * WQEBB)), memoryview(bytearray(8))
    rq_buf = memoryview(bytearray(RQ_STRIDE))
    qpn = device.create_qp(pdn, cq, cq, sq_buf, SQ_WQEBBS, rq_buf, 1, RQ_STRIDE, doorbell, transport)
    return Host(device, buf, mr, cq, CqRing(cq_buf, CQES), qpn, SendRing(sq_buf, SQ_WQEBBS), RecvRing(rq_buf, 1, RQ_STRIDE),
                DoorbellRecord(doorbell))  # fmt: skip


def connect(host: Host, peer: Host, timeout: int) -> None:
    device = host.device
    device.modify_qp(host.qpn, QpState.INIT, {"access": ALL})
    device.modify_qp(host.qpn, QpState.RTR, {"dqpn": peer.qpn, "rq_psn": 0x100, "pmtu": 1024}, peer.device.address)
    device.modify_qp(host.qpn, QpState.RTS, {"sq_psn": 0x100, "timeout": timeout, "retry_cnt": 3})


@pytest.fixture(params=[Transport.RC], ids=["RC"])
def hosts(request: pytest.FixtureRequest) -> Iterator[tuple[Host, Host, MemoryWire]]:
    """Two hosts' QPs connected to each other, RC unless a test asks for ``request.param``."""
    wire = MemoryWire()
    devices = [build_device(f"sim{i}", wire.link(f"10.9.0.{i + 1}"), progress="host") for i in range(2)]
    a, b = make_host(devices[0], 0x10000, request.param), make_host(devices[1], 0x900000, request.param)
    connect(a, b, timeout=20)  # 4.3 s local ACK timeout
    connect(b, a, timeout=20)
    yield a, b, wire
    for device in devices:
        device.close()


def run(hosts: tuple[Host, ...], start: float, steps: int, dt: float) -> None:
    for index in range(steps):
        for host in hosts:
            host.device.step(start + index * dt)


def test_two_nics_on_a_memory_wire_move_data_in_simulated_time(hosts: tuple[Host, Host, MemoryWire]) -> None:
    a, b, _ = hosts
    a.buf[:5000] = bytes(range(250)) * 20
    a.post_write(0, 5000, b.mr.addr + 64, b.mr.key)
    assert a.completions() == []  # nothing moves until the host steps the NICs
    run((a, b), 0.0, 4, 1e-6)  # five packets out, the ACK back
    assert a.completions() == [(0, WcStatus.SUCCESS)]
    assert b.buf[64 : 64 + 5000] == a.buf[:5000]


def test_timers_follow_the_hosts_clock(hosts: tuple[Host, Host, MemoryWire]) -> None:
    """The peer leaves the wire: three retries at a 4.3 s timeout end the WRITE in 17
    simulated seconds, which take no real time."""
    a, b, wire = hosts
    del wire.links[b.device.address]
    a.post_write(0, 100, b.mr.addr, b.mr.key)
    start = time.monotonic()
    run((a,), 0.0, 3, 4.4)
    assert a.completions() == []  # two timeouts so far: still retrying
    run((a,), 3 * 4.4, 3, 4.4)
    assert a.completions() == [(0, WcStatus.RETRY_EXC_ERR)]
    assert a.device.qp_stats(a.qpn)["retransmitted_pkts"] == 3
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("hosts", [Transport.RC, Transport.UC], indirect=True, ids=["RC", "UC"])
def test_a_send_finds_the_receive_its_doorbell_record_holds_before_the_doorbell_is_taken(
        hosts: tuple[Host, Host, MemoryWire]) -> None:  # fmt: skip
    """The doorbell record is what the driver posted; the wake-up that announces it may reach the
    NIC later than the SEND for it (a C driver's record waits in the doorbell pipe while the
    peer's doorbell is read from its record). The SEND is still placed: no RNR NAK (RC), no
    dropped message (UC)."""
    a, b, _ = hosts
    a.buf[:300] = bytes(range(100)) * 3
    run((a, b), 0.0, 1, 1e-6)  # each NIC has read its rings once: the receive below is news
    b.write_receive(0x1000, 300)
    a.post(WqeOpcode.SEND, 0, 300)
    run((a, b), 1e-6, 4, 1e-6)
    assert b.completions() == [(0, WcStatus.SUCCESS)]
    assert a.completions() == [(0, WcStatus.SUCCESS)]
    assert b.buf[0x1000 : 0x1000 + 300] == a.buf[:300]
    refused = {name: count for name, count in b.device.qp_stats(b.qpn).items() if "rnr" in name or "drop" in name}
    assert not any(refused.values()), refused
