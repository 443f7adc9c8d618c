"""RC data path through the verbs API: every operation at the sizes around the path MTU and
at 1 MiB, with one and several SGEs; every byte and every completion field checked."""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.device import MAX_MSG_SZ
from pyroce.verbs.mr import MR
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import ALL_ACCESS, Endpoint, connected_pair
from tests.waiting import spin_until

PMTU = 1024
SIZES = [0, 1, PMTU - 1, PMTU, PMTU + 1, 1 << 20]
WC = e.ibv_wc_opcode
WR = e.ibv_wr_opcode
OK = e.ibv_wc_status.IBV_WC_SUCCESS
WRITE_AT = 4096 + 5  # where the WRITE tests write in the peer's MR


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = connected_pair()
    yield a, b
    a.close()
    b.close()


def sges(ep: Endpoint, offset: int, size: int, count: int) -> list[SGE]:
    """``size`` bytes at ``offset`` split into ``count`` SGEs (the last takes the rest),
    each SGE separated by a 7-byte gap so a scatter error would show."""
    if count == 1 or size < count:
        return [SGE(ep.mr.buf + offset, size, ep.mr.lkey)]
    part = size // count
    out, at = [], offset
    for index in range(count):
        length = part if index < count - 1 else size - part * (count - 1)
        out.append(SGE(ep.mr.buf + at, length, ep.mr.lkey))
        at += length + 7
    return out


def gathered(ep: Endpoint, sg: list[SGE]) -> bytes:
    return b"".join(ep.mr.read(s.length, s.addr - ep.mr.buf) for s in sg)


def fill(ep: Endpoint) -> None:
    ep.mr.write(os.urandom(ep.mr.length), ep.mr.length)


@pytest.mark.parametrize("nsge", [1, 3])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("with_imm", [False, True])
def test_send(pair: tuple[Endpoint, Endpoint], size: int, nsge: int, with_imm: bool) -> None:
    a, b = pair
    fill(a)
    fill(b)
    src, dst = send_and_poll(a, b, size, nsge, with_imm)
    assert gathered(b, dst)[:size] == gathered(a, src)


def send_and_poll(a: Endpoint, b: Endpoint, size: int, nsge: int, with_imm: bool) -> tuple[list[SGE], list[SGE]]:
    """A SEND of ``size`` bytes from ``a`` into a receive posted at ``b``, both completions
    checked field by field; returns the SGEs sent from and received into."""
    src, dst = sges(a, 0, size, nsge), sges(b, 0, size + 100, nsge)
    b.qp.post_recv(RecvWR(wr_id=0xB0B, sg=dst))
    opcode = WR.IBV_WR_SEND_WITH_IMM if with_imm else WR.IBV_WR_SEND
    a.qp.post_send(SendWR(wr_id=0xA11, opcode=opcode, imm_data=0xDEADBEEF, sg=src))
    (sent,) = a.poll()
    (recv,) = b.poll()
    assert (sent.status, sent.opcode, sent.wr_id, sent.qp_num) == (OK, WC.IBV_WC_SEND, 0xA11, a.qp.qp_num)
    assert (recv.status, recv.opcode, recv.wr_id, recv.byte_len, recv.qp_num) == (
        OK, WC.IBV_WC_RECV, 0xB0B, size, b.qp.qp_num)  # fmt: skip
    if with_imm:
        assert recv.wc_flags == e.ibv_wc_flags.IBV_WC_WITH_IMM and recv.imm_data == 0xDEADBEEF
    else:
        assert recv.wc_flags == 0
    return src, dst


@pytest.mark.parametrize("nsge", [1, 3])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("with_imm", [False, True])
def test_rdma_write(pair: tuple[Endpoint, Endpoint], size: int, nsge: int, with_imm: bool) -> None:
    a, b = pair
    fill(a)
    fill(b)
    before = b.mr.read(b.mr.length, 0)
    src = write_and_poll(a, b, size, nsge, with_imm)
    after = b.mr.read(b.mr.length, 0)
    assert after[WRITE_AT : WRITE_AT + size] == gathered(a, src)
    assert after[:WRITE_AT] == before[:WRITE_AT] and after[WRITE_AT + size :] == before[WRITE_AT + size :]


