"""The extended verbs: every ``QPEx.wr_*`` operation pyroce sends moves its data between an
RC (or UC) pair and completes through ``CQEX``'s ``start_poll``/``poll_next``/``read_*`` with the
fields ``CQ.poll`` would give; a batch takes one doorbell, ``wr_abort`` leaves the ring as it was,
and misuse gets pyverbs' and rxe's errnos."""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import NamedTuple

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.cq_ex import CQEX, CqInitAttrEx, PollCqAttr
from pyroce.verbs.mr import MR
from pyroce.verbs.mw import MW, MWBindInfo
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QPAttr, QPCap
from pyroce.verbs.qp_ex import RC_SEND_OPS, UC_SEND_OPS, UD_SEND_OPS, DataBuffer, QPEx, QPInitAttrEx
from pyroce.verbs.wr import SGE, RecvWR, SendWR, inc_rkey
from tests.rc_pair import ALL_ACCESS, Endpoint, connected_pair, open_endpoint
from tests.test_ud_datapath import GRH, QKEY, RECV_AT, ah_to, post_recvs, ud_endpoint

WC = e.ibv_wc_opcode
OK = e.ibv_wc_status.IBV_WC_SUCCESS
SIGNALED = e.ibv_send_flags.IBV_SEND_SIGNALED
WORD = struct.Struct("=Q")
EX_MASK = e.ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_PD | e.ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS


class Done(NamedTuple):
    """One completion as the ``read_*`` accessors give it."""

    status: int
    wr_id: int
    opcode: int
    byte_len: int
    qp_num: int
    src_qp: int
    imm_data: int
    wc_flags: int


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = connected_pair(send_ops_flags=int(RC_SEND_OPS))
    yield a, b
    a.close()
    b.close()


def poll_ex(ep: Endpoint, count: int = 1, deadline_s: float = 10.0) -> list[Done]:
    """Exactly ``count`` completions, read one batch at a time through the CQEX."""
    cq = ep.cq
    assert isinstance(cq, CQEX)
    out: list[Done] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count:
        if cq.start_poll(PollCqAttr()) == errno.ENOENT:
            assert time.monotonic() < deadline, f"{len(out)} of {count} completions"
            continue
        out.append(read(cq))
        while len(out) < count and cq.poll_next() == 0:
            out.append(read(cq))
        cq.end_poll()
    return out


def read(cq: CQEX) -> Done:
    return Done(cq.status, cq.wr_id, cq.read_opcode(), cq.read_byte_len(), cq.read_qp_num(), cq.read_src_qp(),
                cq.read_imm_data(), cq.read_wc_flags())  # fmt: skip


def post(ep: Endpoint, wr_id: int, build: str, *args: int, sg: list[SGE] | None = None,
         inline: list[DataBuffer] | None = None) -> None:  # fmt: skip
    """One signaled WR through ``wr_start``, the builder, its data and ``wr_complete``."""
    qp = ep.qp
    assert isinstance(qp, QPEx)
    qp.wr_start()
    qp.wr_id, qp.wr_flags = wr_id, SIGNALED
    getattr(qp, build)(*args)
    if sg is not None:
        qp.wr_set_sge(sg[0]) if len(sg) == 1 else qp.wr_set_sge_list(len(sg), sg)
    if inline is not None:
        qp.wr_set_inline_data(inline[0].addr, inline[0].length) if len(inline) == 1 else (
            qp.wr_set_inline_data_list(len(inline), inline))  # fmt: skip
    qp.wr_complete()


def randomize(*eps: Endpoint) -> None:
    for ep in eps:
        ep.mr.write(os.urandom(ep.mr.length), ep.mr.length)


def pieces(ep: Endpoint, sizes: list[int], at: int = 0) -> list[SGE]:
    """SGEs of ``sizes`` bytes from ``at``, 3 bytes apart so a gather error would show."""
    out = []
    for size in sizes:
        out.append(SGE(ep.mr.buf + at, size, ep.mr.lkey))
        at += size + 3
    return out


