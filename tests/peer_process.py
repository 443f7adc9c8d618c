"""An RC endpoint in another process, connected to one in this process: real UDP between two
devices (GSO, GRO, the engine thread). The peer answers with digests of its MR."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
from collections.abc import Iterator
from multiprocessing.connection import Connection

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_mtu, ibv_qp_type


def _passive_peer(conn: Connection, region: int, qp_type: int) -> None:
    """The other process: an endpoint that connects, then reports digests of its MR."""
    ep = RcEndpoint.open(region, qp_type=qp_type)
    conn.send(tuple(ep.info()))
    peer, mtu = conn.recv()
    ep.connect(PeerInfo(*peer), path_mtu=mtu)
    conn.send("connected")
    while (request := conn.recv()) != "quit":
        offset, length = request
        conn.send(hashlib.sha256(ep.mr.read(length, offset)).hexdigest())
    ep.close()


@contextlib.contextmanager
def peer_process(
    region: int, qp_type: int = ibv_qp_type.IBV_QPT_RC
) -> Iterator[tuple[RcEndpoint, PeerInfo, Connection]]:
    """This process's endpoint, the peer's numbers and the pipe to it (``(offset, length)``
    asks for a digest), connected at path MTU 4096 with QPs of ``qp_type`` (RC or UC)."""
    spawn = multiprocessing.get_context("spawn")
    conn, child = spawn.Pipe()
    process = spawn.Process(target=_passive_peer, args=(child, region, qp_type), daemon=True)
    process.start()
    ep = RcEndpoint.open(region, qp_type=qp_type)
    try:
        assert conn.poll(60), "the peer process did not start"
        peer = PeerInfo(*conn.recv())
        conn.send((tuple(ep.info()), ibv_mtu.IBV_MTU_4096))
        ep.connect(peer, path_mtu=ibv_mtu.IBV_MTU_4096)
        assert conn.recv() == "connected"
        yield ep, peer, conn
    finally:
        conn.send("quit")
        process.join(30)
        ep.close()
