"""The server side of ``pyroce demo``: one RC endpoint that answers the client's requests
(post a receive, report digests of what it received and holds, read and write words) until
the client says ``bye`` with its verdict."""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable
from typing import Any

from pyroce.apps.rc_endpoint import PollTimeout, RcEndpoint
from pyroce.cli.demo_protocol import Channel, from_wire, to_wire, wc_failure
from pyroce.cli.errors import CliError
from pyroce.verbs.enums import ibv_mtu
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.verbs.wr import SGE, RecvWR

SIZES = (0, 1, 1000, 4095, 4096, 4097, 65536, 1 << 20, 4 << 20)  # around every path MTU up to 4 MiB
MAX_SIZE = max(SIZES)
MR_SIZE = 2 * MAX_SIZE
ATOMIC_OFFSET = MR_SIZE - 64
WORD = struct.Struct("=Q")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def open_endpoint() -> RcEndpoint:
    """The endpoint either side uses: one MR holding every size twice (send and target)."""
    return RcEndpoint.open(MR_SIZE, max_wr=32)


def open_for(conn: Channel) -> RcEndpoint:
    """The local child's endpoint, opened once its client is there: a device that cannot open
    is reported to the client (it prints it: the local child's errors show once)."""
    try:
        return open_endpoint()
    except PyverbsError as exc:
        conn.send("error", str(exc))
        raise


def serve(conn: Channel, ep: RcEndpoint) -> dict[str, Any]:
    """Answer the client on ``ep`` until it says ``bye``; returns its verdict."""
    conn.send("info", to_wire(ep.info()), os.getpid(), ep.ctx.device.address, int(ep.ctx.active_mtu))
    handlers: dict[str, Callable[..., Any]] = {
        "connect": lambda peer, mtu: ep.connect(from_wire(peer), path_mtu=ibv_mtu(mtu)),
        "post_recv": lambda size: ep.qp.post_recv(RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, size, ep.mr.lkey)])),
        "wait_recv": lambda: _received(ep, conn.timeout),
        "digest": lambda offset, length: digest(ep.mr.read(length, offset)),
        "fill": lambda offset, length: _fill(ep, offset, length),
        "set_word": lambda offset, value: ep.mr.write(WORD.pack(value), 8, offset),
        "get_word": lambda offset: WORD.unpack(ep.mr.read(8, offset))[0],
        "stats": lambda: ep.ctx.device.stats(),
    }
    while True:
        request, *args = conn.recv()
        if request == "bye":
            return args[0] if args and isinstance(args[0], dict) else {}
        if request not in handlers:
            raise CliError(f"{conn.peer} sent an unknown request {request!r}")
        try:
            result = handlers[request](*args)
        except (PyverbsError, CliError) as exc:
            conn.send("error", str(exc))
            continue
        conn.send("ok", result)


def _received(ep: RcEndpoint, timeout: float) -> tuple[int, str, int]:
    try:
        (wc,) = ep.poll(1, timeout)
    except PollTimeout:
        raise CliError(f"the server's receive did not complete within {timeout:g} s") from None
    if wc.status:
        raise CliError(wc_failure("the server's receive", wc))
    return wc.status, digest(ep.mr.read(wc.byte_len, 0)), wc.byte_len


def _fill(ep: RcEndpoint, offset: int, length: int) -> str:
    data = os.urandom(length)
    ep.mr.write(data, length, offset)
    return digest(data)