def gathered(ep: Endpoint, sg: list[SGE]) -> bytes:
    return b"".join(ep.mr.read(s.length, s.addr - ep.mr.buf) for s in sg)


@pytest.mark.parametrize("sizes", [[0], [1500], [7, 1024, 2000]])
@pytest.mark.parametrize("with_imm", [False, True])
def test_send(pair: tuple[Endpoint, Endpoint], sizes: list[int], with_imm: bool) -> None:
    a, b = pair
    randomize(a, b)
    src, size = pieces(a, sizes), sum(sizes)
    b.qp.post_recv(RecvWR(wr_id=0xB0B, sg=[SGE(b.mr.buf, size + 10, b.mr.lkey)]))
    if with_imm:
        post(a, 0xA1, "wr_send_imm", 0xDEADBEEF, sg=src)
    else:
        post(a, 0xA1, "wr_send", sg=src)
    (sent,) = poll_ex(a)
    (recv,) = poll_ex(b)
    assert (sent.status, sent.wr_id, sent.opcode, sent.qp_num) == (OK, 0xA1, WC.IBV_WC_SEND, a.qp.qp_num)
    flags = e.ibv_wc_flags.IBV_WC_WITH_IMM if with_imm else 0
    assert recv == Done(OK, 0xB0B, WC.IBV_WC_RECV, size, b.qp.qp_num, 0,
                        socket.htonl(0xDEADBEEF) if with_imm else 0, flags)  # fmt: skip
    assert b.mr.read(size, 0) == gathered(a, src)


def test_send_imm_is_the_posted_int_on_the_wire(pair: tuple[Endpoint, Endpoint]) -> None:
    """``wr_send_imm(data)`` is ``htobe32(data)``: ``data`` is on the wire and the receiver's
    ``read_imm_data`` is the ``__be32`` as C reads it (rdma-core's tests compare its ``ntohl``),
    as ``post_send`` with ``imm_data=htonl(data)`` gives."""
    a, b = pair
    for index in range(2):
        b.qp.post_recv(RecvWR(wr_id=index, sg=[]))
    post(a, 2, "wr_send_imm", 0x01020304, sg=[])
    a.qp.post_send(SendWR(wr_id=3, opcode=e.ibv_wr_opcode.IBV_WR_SEND_WITH_IMM, imm_data=socket.htonl(0x01020304)))
    poll_ex(a, 2)
    assert [socket.ntohl(done.imm_data) for done in poll_ex(b, 2)] == [0x01020304, 0x01020304]


@pytest.mark.parametrize("sizes", [[1], [40], [10, 20, 30]])
def test_inline_send(pair: tuple[Endpoint, Endpoint], sizes: list[int]) -> None:
    a, b = pair
    randomize(a, b)
    src = pieces(a, sizes, at=4096)
    b.qp.post_recv(RecvWR(wr_id=7, sg=[SGE(b.mr.buf, 100, b.mr.lkey)]))
    post(a, 8, "wr_send", inline=[DataBuffer(s.addr, s.length) for s in src])
    before = gathered(a, src)
    randomize(a)  # inline data was copied at wr_complete: later writes do not reach the peer
    poll_ex(a)
    (recv,) = poll_ex(b)
    assert recv.byte_len == sum(sizes) and b.mr.read(sum(sizes), 0) == before


