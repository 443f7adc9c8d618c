"""A golden corpus for NIC developers: RC exchanges as a device under test sees them.

Each scenario runs two pyroce NICs on an in-memory wire in host mode, on a simulated clock: a
requester, and the responder whose place a design under test takes. What the responder's port
received is the stimulus, what it sent the expected response, in the order it happened (its
capture, ``Scenario.frames``), with everything a replay must map onto the design (QPNs, PSNs,
the MR's address, key and length, the memory it should hold after; ``Scenario.setup``). The
exchanges cover the paths a responder must get right: SEND, a multi-packet WRITE, READ,
atomics, a receive-not-ready NAK and its retry, a bad R_Key, and a lost packet's sequence NAK
and retransmission. ``pyroce corpus`` writes them as pcap + JSON.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.host.assembly import build_device
from pyroce.host.simulated_time import next_time
from pyroce.link.faults import FaultConfig
from pyroce.link.memory import MemoryWire
from pyroce.nic.device import NicDevice
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, RecvWR, SendWR

REQUESTER, RESPONDER = "10.3.0.1", "10.3.0.2"
MR_SIZE = 16 << 10
REQUESTER_PSN, RESPONDER_PSN = 0x000100, 0x000800
MAX_STEPS = 100_000


class Scenario(NamedTuple):
    """One exchange: its name, what it shows, the responder's frames (time, raw IP frame) and the
    values a replay maps onto the design."""

    name: str
    description: str
    frames: list[tuple[float, bytes]]
    setup: dict[str, Any]


class _Clock:
    """The simulated time both NICs run on."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Bench:
    """Two connected RC endpoints on NICs of their own, the responder's port captured."""

    def __init__(self, requester_faults: str) -> None:
        self.clock = _Clock()
        wire = self.wire = MemoryWire()
        faults = FaultConfig.parse(requester_faults) if requester_faults else None
        self.devices: list[NicDevice] = [
            build_device("corpus-requester", wire.link(REQUESTER), progress="host", faults=faults, clock=self.clock),
            build_device("corpus-responder", wire.link(RESPONDER), progress="host", clock=self.clock),
        ]
        self.requester, self.responder = (
            RcEndpoint.open(MR_SIZE, psn=psn, context=Context(device=device))
            for device, psn in zip(self.devices, (REQUESTER_PSN, RESPONDER_PSN))
        )
        self.requester.mr.write(bytes(i * 13 % 256 for i in range(MR_SIZE)), MR_SIZE, 0)
        self.requester.connect(self.responder.info())
        self.responder.connect(self.requester.info())
        self.capture = self.devices[1].start_capture()

    def post(self, opcode: int, length: int, offset: int = 0, rkey: int | None = None, **atomic: int) -> None:
        """A signaled WR of the requester on its MR at ``offset``, aimed at the responder's MR."""
        mr = self.requester.mr
        wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(mr.buf + offset, length, mr.lkey)])
        target = self.responder.mr
        if atomic:
            wr.set_wr_atomic(target.rkey, target.buf, atomic["compare_add"], atomic.get("swap", 0))
        elif opcode != ibv_wr_opcode.IBV_WR_SEND:
            wr.set_wr_rdma(target.rkey if rkey is None else rkey, target.buf)
        self.requester.qp.post_send(wr)

    def post_receive(self) -> None:
        mr = self.responder.mr
        self.responder.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, MR_SIZE, mr.lkey)]))

    def run(self, completions: int = 1) -> list[int]:
        """Step both NICs until the requester has ``completions`` completions; their statuses."""
        statuses: list[int] = []
        for _ in range(MAX_STEPS):
            for device in self.devices:
                device.step(self.clock.now)
            _, wcs = self.requester.cq.poll(completions - len(statuses))
            statuses += [wc.status for wc in wcs]
            if len(statuses) == completions:
                return statuses
            self.clock.now = self._next_time()
        raise RuntimeError(f"{len(statuses)} of {completions} completions after {MAX_STEPS} steps")

    def _next_time(self) -> float:
        engines = [device.engine for device in self.devices]
        busy = any(engine.has_work for engine in engines) or any(link.waiting for link in self.wire.links.values())
        return next_time(self.clock.now, busy, (engine.next_deadline() for engine in engines))

    def setup(self) -> dict[str, Any]:
        target = self.responder.mr
        return {
            "requester": {"address": REQUESTER, "qpn": self.requester.qp.qp_num, "psn": REQUESTER_PSN},
            "responder": {
                "address": RESPONDER,
                "qpn": self.responder.qp.qp_num,
                "psn": RESPONDER_PSN,
                "mr": {"addr": target.buf, "rkey": target.rkey, "length": MR_SIZE},
            },
            "path_mtu": 1024,
            "responder_memory_sha256": hashlib.sha256(target.read(MR_SIZE, 0)).hexdigest(),
        }

    def close(self) -> None:
        for endpoint in (self.requester, self.responder):
            endpoint.close()
        for device in self.devices:
            device.close()


