"""What the engine does when something goes wrong under it: a send that cannot leave, a QP
failed while it had work in flight, a WQE that cannot be decoded, a device used after close.
Each leaves the device working and says what happened once."""

from __future__ import annotations

import os
import struct
import time
from collections import Counter
from collections.abc import Callable

import pytest

from pyroce.host.assembly import build_device
from pyroce.link.memory import MemoryLink, MemoryWire
from pyroce.link.udp import UdpLink
from pyroce.nic.capture import Capture
from pyroce.nic.port import Port
from pyroce.nic.tx import TxBatch
from pyroce.verbs.enums import ibv_send_flags, ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR
from pyroce.wire.icrc import ICRC_LEN
from tests.rc_pair import connected_pair

pytestmark = pytest.mark.embedded_nic  # the engine's own failures, reached in the device model

NET = f"127.61.{os.getpid() % 250 + 1}"


def test_a_datagram_the_kernel_refuses_is_a_drop_not_an_exception() -> None:
    link = UdpLink(f"{NET}.1")
    try:
        assert link.send(bytes(70000), f"{NET}.2") is False  # EMSGSIZE: larger than any datagram
    finally:
        link.close()


def refusing_once() -> Callable[[tuple[float, bytes]], None]:
    """A capture's sink whose first write fails (as a full disk's would): an error the
    engine does not expect, raised on its way to the link."""
    writes = []

    def sink(frame: tuple[float, bytes]) -> None:
        writes.append(frame)
        if len(writes) == 1:
            raise OSError("refused")

    return sink


def test_a_failed_send_is_not_sent_again_by_the_next_batch() -> None:
    wire = MemoryWire()
    link = MemoryLink(wire, "10.7.0.1")
    receiver = wire.link("10.7.0.2")
    port = Port(link, None, Counter(), time.monotonic)
    port.capture = Capture(sink=refusing_once())
    batch = TxBatch(memoryview(bytearray(4096)), port, Counter())
    path = link.tx_path("10.7.0.2")
    with pytest.raises(OSError, match="refused"):
        batch.send("10.7.0.2", 0x11, path, [b"first"])  # not GSO: the packet leaves at once, and its send raises
    assert batch.segments == 0 and batch.end == 0  # nothing left behind to be sent again
    batch.send("10.7.0.2", 0x11, path, [b"second"])
    buf = bytearray(64)
    got = receiver.recv_into(buf)
    assert got is not None and bytes(buf[:6]) == b"second" and got[0] == 6 + ICRC_LEN
    assert receiver.recv_into(buf) is None


def test_a_qp_failed_with_work_in_flight_leaves_none_counted() -> None:
    a, b = connected_pair()
    try:
        device = a.ctx.device
        b.close()  # nobody answers: the WRITE stays in flight
        wr = SendWR(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                    send_flags=ibv_send_flags.IBV_SEND_SIGNALED)  # fmt: skip
        wr.set_wr_rdma(0x1234, 0)
        a.qp.post_send(wr)
        a.cq.poll()
        assert device.engine.sending == 1
        device.inject_qp_error(a.qp.qp_num, "test")
        assert a.poll(1)[0].status == ibv_wc_status.IBV_WC_GENERAL_ERR
        assert device.engine.sending == 0  # so a lone request elsewhere still goes out at once
    finally:
        a.close()


def test_a_wqe_that_cannot_be_decoded_is_reported_once() -> None:
    a, b = connected_pair()
    try:
        # a control segment with an opcode no NIC knows (0x1f), one segment long
        struct.pack_into(">IIBHBI", a.qp._sq_buf, 0, 0x1F, (a.qp.qp_num << 8) | 1, 0, 0, 0x08, 0)
        struct.pack_into(">I", a.qp._doorbell_buf, 4, 1)
        wcs = []
        for _ in range(3):
            a.ctx.device.ring_doorbell(a.qp.qp_num)
            wcs += a.cq.poll(10)[1]
        time.sleep(0.05)
        wcs += a.cq.poll(10)[1]
        assert [wc.status for wc in wcs] == [ibv_wc_status.IBV_WC_LOC_QP_OP_ERR]
        assert a.ctx.device.stats()["bad_wqes"] == 1
    finally:
        a.close()
        b.close()


def test_a_closed_device_takes_late_doorbells_and_polls_quietly() -> None:
    link = UdpLink(f"{NET}.3")
    device = build_device("pyroce-test", link, progress="thread")
    device.close()
    device.ring_doorbell(0x11)  # a driver racing close: no write into a closed (or reused) fd
    device.poll_empty()
