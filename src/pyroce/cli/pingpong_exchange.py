"""The pingpong tools' out-of-band exchange over TCP, byte for byte as the C tools'
``pp_client_exch_dest`` and ``pp_server_exch_dest``: the client connects and writes its
``slots`` 52-byte ``"%04x:%06x:%06x:%s"`` LID:QPN:PSN:GID messages (GID = the 16 raw bytes as 32
hex digits) each plus NUL, reads the server's and writes ``"done\\0"``; the server accepts, reads,
connects its QPs, writes its own messages and reads ``done``. rc_pingpong and uc_pingpong send
one message; srq_pingpong always sends MAX_QP (256), its QPs' first and zeros after them."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from pyroce.apps.pingpong import DONE, EMPTY_DEST, MSG_LEN, Dest, PingpongError


def read_exact(sock: socket.socket, count: int) -> bytes:
    """Up to ``count`` bytes: fewer only at end of stream."""
    buf = b""
    while len(buf) < count:
        chunk = sock.recv(count - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def first_socket(infos: list[Any], setup: Callable[[socket.socket, Any], None]) -> socket.socket | None:
    """The C tools' ``getaddrinfo`` loop: a socket for the first address ``setup`` succeeds on."""
    for family, socktype, proto, _, addr in infos:
        try:
            sock = socket.socket(family, socktype, proto)
        except OSError:
            continue
        try:
            setup(sock, addr)
        except OSError:
            sock.close()
            continue
        return sock
    return None


def bind_reusable(sock: socket.socket, addr: Any) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(addr)


def messages(my_dests: list[Dest], slots: int) -> bytes:
    """Our ``slots`` messages: one per QP, then empty ones (srq_pingpong's zeroed ``my_dest``)."""
    return b"".join(dest.wire() for dest in [*my_dests, *[EMPTY_DEST] * (slots - len(my_dests))])


def remote_dests(msgs: bytes, count: int) -> list[Dest]:
    """The peer's addresses of our ``count`` QPs; an empty one means it has fewer QPs than we
    have (the C tools would connect to QPN 0 and wait forever)."""
    dests = [Dest.parse(msgs[i * MSG_LEN : (i + 1) * MSG_LEN]) for i in range(count)]
    for i, dest in enumerate(dests):
        if dest.qpn == 0:
            raise PingpongError(f"the peer sent no address for QP[{i}]: it has fewer QPs than this side's {count} (-q)")
    return dests


def client_exch_dest(servername: str, port: int, my_dests: list[Dest], slots: int) -> list[Dest]:
    """``pp_client_exch_dest``: connect, write ours, read theirs, write ``done``."""
    try:
        infos = socket.getaddrinfo(servername, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PingpongError(f"{exc.strerror} for {servername}:{port}") from None
    sock = first_socket(infos, lambda sock, addr: sock.connect(addr))
    if sock is None:
        raise PingpongError(f"Couldn't connect to {servername}:{port}")
    size = slots * MSG_LEN
    with sock:
        try:
            sock.sendall(messages(my_dests, slots))
        except OSError as exc:
            raise PingpongError(f"Couldn't send local address: {exc.strerror}") from None
        try:
            msgs = read_exact(sock, size)
            if len(msgs) != size:
                raise PingpongError(f"Couldn't read/write remote address: got {len(msgs)} of {size} bytes")
            sock.sendall(DONE)
        except OSError as exc:
            raise PingpongError(f"Couldn't read/write remote address: {exc.strerror}") from None
    return remote_dests(msgs, len(my_dests))


def server_exch_dest(port: int, my_dests: list[Dest], slots: int, connect: Callable[[list[Dest]], None]) -> list[Dest]:
    """``pp_server_exch_dest``: accept one client, read its addresses, ``connect`` the QPs to
    them, answer, read ``done``."""
    infos = socket.getaddrinfo(None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    listener = first_socket(infos, bind_reusable)
    if listener is None:
        raise PingpongError(f"Couldn't listen to port {port}")
    with listener:
        listener.listen(1)
        try:
            conn, _ = listener.accept()
        except OSError as exc:
            raise PingpongError(f"accept() failed: {exc.strerror}") from None
    size = slots * MSG_LEN
    with conn:
        try:
            msgs = read_exact(conn, size)
        except OSError as exc:
            raise PingpongError(f"Couldn't read remote address: {exc.strerror}") from None
        if len(msgs) != size:
            raise PingpongError(f"{len(msgs)}/{size}: Couldn't read remote address")
        rem_dests = remote_dests(msgs, len(my_dests))
        try:
            connect(rem_dests)
        except PingpongError as exc:
            raise PingpongError(f"Couldn't connect to remote QP: {exc}") from None
        try:
            conn.sendall(messages(my_dests, slots))
            done = read_exact(conn, len(DONE))
        except OSError as exc:
            raise PingpongError(f"Couldn't send/recv local address: {exc.strerror}") from None
        if len(done) != len(DONE):
            raise PingpongError("Couldn't send/recv local address: no 'done' from the client")
    return rem_dests
