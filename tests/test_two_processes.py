"""pyroce between two processes on loopback: the UDP link with GSO/GRO, doorbell batching and
the engine thread, with a real peer process (spawned) that answers with digests of its MR."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_qp_type, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR
from tests.peer_process import peer_process

REGION = 4 << 20


@pytest.fixture
def pair() -> Iterator[tuple[RcEndpoint, PeerInfo, Connection]]:
    with peer_process(REGION) as connected:
        yield connected


def post_writes(ep: RcEndpoint, peer: PeerInfo, size: int, count: int) -> str:
    """Fill ``count`` blocks of ``size`` random bytes, post a WRITE of each to the same place in
    the peer's MR, and return the digest the peer's memory must come to hold."""
    ep.mr.write(os.urandom(size * count), size * count)
    for index in range(count):
        wr = SendWR(wr_id=index, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE,
                    sg=[SGE(ep.mr.buf + index * size, size, ep.mr.lkey)])  # fmt: skip
        wr.set_wr_rdma(peer.rkey, peer.addr + index * size)
        ep.qp.post_send(wr)
    return hashlib.sha256(ep.mr.read(size * count, 0)).hexdigest()


def wait_for_digest(conn: Connection, length: int, expected: str, failure: str) -> None:
    """Ask the peer for the digest of its first ``length`` bytes until it is ``expected``."""
    deadline = time.monotonic() + 10
    while True:  # no verbs call here: only the engine threads move the data
        conn.send((0, length))
        if conn.recv() == expected:
            return
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


@pytest.mark.embedded_nic  # the device's counters: no retransmission (a shared NIC's count every program's)
def test_a_deep_queue_posted_without_polling_still_goes_out(pair) -> None:
    """Only the first WRITE runs the engine at its doorbell; the seven posted behind it wait
    for a poll that never comes, so the engine thread must send them (doorbell batching)."""
    ep, peer, conn = pair
    size, count = 65536, 8
    expected = post_writes(ep, peer, size, count)
    wait_for_digest(conn, size * count, expected, "the WRITEs posted behind the first never arrived")
    wcs = ep.poll(count, 10)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [(index, 0) for index in range(count)]
    stats = ep.ctx.device.stats()
    assert stats["sent_pkts"] >= count * 16 and stats.get("retransmitted_pkts", 0) == 0


@pytest.mark.embedded_nic  # the sender's NIC's counters: no packet received (on a shared NIC, the peer's too)
def test_uc_writes_between_two_processes() -> None:
    """UC over real UDP between two devices: no ACK comes back, every WRITE completes when it
    has left, and the bytes are in the other process's memory."""
    with peer_process(REGION, ibv_qp_type.IBV_QPT_UC) as (ep, peer, conn):
        size, count = 65536, 4
        expected = post_writes(ep, peer, size, count)
        assert [(wc.wr_id, wc.status) for wc in ep.poll(count, 10)] == [(index, 0) for index in range(count)]
        wait_for_digest(conn, size * count, expected, "the UC WRITEs never arrived whole")
        stats = ep.ctx.device.stats()
        assert stats.get("rcvd_pkts", 0) == 0 and stats["sent_pkts"] == count * 16  # no ACKs: UC
