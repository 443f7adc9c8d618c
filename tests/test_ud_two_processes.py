"""UD between two processes over real UDP: an echo peer in a spawned process answers every
datagram through an AH made from its WC and the network header in its receive buffer (the
IPv4 header as the socket path reports it), as a UD server answers clients it never heard of."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection

import pyroce.verbs.enums as e
from pyroce.verbs.ah import AH
from pyroce.verbs.wr import SGE, SendWR
from tests.test_ud_datapath import GRH, QKEY, RECV_AT, SLOT, ah_to, post_recvs, send, ud_endpoint

ROUNDS = 20


def _echo_peer(conn: Connection) -> None:
    """The other process: a UD QP that sends each datagram back to whoever sent it."""
    ep = ud_endpoint()
    post_recvs(ep, ROUNDS)
    conn.send((ep.info().gid, ep.qp.qp_num))
    for _ in range(ROUNDS):
        (wc,) = ep.poll(deadline_s=30)
        slot = wc.wr_id - 100
        reply = AH(ep.pd, wc=wc, grh=ep.mr.buf + RECV_AT + slot * SLOT, port_num=1)
        length = wc.byte_len - GRH
        wr = SendWR(wr_id=slot, sg=[SGE(ep.mr.buf + RECV_AT + slot * SLOT + GRH, length, ep.mr.lkey)])
        wr.set_wr_ud(reply, wc.src_qp, QKEY)
        ep.qp.post_send(wr)
        ep.poll(deadline_s=30)
    conn.recv()
    ep.close()


def test_datagrams_echoed_by_another_process() -> None:
    spawn = multiprocessing.get_context("spawn")
    conn, child = spawn.Pipe()
    process = spawn.Process(target=_echo_peer, args=(child,), daemon=True)
    process.start()
    ep = ud_endpoint()
    try:
        assert conn.poll(60), "the peer process did not start"
        gid, qpn = conn.recv()
        ah = ah_to(ep, gid)
        post_recvs(ep, ROUNDS)
        mtu = 128 << int(ep.ctx.active_mtu)
        for k in range(ROUNDS):
            size = (k * 97) % (mtu + 1)
            payload = bytes((k + i) & 0xFF for i in range(size))
            ep.mr.write(payload, size, 0)
            send(ep, ah, qpn, size)
            (sent,) = ep.poll()
            assert sent.status == e.ibv_wc_status.IBV_WC_SUCCESS
            (echo,) = ep.poll(deadline_s=30)
            assert echo.status == e.ibv_wc_status.IBV_WC_SUCCESS and echo.src_qp == qpn
            assert echo.byte_len == GRH + size
            assert ep.mr.read(size, RECV_AT + (echo.wr_id - 100) * SLOT + GRH) == payload
        conn.send("done")
    finally:
        process.join(30)
        ep.close()
