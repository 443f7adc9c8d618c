"""pyroce as the RoCEv2 peer of an RTL design in a cocotb testbench.

A ``GmiiPeer`` is a pyroce NIC on an ``EthernetLink`` whose frames enter the design through a
cocotbext-eth ``GmiiSource`` and come out of it into a ``GmiiSink``. Its engine runs in host
mode at the simulator's time (``device.step(now)`` every ``step_cycles`` clock cycles), so its
timers (ACK timeouts, RNR waits, CM resends) follow simulated time: a stalled design shows as a
retry after the simulated timeout, not a hang. The verbs drive it as any device::

    peer = GmiiPeer("nic0", "10.0.0.1", tx=GmiiSource(...), rx=GmiiSink(...), clock=dut.clk)
    peer.start()
    context = Context(device=peer.device)  # then PD, MR, CQ, QP as on any device

cocotb and cocotbext-eth are needed only here (``pip install cocotb cocotbext-eth``); the rest
of pyroce never imports this module.
"""

from __future__ import annotations

import logging
from typing import Any

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles
from cocotbext.eth import GmiiFrame, GmiiSink, GmiiSource

from pyroce.host.assembly import build_device
from pyroce.link.ethernet import EthernetLink
from pyroce.nic.device import NicDevice


def simulated_seconds() -> float:
    """The simulator's time, as the engine's clock."""
    return get_sim_time("sec")


class GmiiPeer:
    """A pyroce NIC on the GMII ports of a design (its frames: ``tx`` in, ``rx`` out)."""

    def __init__(self, name: str, address: str, *, tx: GmiiSource, rx: GmiiSink, clock: Any,
                 step_cycles: int = 16) -> None:  # fmt: skip
        self.link = EthernetLink(address)
        self.device: NicDevice = build_device(name, self.link, progress="host", clock=simulated_seconds)
        self._tx, self._rx, self._clock, self._step_cycles = tx, rx, clock, step_cycles
        for model in (tx, rx):  # each frame at INFO is a page of bytes: the NIC's capture shows them better
            model.log.setLevel(logging.WARNING)
        self.bad_fcs = 0  # frames the design delivered with a wrong FCS (dropped, as a MAC drops them)

    def start(self) -> cocotb.task.Task[None]:
        """Run the NIC from now on, alongside the test."""
        return cocotb.start_soon(self._run())

    async def _run(self) -> None:
        while True:
            await ClockCycles(self._clock, self._step_cycles)
            while not self._rx.empty():
                frame = self._rx.recv_nowait()
                if frame.check_fcs():
                    self.link.receive_frame(bytes(frame.get_payload()))
                else:
                    self.bad_fcs += 1
            self.device.step(simulated_seconds())
            while self.link.frames:
                await self._tx.send(GmiiFrame.from_payload(self.link.frames.popleft()))

    def close(self) -> None:
        self.device.close()