def write_and_poll(a: Endpoint, b: Endpoint, size: int, nsge: int, with_imm: bool) -> list[SGE]:
    """An RDMA WRITE of ``size`` bytes from ``a`` to ``b``'s MR at ``WRITE_AT``, its completions
    (and the receiver's, with immediate) checked; returns the SGEs written from."""
    src = sges(a, 0, size, nsge)
    if with_imm:
        b.qp.post_recv(RecvWR(wr_id=0x1111, sg=[]))
    wr = SendWR(wr_id=0xC0, opcode=WR.IBV_WR_RDMA_WRITE_WITH_IMM if with_imm else WR.IBV_WR_RDMA_WRITE,
                imm_data=0x01020304, sg=src)  # fmt: skip
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + WRITE_AT)
    a.qp.post_send(wr)
    (done,) = a.poll()
    assert (done.status, done.opcode, done.wr_id) == (OK, WC.IBV_WC_RDMA_WRITE, 0xC0)
    if with_imm:
        (recv,) = b.poll()
        assert (recv.status, recv.opcode, recv.wr_id, recv.byte_len, recv.imm_data, recv.wc_flags) == (
            OK, WC.IBV_WC_RECV_RDMA_WITH_IMM, 0x1111, size, 0x01020304, e.ibv_wc_flags.IBV_WC_WITH_IMM)  # fmt: skip
    return src


@pytest.mark.parametrize("nsge", [1, 3])
@pytest.mark.parametrize("size", SIZES)
def test_rdma_read(pair: tuple[Endpoint, Endpoint], size: int, nsge: int) -> None:
    a, b = pair
    fill(a)
    fill(b)
    before = a.mr.read(a.mr.length, 0)
    dst = sges(a, 8192, size, nsge)
    wr = SendWR(wr_id=0xEAD, opcode=WR.IBV_WR_RDMA_READ, sg=dst)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 3)
    a.qp.post_send(wr)
    (done,) = a.poll()
    assert (done.status, done.opcode, done.wr_id, done.byte_len) == (OK, WC.IBV_WC_RDMA_READ, 0xEAD, size)
    assert gathered(a, dst) == b.mr.read(size, 3)
    after = a.mr.read(a.mr.length, 0)
    assert after[:8192] == before[:8192]  # nothing written outside the scatter list
    end = dst[-1].addr - a.mr.buf + dst[-1].length
    assert after[end:] == before[end:]


def test_atomics_match_a_reference(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    word = struct.Struct("=Q")
    b.mr.write(word.pack(1000), 8, 64)
    reference = 1000
    for step in range(20):
        wr = SendWR(wr_id=step, sg=[SGE(a.mr.buf + 8 * step, 8, a.mr.lkey)])
        if step % 2:
            wr.opcode = WR.IBV_WR_ATOMIC_CMP_AND_SWP
            compare = reference if step % 4 == 1 else reference + 1  # half succeed, half do not
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, compare, step * 7)
            expected_new = step * 7 if compare == reference else reference
            opcode = WC.IBV_WC_COMP_SWAP
        else:
            wr.opcode = WR.IBV_WR_ATOMIC_FETCH_AND_ADD
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, (1 << 64) - 3)  # adds wrap around 2**64
            expected_new = (reference - 3) % (1 << 64)
            opcode = WC.IBV_WC_FETCH_ADD
        a.qp.post_send(wr)
        (done,) = a.poll()
        assert (done.status, done.opcode, done.wr_id, done.byte_len) == (OK, opcode, step, 8)
        assert word.unpack(a.mr.read(8, 8 * step))[0] == reference  # the original value comes back
        reference = expected_new
        assert word.unpack(b.mr.read(8, 64))[0] == reference