@pytest.mark.parametrize("with_imm", [False, True])
@pytest.mark.parametrize("sizes", [[3000], [5, 1024, 6]])
def test_rdma_write(pair: tuple[Endpoint, Endpoint], sizes: list[int], with_imm: bool) -> None:
    a, b = pair
    randomize(a, b)
    src, size, at = pieces(a, sizes), sum(sizes), 8192 + 3
    if with_imm:
        b.qp.post_recv(RecvWR(wr_id=0x1111, sg=[]))
        post(a, 0xC0, "wr_rdma_write_imm", b.mr.rkey, b.mr.buf + at, 0x0A0B0C0D, sg=src)
    else:
        post(a, 0xC0, "wr_rdma_write", b.mr.rkey, b.mr.buf + at, sg=src)
    (done,) = poll_ex(a)
    assert (done.status, done.opcode, done.wr_id, done.qp_num) == (OK, WC.IBV_WC_RDMA_WRITE, 0xC0, a.qp.qp_num)
    if with_imm:
        (recv,) = poll_ex(b)
        assert recv == Done(OK, 0x1111, WC.IBV_WC_RECV_RDMA_WITH_IMM, size, b.qp.qp_num, 0, socket.htonl(0x0A0B0C0D),
                            e.ibv_wc_flags.IBV_WC_WITH_IMM)  # fmt: skip
    assert b.mr.read(size, at) == gathered(a, src)