@contextmanager
def _bench(requester_faults: str = "") -> Iterator[_Bench]:
    bench = _Bench(requester_faults)
    try:
        yield bench
    finally:
        bench.close()


def _expect(statuses: list[int], *expected: int) -> None:
    if statuses != list(expected):
        raise RuntimeError(f"completions {statuses}, expected {list(expected)}")


def send(bench: _Bench) -> None:
    """A 2-byte SEND into a posted receive, ACKed."""
    bench.post_receive()
    bench.post(ibv_wr_opcode.IBV_WR_SEND, 2)
    _expect(bench.run(), ibv_wc_status.IBV_WC_SUCCESS)


def write(bench: _Bench) -> None:
    """An 8 KiB RDMA WRITE: FIRST, six MIDDLEs and LAST at MTU 1024, one ACK."""
    bench.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, 8192)
    _expect(bench.run(), ibv_wc_status.IBV_WC_SUCCESS)


def read(bench: _Bench) -> None:
    """A 4 KiB RDMA READ: one request, four READ responses."""
    bench.post(ibv_wr_opcode.IBV_WR_RDMA_READ, 4096)
    _expect(bench.run(), ibv_wc_status.IBV_WC_SUCCESS)


def atomics(bench: _Bench) -> None:
    """FETCH_AND_ADD then CMP_AND_SWP on the MR's first 8 bytes, each an ATOMIC ACKNOWLEDGE."""
    bench.post(ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, compare_add=5)
    bench.post(ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP, 8, offset=8, compare_add=5, swap=0x1122334455667788)
    _expect(bench.run(2), ibv_wc_status.IBV_WC_SUCCESS, ibv_wc_status.IBV_WC_SUCCESS)


def receiver_not_ready(bench: _Bench) -> None:
    """A SEND with no receive posted: RNR NAK; the requester waits out the RNR timer and sends
    it again, into the receive posted meanwhile."""
    bench.post(ibv_wr_opcode.IBV_WR_SEND, 64)
    for device in bench.devices:
        device.step(bench.clock.now)  # the SEND out, the RNR NAK back
    bench.post_receive()
    _expect(bench.run(), ibv_wc_status.IBV_WC_SUCCESS)


def bad_rkey(bench: _Bench) -> None:
    """A WRITE with an R_Key the responder never gave: NAK remote access error."""
    bench.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, 64, rkey=bench.responder.mr.rkey ^ 0xFF)
    _expect(bench.run(), ibv_wc_status.IBV_WC_REM_ACCESS_ERR)


def lost_packet(bench: _Bench) -> None:
    """A 4 KiB WRITE whose first MIDDLE the wire loses: the responder NAKs the PSN sequence error
    at the next packet, the requester resends from the lost one."""
    bench.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, 4096)
    _expect(bench.run(), ibv_wc_status.IBV_WC_SUCCESS)


SCENARIOS: dict[str, tuple[Callable[[_Bench], None], str]] = {
    "rc_send": (send, ""),
    "rc_write": (write, ""),
    "rc_read": (read, ""),
    "rc_atomics": (atomics, ""),
    "rc_receiver_not_ready": (receiver_not_ready, ""),
    "rc_bad_rkey": (bad_rkey, ""),
    "rc_lost_packet": (lost_packet, "script=drop:1:RC_RDMA_WRITE_MIDDLE"),
}
"""Each scenario: what it does to the bench, and the faults on the requester's egress."""


def run_scenario(name: str) -> Scenario:
    """Run one scenario (a name of ``SCENARIOS``) on a bench of its own."""
    action, faults = SCENARIOS[name]
    with _bench(faults) as bench:
        action(bench)
        return Scenario(name, (action.__doc__ or "").strip(), list(bench.capture.frames), bench.setup())