def test_inline_send_and_unsignaled_writes(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    fill(a)
    writes = []
    for index in range(5):
        wr = SendWR(wr_id=100 + index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf + 100, 10, a.mr.lkey)],
                    send_flags=0)  # fmt: skip
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 1000 + 10 * index)
        writes.append(wr)
    for first, second in itertools.pairwise(writes):
        first.next_wr = second
    a.qp.post_send(writes[0])
    payload = a.mr.read(50, 0)
    b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    send = SendWR(wr_id=7, sg=[SGE(a.mr.buf, 50, a.mr.lkey)],
                  send_flags=e.ibv_send_flags.IBV_SEND_INLINE | e.ibv_send_flags.IBV_SEND_SIGNALED)  # fmt: skip
    slot = a.qp.sq_producer
    a.qp.post_send(send)
    a.mr.write(b"\0" * 50, 50)  # inline data was copied at post time: changing the buffer now changes nothing
    wqe, _ = a.qp.sq.fetch(slot)  # the WQE in the ring carries the bytes themselves, no SGE
    assert (wqe.inline, wqe.sges) == (payload, ())
    (done,) = a.poll()  # only the signaled SEND completes; the unsignaled writes before it retire silently
    assert (done.wr_id, done.status, done.opcode) == (7, OK, WC.IBV_WC_SEND)
    (recv,) = b.poll()
    assert recv.byte_len == 50 and b.mr.read(50, 0) == payload
    assert b.mr.read(50, 1000) == a.mr.read(10, 100) * 5


def test_solicited_and_fenced_work_completes_in_order(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    fill(b)
    read = SendWR(wr_id=1, opcode=WR.IBV_WR_RDMA_READ, sg=[SGE(a.mr.buf, 4000, a.mr.lkey)])
    read.set_wr_rdma(b.mr.rkey, b.mr.buf)
    b.qp.post_recv(RecvWR(wr_id=9, sg=[SGE(b.mr.buf + 65536, 4000, b.mr.lkey)]))
    fenced = SendWR(wr_id=2, sg=[SGE(a.mr.buf, 4000, a.mr.lkey)],
                    send_flags=e.ibv_send_flags.IBV_SEND_SIGNALED | e.ibv_send_flags.IBV_SEND_FENCE
                    | e.ibv_send_flags.IBV_SEND_SOLICITED)  # fmt: skip
    read.next_wr = fenced
    a.qp.post_send(read)
    assert [wc.wr_id for wc in a.poll(2)] == [1, 2]
    (recv,) = b.poll()
    # The fenced SEND waited for the READ, so it carries the bytes the READ brought back.
    assert b.mr.read(4000, 65536) == b.mr.read(4000, 0)
    assert recv.wr_id == 9


@pytest.mark.parametrize("mtu", list(e.ibv_mtu))
def test_every_path_mtu_segments_and_reassembles(mtu: int) -> None:
    a, b = connected_pair(path_mtu=mtu)
    try:
        fill(a)
        fill(b)
        b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 20000, b.mr.lkey)]))
        a.qp.post_send(SendWR(wr_id=2, sg=[SGE(a.mr.buf, 10007, a.mr.lkey)]))
        read = SendWR(wr_id=3, opcode=WR.IBV_WR_RDMA_READ, sg=[SGE(a.mr.buf + 65536, 10007, a.mr.lkey)])
        read.set_wr_rdma(b.mr.rkey, b.mr.buf + 100000)
        a.qp.post_send(read)
        assert [(wc.wr_id, wc.status) for wc in a.poll(2)] == [(2, OK), (3, OK)]
        assert b.poll()[0].byte_len == 10007
        assert b.mr.read(10007, 0) == a.mr.read(10007, 0)
        assert a.mr.read(10007, 65536) == b.mr.read(10007, 100000)
        packets = a.ctx.device.stats()["sent_pkts"]
        assert packets >= 2 * -(-10007 // (128 << mtu))  # segmented by the path MTU
    finally:
        a.close()
        b.close()


def test_reads_and_atomics_outstanding_up_to_max_rd_atomic() -> None:
    a, b = connected_pair(rd_atomic=2)
    try:
        fill(b)
        b.mr.write(struct.pack("=Q", 0), 8, 1 << 20)
        chain = []
        for index in range(8):
            if index % 2:
                wr = SendWR(wr_id=index, opcode=WR.IBV_WR_ATOMIC_FETCH_AND_ADD, sg=[SGE(a.mr.buf + 8 * index, 8,
                            a.mr.lkey)])  # fmt: skip
                wr.set_wr_atomic(b.mr.rkey, b.mr.buf + (1 << 20), 1)
            else:
                wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_READ,
                            sg=[SGE(a.mr.buf + 4096 * (index + 1), 3000, a.mr.lkey)])  # fmt: skip
                wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 3000 * index)
            chain.append(wr)
        for first, second in itertools.pairwise(chain):
            first.next_wr = second
        a.qp.post_send(chain[0])
        wcs = a.poll(8)
        assert [(wc.wr_id, wc.status) for wc in wcs] == [(index, OK) for index in range(8)]
        originals = [struct.unpack("=Q", a.mr.read(8, 8 * index))[0] for index in range(1, 8, 2)]
        assert originals == [0, 1, 2, 3]  # executed once each, in order
        for index in range(0, 8, 2):
            assert a.mr.read(3000, 4096 * (index + 1)) == b.mr.read(3000, 3000 * index)
    finally:
        a.close()
        b.close()


