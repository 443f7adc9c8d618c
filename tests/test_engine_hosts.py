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
from pyroce.nic.rings import CqRing, DoorbellRecord, SendRing
from pyroce.nic.wqe import WQEBB, FmCeSe, SendWqe, Sge, WqeOpcode, encode_send_wqe

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SQ_WQEBBS, CQES = 64, 64


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
    doorbell: DoorbellRecord
    produced: int = 0
    consumed: int = 0

    def post_write(self, index: int, length: int, raddr: int, rkey: int) -> None:
        wqe = SendWqe(WqeOpcode.RDMA_WRITE, index, self.qpn, FmCeSe.CQ_UPDATE, raddr=raddr, rkey=rkey,
                      sges=(Sge(self.mr.addr, length, self.mr.key),))  # fmt: skip
        self.produced = self.sq.post(self.produced, encode_send_wqe(wqe))
        self.doorbell.publish(DoorbellRecord.SEND, self.produced & 0xFFFF)
        self.device.ring_doorbell(self.qpn)

    def completions(self) -> list[tuple[int, int]]:
        """(wqe_counter, WC status) of the CQEs written since the last call."""
        found = []
        while (cqe := self.cq_ring.poll(self.consumed)) is not None:
            status = STATUS_OF_SYNDROME[cqe.syndrome] if cqe.opcode in ERROR_OPCODES else WcStatus.SUCCESS
            found.append((cqe.wqe_counter, status))
            self.consumed += 1
        return found


def make_host(device: NicDevice, base: int) -> Host:
    pdn = device.alloc_pd()
    buf = bytearray(1 << 16)
    mr = device.reg_mr(pdn, memoryview(buf), base, ALL)
    cq_buf, consumer = memoryview(bytearray(CQES * CQE_SIZE)), memoryview(bytearray(4))
    cq = device.create_cq(cq_buf, CQES, consumer)
    sq_buf, doorbell = memoryview(bytearray(SQ_WQEBBS * WQEBB)), memoryview(bytearray(8))
    qpn = device.create_qp(pdn, cq, cq, sq_buf, SQ_WQEBBS, memoryview(bytearray(64)), 1, 64, doorbell)
    return Host(device, buf, mr, cq, CqRing(cq_buf, CQES), qpn, SendRing(sq_buf, SQ_WQEBBS), DoorbellRecord(doorbell))


def connect(host: Host, peer: Host, timeout: int) -> None:
    device = host.device
    device.modify_qp(host.qpn, QpState.INIT, {"access": ALL})
    device.modify_qp(host.qpn, QpState.RTR, {"dqpn": peer.qpn, "rq_psn": 0x100, "pmtu": 1024}, peer.device.address)
    device.modify_qp(host.qpn, QpState.RTS, {"sq_psn": 0x100, "timeout": timeout, "retry_cnt": 3})


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host, MemoryWire]]:
    wire = MemoryWire()
    devices = [build_device(f"sim{i}", wire.link(f"10.9.0.{i + 1}"), progress="host") for i in range(2)]
    a, b = make_host(devices[0], 0x10000), make_host(devices[1], 0x900000)
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
