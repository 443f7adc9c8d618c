"""An RC peer in another process, for tests that need the traffic to cross a process
boundary (real UDP between two devices, not the in-process loopback).

The peer process opens its own pyroce0, connects an RC endpoint to ours, keeps receives
posted and records every SEND it receives, and answers a few control requests over a pipe:
read or write its memory, list what it received. Its device has the environment of this
process (``PYROCE_FAULTS`` included)."""

from __future__ import annotations

import contextlib
import multiprocessing
from multiprocessing.connection import Connection

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.wr import SGE, RecvWR

RECEIVES = 16  # receives the peer keeps posted
RECV_SIZE = 1 << 16  # bytes each receive takes; the MR's first RECEIVES slots of it hold them
START_TIMEOUT_S = 60


class RemotePeer:
    """The other process's endpoint: ``info`` to connect to, ``read``/``write`` its memory,
    ``received()`` the SEND payloads it got."""

    def __init__(self, mr_size: int = 4 << 20) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._conn, child = spawn.Pipe()
        self.process = spawn.Process(target=_serve, args=(child, mr_size), daemon=True)
        self.process.start()
        try:
            if not self._conn.poll(START_TIMEOUT_S):
                raise RuntimeError(f"the peer process did not start in {START_TIMEOUT_S} s")
            self.info = PeerInfo(*self._conn.recv())
        except BaseException:  # it died or hung while starting: no process or pipe is left behind
            self.close()
            raise
        self.data_offset = RECEIVES * RECV_SIZE  # where ``read``/``write`` may go without meeting receives

    def connect(self, local: RcEndpoint, **connect: int) -> None:
        """Connect ``local`` and the peer to each other (both reach RTS)."""
        self._request("connect", tuple(local.info()), connect)
        local.connect(self.info, **connect)

    def read(self, offset: int, length: int) -> bytes:
        return self._request("read", offset, length)  # type: ignore[no-any-return]

    def write(self, offset: int, data: bytes) -> None:
        self._request("write", offset, data)

    def received(self) -> list[bytes]:
        """The payloads of the SENDs received since the last call, in order."""
        return self._request("received")  # type: ignore[no-any-return]

    def stats(self) -> dict[str, int]:
        return self._request("stats")  # type: ignore[no-any-return]

    def close(self) -> None:
        """Ask the peer to quit; kill it if it does not; always reap it and close the pipe."""
        if self.process.is_alive():
            with contextlib.suppress(OSError):  # it may have died since
                self._conn.send(("quit",))
            self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self._conn.close()

    def _request(self, *request: object) -> object:
        self._conn.send(request)
        if not self._conn.poll(30):
            raise RuntimeError(f"the peer process did not answer {request[0]!r} in 30 s")
        ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"the peer process failed: {value}")
        return value


def _serve(conn: Connection, mr_size: int) -> None:
    """The peer process's loop: reap receives while answering control requests."""
    ep = RcEndpoint.open(max(mr_size, RECEIVES * RECV_SIZE * 2), max_wr=2 * RECEIVES)
    conn.send(tuple(ep.info()))
    received: list[bytes] = []
    try:
        while True:
            _, wcs = ep.cq.poll(RECEIVES)
            for wc in wcs:
                if wc.status == 0 and wc.opcode & 0x80:  # a receive completion (IBV_WC_RECV...)
                    received.append(ep.mr.read(wc.byte_len, wc.wr_id * RECV_SIZE))
                    _post(ep, wc.wr_id)
            if not conn.poll(0 if wcs else 0.0005):
                continue
            request = conn.recv()
            if request[0] == "quit":
                return
            try:
                conn.send((True, _answer(ep, request, received)))
            except Exception as exc:  # noqa: BLE001 - reported to the test, which raises it
                conn.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        ep.close()


def _answer(ep: RcEndpoint, request: tuple, received: list[bytes]) -> object:
    kind = request[0]
    if kind == "connect":
        ep.connect(PeerInfo(*request[1]), **request[2])
        for slot in range(RECEIVES):
            _post(ep, slot)
        return None
    if kind == "read":
        return ep.mr.read(request[2], request[1])
    if kind == "write":
        ep.mr.write(request[2], len(request[2]), request[1])
        return None
    if kind == "received":
        got = list(received)
        received.clear()
        return got
    if kind == "stats":
        return ep.ctx.device.stats()
    raise ValueError(f"unknown request {kind!r}")


def _post(ep: RcEndpoint, slot: int) -> None:
    ep.qp.post_recv(RecvWR(wr_id=slot, sg=[SGE(ep.mr.buf + slot * RECV_SIZE, RECV_SIZE, ep.mr.lkey)]))
