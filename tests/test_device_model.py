"""The device model holds: work reaches the NIC only as mlx5-layout WQEs in the QP's ring plus
a doorbell record, and comes back only as CQEs in the CQ ring (device-model.md).

Here the WQEs and the doorbell record are written byte by byte with ``struct`` (not with
pyroce's encoder), the doorbell register is rung, and the CQE bytes are read straight from the
CQ's ring memory; no verbs call moves the data."""

from __future__ import annotations

import struct
import time

from tests.rc_pair import Endpoint
from tests.test_ud_datapath import GRH, QKEY, RECV_AT, post_recvs, ud_endpoint

CTRL = struct.Struct(">IIBHBI")  # opmod|wqe_index|opcode, qpn|ds, signature, stream id, fm_ce_se, imm
RADDR = struct.Struct(">QII")
DATA = struct.Struct(">IIQ")
MLX5_OPCODE_RDMA_WRITE = 0x08
MLX5_OPCODE_SEND = 0x0A
CQ_UPDATE = 0x08
MLX5_CQE_REQ = 0
MLX5_CQE_RESP_SEND = 2


def wait_cqe(ep: Endpoint, index: int) -> bytes:
    """The 64 bytes of CQE ``index`` once its owner bit says the NIC wrote it on this pass."""
    ring = ep.cq._buf
    count = len(ring) // 64
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        cqe = bytes(ring[(index % count) * 64 : (index % count + 1) * 64])
        op_own = cqe[63]
        if op_own >> 4 != 0xF and op_own & 1 == (index // count) & 1:
            return cqe
    raise AssertionError(f"no CQE {index}")


def test_hand_written_wqes_move_data_and_produce_cqes(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    a.mr.write(bytes(range(256)) * 16, 4096)
    qpn_a, qpn_b = a.qp.qp_num, b.qp.qp_num
    # b: one receive WQE (a data segment, then the 0x100 terminator) and the receive counter
    DATA.pack_into(b.qp.rq.ring.buf, 0, 1000, b.mr.lkey, b.mr.buf + 8192)
    DATA.pack_into(b.qp.rq.ring.buf, 16, 0, 0x100, 0)
    struct.pack_into(">I", b.qp._doorbell_buf, 0, 1)
    b.ctx.device.ring_doorbell(qpn_b)
    # a: an RDMA WRITE (ctrl, raddr, data: one basic block) then a SEND (ctrl, data)
    sq = a.qp._sq_buf
    CTRL.pack_into(sq, 0, (0 << 8) | MLX5_OPCODE_RDMA_WRITE, (qpn_a << 8) | 3, 0, 0, CQ_UPDATE, 0)
    RADDR.pack_into(sq, 16, b.mr.buf + 100, b.mr.rkey, 0)
    DATA.pack_into(sq, 32, 3000, a.mr.lkey, a.mr.buf)
    CTRL.pack_into(sq, 64, (1 << 8) | MLX5_OPCODE_SEND, (qpn_a << 8) | 2, 0, 0, CQ_UPDATE, 0)
    DATA.pack_into(sq, 80, 1000, a.mr.lkey, a.mr.buf + 3000)
    struct.pack_into(">I", a.qp._doorbell_buf, 4, 2)  # send producer: two basic blocks
    a.ctx.device.ring_doorbell(qpn_a)

    write_cqe, send_cqe = wait_cqe(a, 0), wait_cqe(a, 1)
    recv_cqe = wait_cqe(b, 0)
    for cqe, counter, wqe_opcode in ((write_cqe, 0, MLX5_OPCODE_RDMA_WRITE), (send_cqe, 1, MLX5_OPCODE_SEND)):
        assert cqe[63] >> 4 == MLX5_CQE_REQ
        assert struct.unpack_from(">H", cqe, 60)[0] == counter  # wqe_counter
        assert struct.unpack_from(">I", cqe, 56)[0] == (wqe_opcode << 24) | qpn_a  # s_wqe_opcode_qpn
    assert recv_cqe[63] >> 4 == MLX5_CQE_RESP_SEND
    assert struct.unpack_from(">I", recv_cqe, 44)[0] == 1000  # byte_cnt
    assert struct.unpack_from(">I", recv_cqe, 56)[0] & 0xFFFFFF == qpn_b
    assert b.mr.read(3000, 100) == a.mr.read(3000, 0)
    assert b.mr.read(1000, 8192) == a.mr.read(1000, 3000)


AV = struct.Struct(">II I BBH 4x 6x BB I 16s")  # mlx5_wqe_av: qkey, rsvd, dqp_dct, stat_rate_sl, fl_mlid, rlid,
MLX5_EXTENDED_UD_AV = 0x80000000  # ..., rmac, tclass, hop_limit, grh_gid_fl, rgid


def test_a_hand_written_ud_wqe_sends_a_datagram() -> None:
    """A UD WQE as libmlx5 writes it: control segment, the 48-byte datagram segment (address
    vector: Q_Key, destination QPN with the extended-AV bit, GRH flag, destination GID), one
    data segment. The receiver's CQE carries the source QP and the GRH flag in flags_rqpn."""
    a, b = ud_endpoint(), ud_endpoint()
    try:
        post_recvs(b, 1)
        a.mr.write(b"hand-written datagram", 21, 0)
        sq, qpn_a = a.qp._sq_buf, a.qp.qp_num
        CTRL.pack_into(sq, 0, MLX5_OPCODE_SEND, (qpn_a << 8) | 5, 0, 0, CQ_UPDATE, 0)  # ctrl + 3 AV + data
        AV.pack_into(sq, 16, QKEY, 0, MLX5_EXTENDED_UD_AV | b.qp.qp_num, 0, 0, 0xC000, 0, 64, 1 << 30,
                     b.info().gid)  # fmt: skip
        DATA.pack_into(sq, 64, 21, a.mr.lkey, a.mr.buf)
        struct.pack_into(">I", a.qp._doorbell_buf, 4, 2)  # 80 bytes: two basic blocks
        a.ctx.device.ring_doorbell(qpn_a)
        sent = wait_cqe(a, 0)
        assert (
            sent[63] >> 4 == MLX5_CQE_REQ and struct.unpack_from(">I", sent, 56)[0] == (MLX5_OPCODE_SEND << 24) | qpn_a
        )
        got = wait_cqe(b, 0)
        assert got[63] >> 4 == MLX5_CQE_RESP_SEND
        assert struct.unpack_from(">I", got, 44)[0] == GRH + 21  # byte_cnt
        flags_rqpn = struct.unpack_from(">I", got, 24)[0]
        assert flags_rqpn & 0xFFFFFF == qpn_a and flags_rqpn >> 28 & 3  # source QP, a GRH
        assert b.mr.read(21, RECV_AT + GRH) == b"hand-written datagram"
    finally:
        a.close()
        b.close()
