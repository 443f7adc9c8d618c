"""cocotb tests (run in the simulator by tests/test_cocotb_peer.py): two pyroce NICs whose
Ethernet frames cross ``gmii_pipeline.v``, cycle by cycle, in simulated time."""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.eth import GmiiSink, GmiiSource

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.sim.cocotb_peer import GmiiPeer
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR

MESSAGE = 64 * 1024
CLOCK_NS = 8  # GMII: 125 MHz, a byte a cycle


async def peers(dut: object) -> tuple[GmiiPeer, GmiiPeer]:
    """Clock, reset, and a NIC on each side of the pipeline."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    a = GmiiPeer("sim-a", "10.1.0.1", tx=GmiiSource(dut.a_txd, dut.a_tx_er, dut.a_tx_en, dut.clk, dut.rst),
                 rx=GmiiSink(dut.a_rxd, dut.a_rx_er, dut.a_rx_dv, dut.clk, dut.rst), clock=dut.clk)  # fmt: skip
    b = GmiiPeer("sim-b", "10.1.0.2", tx=GmiiSource(dut.b_txd, dut.b_tx_er, dut.b_tx_en, dut.clk, dut.rst),
                 rx=GmiiSink(dut.b_rxd, dut.b_rx_er, dut.b_rx_dv, dut.clk, dut.rst), clock=dut.clk)  # fmt: skip
    a.start()
    b.start()
    return a, b


@cocotb.test()
async def a_64_kib_write_crosses_the_design(dut: object) -> None:
    """An RC RDMA WRITE of 64 KiB from A lands in B's memory through the RTL, byte for byte,
    and A's completion comes back through it."""
    a, b = await peers(dut)
    writer = RcEndpoint.open(MESSAGE, context=Context(device=a.device))
    target = RcEndpoint.open(MESSAGE, context=Context(device=b.device))
    writer.connect(target.info())
    target.connect(writer.info())
    writer.mr.write(bytes(i * 7 % 251 for i in range(MESSAGE)), MESSAGE, 0)
    wr = SendWR(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(writer.mr.buf, MESSAGE, writer.mr.lkey)])  # fmt: skip
    wr.set_wr_rdma(target.mr.rkey, target.mr.buf)
    started = cocotb.simtime.get_sim_time("us")
    writer.qp.post_send(wr)
    for _ in range(20_000):  # 64 KiB is ~72 000 bytes on the wire: ~580 us at a byte per 8 ns
        await ClockCycles(dut.clk, 64)
        count, wcs = writer.cq.poll(1)
        if count:
            break
    else:
        raise AssertionError("no completion after 10 ms of simulated time")
    assert wcs[0].status == ibv_wc_status.IBV_WC_SUCCESS and wcs[0].opcode == ibv_wc_opcode.IBV_WC_RDMA_WRITE, wcs
    assert target.mr.read(MESSAGE, 0) == writer.mr.read(MESSAGE, 0)
    elapsed = cocotb.simtime.get_sim_time("us") - started
    frames = a.link.counters["frames_sent"], b.link.counters["frames_sent"]
    dut._log.info(f"64 KiB WRITE through the design: {elapsed:.0f} us simulated, frames A->B {frames[0]}, "
                  f"B->A {frames[1]}")  # fmt: skip
    assert frames[0] >= MESSAGE // 1024 and a.bad_fcs == b.bad_fcs == 0
    for peer in (a, b):
        assert peer.link.counters["frames_received"] > 0
        assert not [name for name in peer.link.counters if name.startswith("drop_")], peer.link.counters
    for endpoint in (writer, target):
        endpoint.close()
    a.close()
    b.close()