def test_inline_rdma_write(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    randomize(a, b)
    post(a, 3, "wr_rdma_write", b.mr.rkey, b.mr.buf + 100, inline=[DataBuffer(a.mr.buf + 50, 64)])
    poll_ex(a)
    assert b.mr.read(64, 100) == a.mr.read(64, 50)


@pytest.mark.parametrize("sizes", [[2500], [100, 1024, 1]])
def test_rdma_read(pair: tuple[Endpoint, Endpoint], sizes: list[int]) -> None:
    a, b = pair
    randomize(a, b)
    dst, size = pieces(a, sizes), sum(sizes)
    post(a, 0xD0, "wr_rdma_read", b.mr.rkey, b.mr.buf + 777, sg=dst)
    (done,) = poll_ex(a)
    assert (done.status, done.opcode, done.wr_id, done.byte_len) == (OK, WC.IBV_WC_RDMA_READ, 0xD0, size)
    assert gathered(a, dst) == b.mr.read(size, 777)


def test_atomics(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    b.mr.write(WORD.pack(100), 8, 64)
    result = [SGE(a.mr.buf + 8, 8, a.mr.lkey)]
    post(a, 1, "wr_atomic_fetch_add", b.mr.rkey, b.mr.buf + 64, 5, sg=result)
    (done,) = poll_ex(a)
    assert (done.status, done.opcode, done.byte_len) == (OK, WC.IBV_WC_FETCH_ADD, 8)
    assert WORD.unpack(a.mr.read(8, 8))[0] == 100 and WORD.unpack(b.mr.read(8, 64))[0] == 105
    post(a, 2, "wr_atomic_cmp_swp", b.mr.rkey, b.mr.buf + 64, 105, 7, sg=result)
    post(a, 3, "wr_atomic_cmp_swp", b.mr.rkey, b.mr.buf + 64, 105, 9, sg=result)  # compare fails: no swap
    assert [(d.opcode, d.wr_id) for d in poll_ex(a, 2)] == [(WC.IBV_WC_COMP_SWAP, 2), (WC.IBV_WC_COMP_SWAP, 3)]
    assert WORD.unpack(a.mr.read(8, 8))[0] == 7 and WORD.unpack(b.mr.read(8, 64))[0] == 7


def test_a_batch_is_one_doorbell_and_completes_in_order(pair: tuple[Endpoint, Endpoint],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    a, b = pair
    randomize(a, b)
    rings: list[int] = []
    ring = a.qp.device.ring_doorbell
    monkeypatch.setattr(a.qp.device, "ring_doorbell", lambda qpn: (rings.append(qpn), ring(qpn)))
    qp = a.qp
    assert isinstance(qp, QPEx)
    qp.wr_start()
    for index in range(5):
        qp.wr_id, qp.wr_flags = 0x50 + index, SIGNALED
        qp.wr_rdma_write(b.mr.rkey, b.mr.buf + 1000 * index)
        qp.wr_set_sge(SGE(a.mr.buf + 1000 * index, 900, a.mr.lkey))
    assert rings == []
    qp.wr_complete()
    assert rings == [qp.qp_num]
    assert [d.wr_id for d in poll_ex(a, 5)] == [0x50 + index for index in range(5)]
    assert all(b.mr.read(900, 1000 * index) == a.mr.read(900, 1000 * index) for index in range(5))


def test_abort_leaves_the_ring_untouched(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    qp = a.qp
    assert isinstance(qp, QPEx)
    ring, doorbell, producer = bytes(qp._sq_buf), bytes(qp._doorbell_buf), qp.sq_producer
    qp.wr_start()
    qp.wr_send()
    qp.wr_set_sge(SGE(a.mr.buf, 10, a.mr.lkey))
    qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    qp.wr_abort()
    assert (bytes(qp._sq_buf), bytes(qp._doorbell_buf), qp.sq_producer) == (ring, doorbell, producer)
    assert a.cq.start_poll(PollCqAttr()) == errno.ENOENT
    post(a, 9, "wr_rdma_write", b.mr.rkey, b.mr.buf, sg=[SGE(a.mr.buf, 10, a.mr.lkey)])  # the QP still sends
    assert poll_ex(a)[0].wr_id == 9


def test_a_bad_wr_fails_the_whole_batch(pair: tuple[Endpoint, Endpoint]) -> None:
    """``wr_complete`` posts all or none: the error of the bad WR (post_send's errno), nothing
    of the batch on the wire."""
    a, b = pair
    qp = a.qp
    assert isinstance(qp, QPEx)
    producer = qp.sq_producer
    qp.wr_start()
    qp.wr_flags = SIGNALED
    qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    qp.wr_set_sge(SGE(a.mr.buf, 10, a.mr.lkey))
    qp.wr_send()
    qp.wr_set_sge_list(5, pieces(a, [1] * 5))  # max_send_sge is 4
    with pytest.raises(PyverbsRDMAError) as info:
        qp.wr_complete()
    assert info.value.error_code == errno.EINVAL
    qp.wr_start()
    qp.wr_send()
    qp.wr_set_inline_data(a.mr.buf, qp.cap.max_inline_data + 1)  # one byte more than its WQE holds
    with pytest.raises(PyverbsRDMAError) as info:
        qp.wr_complete()
    assert info.value.error_code == errno.EINVAL
    assert qp.sq_producer == producer and a.cq.start_poll(PollCqAttr()) == errno.ENOENT


def errno_of(call: object, *args: object) -> int:
    with pytest.raises(PyverbsRDMAError) as info:
        call(*args)  # type: ignore[operator]
    return info.value.error_code


def test_misuse(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    qp, cq = a.qp, a.cq
    assert isinstance(qp, QPEx) and isinstance(cq, CQEX)
    assert errno_of(qp.wr_send) == errno.EINVAL  # no wr_start
    assert errno_of(qp.wr_complete) == errno.EINVAL
    qp.wr_start()
    assert errno_of(qp.wr_set_sge, SGE(a.mr.buf, 1, a.mr.lkey)) == errno.EINVAL  # no WR to set
    assert errno_of(qp.wr_set_ud_addr, None, 1, 1) == errno.EINVAL  # no WR to set either
    for call, args in ((qp.wr_send_tso, (0, 0, 0)), (qp.wr_atomic_write, (1, 0, bytes(8))),
                       (qp.wr_set_xrc_srqn, (1,))):  # fmt: skip
        assert errno_of(call, *args) == errno.EOPNOTSUPP
    qp.wr_abort()
    assert errno_of(cq.read_opcode) == errno.EINVAL  # no current completion
    assert errno_of(cq.read_timestamp) == errno.EOPNOTSUPP
    assert cq.start_poll(PollCqAttr()) == errno.ENOENT


def test_ops_outside_send_ops_flags_and_qp_type(pair: tuple[Endpoint, Endpoint]) -> None:
    a, _ = pair
    cap = QPCap(max_send_wr=4, max_recv_wr=4)
    only_send = QPInitAttrEx(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=a.cq, rcq=a.cq, cap=cap, comp_mask=EX_MASK,
                             pd=a.pd, send_ops_flags=e.ibv_qp_create_send_ops_flags.IBV_QP_EX_WITH_SEND)  # fmt: skip
    qp = QPEx(a.ctx, only_send)
    qp.wr_start()
    assert errno_of(qp.wr_rdma_read, 1, 0) == errno.EOPNOTSUPP
    qp.wr_abort()
    qp.close()
    for qp_type, ops in ((e.ibv_qp_type.IBV_QPT_UC, e.ibv_qp_create_send_ops_flags.IBV_QP_EX_WITH_RDMA_READ),
                         (e.ibv_qp_type.IBV_QPT_UD, e.ibv_qp_create_send_ops_flags.IBV_QP_EX_WITH_BIND_MW),
                         (e.ibv_qp_type.IBV_QPT_RC, e.ibv_qp_create_send_ops_flags.IBV_QP_EX_WITH_TSO)):  # fmt: skip
        attr = QPInitAttrEx(qp_type=qp_type, scq=a.cq, rcq=a.cq, cap=cap, comp_mask=EX_MASK, pd=a.pd,
                            send_ops_flags=ops)  # fmt: skip
        assert errno_of(QPEx, a.pd, attr) == errno.EOPNOTSUPP
    with_flags = EX_MASK | e.ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_CREATE_FLAGS  # rxe takes it, with no flag set
    for qp_type in (e.ibv_qp_type.IBV_QPT_RC, e.ibv_qp_type.IBV_QPT_UC, e.ibv_qp_type.IBV_QPT_UD):
        send = QPInitAttrEx(qp_type=qp_type, scq=a.cq, rcq=a.cq, cap=cap, comp_mask=with_flags, pd=a.pd,
                            send_ops_flags=e.ibv_qp_create_send_ops_flags.IBV_QP_EX_WITH_SEND)  # fmt: skip
        QPEx(a.ctx, send).close()
        send.create_flags = e.ibv_qp_create_flags.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
        assert errno_of(QPEx, a.ctx, send) == errno.EOPNOTSUPP
    no_pd = QPInitAttrEx(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=a.cq, rcq=a.cq, cap=cap)
    assert errno_of(QPEx, a.ctx, no_pd) == errno.EINVAL


def test_cqex_wc_flags_are_rxes() -> None:
    a, b = connected_pair()
    try:
        stamped = CqInitAttrEx(8, wc_flags=e.ibv_create_cq_wc_flags.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        assert errno_of(CQEX, a.ctx, stamped) == errno.EOPNOTSUPP
        cq = CQEX(a.ctx, CqInitAttrEx(8, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        assert cq.start_poll(PollCqAttr()) == errno.ENOENT
        cq.close()
    finally:
        a.close()
        b.close()


def test_uc_send_and_write_imm() -> None:
    a, b = connected_pair(qp_type=e.ibv_qp_type.IBV_QPT_UC, send_ops_flags=int(UC_SEND_OPS))
    try:
        randomize(a, b)
        b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 3000, b.mr.lkey)]))
        post(a, 2, "wr_send_imm", 0x55, sg=[SGE(a.mr.buf, 2500, a.mr.lkey)])
        b.qp.post_recv(RecvWR(wr_id=3, sg=[]))
        post(a, 4, "wr_rdma_write_imm", b.mr.rkey, b.mr.buf + 4000, 0x66, sg=[SGE(a.mr.buf + 10, 1200, a.mr.lkey)])
        assert [(d.status, d.wr_id) for d in poll_ex(a, 2)] == [(OK, 2), (OK, 4)]
        got = poll_ex(b, 2)
        assert [(d.opcode, d.wr_id, d.byte_len, d.imm_data) for d in got] == [
            (WC.IBV_WC_RECV, 1, 2500, socket.htonl(0x55)), (WC.IBV_WC_RECV_RDMA_WITH_IMM, 3, 1200, socket.htonl(0x66))]  # fmt: skip
        assert b.mr.read(2500, 0) == a.mr.read(2500, 0) and b.mr.read(1200, 4000) == a.mr.read(1200, 10)
        a.qp.wr_start()
        assert errno_of(a.qp.wr_rdma_read, b.mr.rkey, b.mr.buf) == errno.EOPNOTSUPP
        a.qp.wr_abort()
    finally:
        a.close()
        b.close()


def test_bind_mw_and_local_inv_through_the_builders(pair: tuple[Endpoint, Endpoint]) -> None:
    """A type 2 window bound with ``wr_bind_mw`` grants the peer's WRITE; ``wr_local_inv``
    takes it back (the peer's next WRITE is refused)."""
    a, b = pair
    mr = MR(b.pd, 4096, ALL_ACCESS | e.ibv_access_flags.IBV_ACCESS_MW_BIND)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_2)
    rkey = inc_rkey(mw.rkey)
    qp = b.qp
    assert isinstance(qp, QPEx)
    qp.wr_start()
    qp.wr_id, qp.wr_flags = 11, e.ibv_send_flags.IBV_SEND_SIGNALED
    qp.wr_bind_mw(mw, rkey, MWBindInfo(mr, mr.buf, 1024, e.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE))
    qp.wr_complete()
    (bound,) = b.poll()
    assert (bound.wr_id, bound.status, bound.opcode) == (11, 0, e.ibv_wc_opcode.IBV_WC_BIND_MW)
    assert mw.rkey == rkey
    assert write_status(a, rkey, mr.buf, 64) == e.ibv_wc_status.IBV_WC_SUCCESS
    qp.wr_start()
    qp.wr_id = 12
    qp.wr_local_inv(rkey)
    qp.wr_complete()
    (invalidated,) = b.poll()
    assert (invalidated.wr_id, invalidated.opcode) == (12, e.ibv_wc_opcode.IBV_WC_LOCAL_INV)
    assert write_status(a, rkey, mr.buf, 64) == e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR


def write_status(a: Endpoint, rkey: int, raddr: int, length: int) -> int:
    wr = SendWR(wr_id=7, opcode=e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    a.qp.post_send(wr)
    (done,) = a.poll()
    return int(done.status)


def test_ud_send_through_the_builders() -> None:
    """``wr_set_ud_addr`` names the AH, QPN and Q_Key of a UD send built with ``wr_send_imm``."""
    sender = open_endpoint(qp_type=e.ibv_qp_type.IBV_QPT_UD, send_ops_flags=int(UD_SEND_OPS))
    receiver = ud_endpoint()
    try:
        attr = QPAttr(port_num=1)
        attr.qkey, attr.sq_psn = QKEY, 1
        sender.qp.to_rts(attr)
        post_recvs(receiver, 1)
        sender.mr.write(b"datagram", 8, 0)
        qp = sender.qp
        assert isinstance(qp, QPEx)
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 5, e.ibv_send_flags.IBV_SEND_SIGNALED
        qp.wr_send_imm(0xCAFE)
        qp.wr_set_ud_addr(ah_to(sender, receiver.info().gid), receiver.qp.qp_num, QKEY)
        qp.wr_set_sge(SGE(sender.mr.buf, 8, sender.mr.lkey))
        qp.wr_complete()
        sender.poll()
        (wc,) = receiver.poll()
        assert wc.imm_data == socket.htonl(0xCAFE) and wc.wc_flags & e.ibv_wc_flags.IBV_WC_WITH_IMM
        assert wc.src_qp == qp.qp_num and receiver.mr.read(8, RECV_AT + GRH) == b"datagram"
    finally:
        sender.close()
        receiver.close()
