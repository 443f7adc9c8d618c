"""Direct QPs (mlx5dv posting): the NIC notices WQEs a program wrote by hand and a doorbell record
it moved, with no doorbell rung, and a WQE whose control segment does not hold its own index yet
is not work (torn or stale): counted, waited for, then run once it is written.

WQEs and records are written byte by byte with ``struct`` (as tests/test_device_model.py does),
and CQEs read from the ring memory; the engine thread alone finds the work."""

from __future__ import annotations

import struct
import time

import pytest

from pyroce.nic.rings import UAR_SIZE
from tests.rc_pair import Endpoint
from tests.test_device_model import CQ_UPDATE, CTRL, DATA, MLX5_CQE_REQ, MLX5_OPCODE_RDMA_WRITE, RADDR, wait_cqe

pytestmark = pytest.mark.embedded_nic  # the device model's own command (a C program's goes through the shared NIC)


def make_direct(ep: Endpoint) -> None:
    ep.ctx.device.direct_qp(ep.qp.qp_num, memoryview(bytearray(UAR_SIZE)))


def write_wqe(ep: Endpoint, peer: Endpoint, slot: int, index: int, length: int, at: int) -> None:
    """An RDMA WRITE of ``length`` bytes from ``at`` to the same offset of ``peer``'s MR, in
    basic block ``slot``, its control segment saying WQE ``index``."""
    sq, base = ep.qp._sq_buf, slot * 64
    RADDR.pack_into(sq, base + 16, peer.mr.buf + at, peer.mr.rkey, 0)
    DATA.pack_into(sq, base + 32, length, ep.mr.lkey, ep.mr.buf + at)
    CTRL.pack_into(sq, base, (index << 8) | MLX5_OPCODE_RDMA_WRITE, (ep.qp.qp_num << 8) | 3, 0, 0, CQ_UPDATE, 0)


def publish(ep: Endpoint, producer: int) -> None:
    """The send doorbell record, and nothing rung."""
    struct.pack_into(">I", ep.qp._doorbell_buf, 4, producer)


def test_a_direct_qps_record_is_noticed_without_a_doorbell(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    make_direct(a)
    a.mr.write(b"direct write", 12, 64)
    write_wqe(a, b, 0, 0, 12, 64)
    publish(a, 1)
    cqe = wait_cqe(a, 0)
    assert cqe[63] >> 4 == MLX5_CQE_REQ and struct.unpack_from(">H", cqe, 60)[0] == 0
    assert b.mr.read(12, 64) == b"direct write"
    assert a.ctx.device.counters["torn_wqes"] == 0


def test_a_torn_wqe_is_not_work_until_its_control_segment_is_written(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    make_direct(a)
    a.mr.write(b"first", 5, 0)
    a.mr.write(b"second", 6, 256)
    write_wqe(a, b, 0, 0, 5, 0)
    # WQE 1's control segment still holds the index of a WQE of the ring's previous lap
    write_wqe(a, b, 1, 1 - a.qp.sq_wqebbs & 0xFFFF, 6, 256)
    publish(a, 2)
    wait_cqe(a, 0)
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:  # many passes: none takes WQE 1
        time.sleep(0.01)
    ring = a.cq._buf
    assert ring[127] >> 4 == 0xF, "the stale WQE completed"
    assert b.mr.read(6, 256) == bytes(6)
    assert a.ctx.device.counters["torn_wqes"] == 1  # once, however many passes looked
    write_wqe(a, b, 1, 1, 6, 256)  # the program finishes writing it; the record does not move
    cqe = wait_cqe(a, 1)
    assert cqe[63] >> 4 == MLX5_CQE_REQ and struct.unpack_from(">H", cqe, 60)[0] == 1
    assert b.mr.read(6, 256) == b"second"