def test_write_of_max_msg_sz(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    big_a = MR(a.pd, MAX_MSG_SZ, ALL_ACCESS)
    big_b = MR(b.pd, MAX_MSG_SZ, ALL_ACCESS)
    data = os.urandom(MAX_MSG_SZ)
    big_a.write(data, MAX_MSG_SZ)
    wr = SendWR(wr_id=1, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(big_a.buf, MAX_MSG_SZ, big_a.lkey)])
    wr.set_wr_rdma(big_b.rkey, big_b.buf)
    a.qp.post_send(wr)
    assert a.poll()[0].status == OK
    assert big_b.read(MAX_MSG_SZ, 0) == data


def test_cq_resize_keeps_unpolled_completions(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    for index in range(5):
        wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)
    first = a.poll(1)
    # the other four are written, not yet polled
    spin_until(lambda: a.cq.hw.producer - a.cq.consumer >= 4, "four CQEs written", a.ctx.device.kick)
    a.cq.resize(1000)
    assert a.cq.cqe >= 1000
    assert [wc.wr_id for wc in first + a.poll(4)] == [0, 1, 2, 3, 4]


def test_counters_per_qp_and_per_device() -> None:
    """A pair of its own: it closes a QP."""
    a, b = connected_pair()
    try:
        check_counters(a, b)
    finally:
        a.close()
        b.close()


def check_counters(a: Endpoint, b: Endpoint) -> None:
    before = a.ctx.device.qp_stats(a.qp.qp_num).get("sent_pkts", 0)
    device_before = a.ctx.device.stats()
    b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 5000, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=2, sg=[SGE(a.mr.buf, 3000, a.mr.lkey)]))
    a.poll()
    b.poll()
    assert a.ctx.device.qp_stats(a.qp.qp_num)["sent_pkts"] - before == 3  # 3000 bytes at a 1024 path MTU
    assert b.ctx.device.qp_stats(b.qp.qp_num)["rcvd_pkts"] >= 3
    device = a.ctx.device.stats()
    # both QPs are on this one device: three SEND packets and b's ACK, each counted once
    assert device["sent_pkts"] - device_before.get("sent_pkts", 0) == 4
    assert device["rcvd_pkts"] - device_before.get("rcvd_pkts", 0) == 4
    sent_bytes = device["sent_bytes"] - device_before.get("sent_bytes", 0)
    assert sent_bytes > 3000 and device["rcvd_bytes"] - device_before.get("rcvd_bytes", 0) == sent_bytes
    a.qp.close()  # a QP's per-packet counts are its own: the device keeps them when it goes
    assert a.ctx.device.stats()["sent_pkts"] == device["sent_pkts"]


@pytest.mark.parametrize("sg", ["no SGE", "a zero-length SGE"])
def test_zero_length_write_with_rkey_0(pair: tuple[Endpoint, Endpoint], sg: str) -> None:
    """UCX flushes a connection with a zero-length RDMA WRITE to address 0 with rkey 0: no key is
    checked for zero bytes (IBA 9.4.4), so it completes and touches nothing."""
    a, b = pair
    fill(b)
    before = b.mr.read(b.mr.length, 0)
    wr = SendWR(wr_id=0xF1, opcode=WR.IBV_WR_RDMA_WRITE, sg=[] if sg == "no SGE" else [SGE(a.mr.buf, 0, a.mr.lkey)])
    wr.set_wr_rdma(0, 0)
    a.qp.post_send(wr)
    (done,) = a.poll()
    assert (done.status, done.opcode, done.wr_id) == (OK, WC.IBV_WC_RDMA_WRITE, 0xF1)
    assert b.mr.read(b.mr.length, 0) == before
