"""``ibv_rc_pingpong``'s out-of-band exchange over TCP, byte for byte as the C tool's
``pp_client_exch_dest`` and ``pp_server_exch_dest``: the client connects and writes its 52-byte
``"%04x:%06x:%06x:%s"`` LID:QPN:PSN:GID message (GID = the 16 raw bytes as 32 hex digits) plus
NUL, reads the server's and writes ``"done\\0"``; the server accepts, reads, moves its QP to
RTR/RTS, writes its own message and reads ``done``."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from pyroce.apps.pingpong import DONE, MSG_LEN, Dest, Pingpong, PingpongError


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
    """The C tool's ``getaddrinfo`` loop: a socket for the first address ``setup`` succeeds on."""
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


def client_exch_dest(servername: str, port: int, my_dest: Dest) -> Dest:
    """``pp_client_exch_dest``: connect, write ours, read theirs, write ``done``."""
    try:
        infos = socket.getaddrinfo(servername, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PingpongError(f"{exc.strerror} for {servername}:{port}") from None
    sock = first_socket(infos, lambda sock, addr: sock.connect(addr))
    if sock is None:
        raise PingpongError(f"Couldn't connect to {servername}:{port}")
    with sock:
        try:
            sock.sendall(my_dest.wire())
        except OSError as exc:
            raise PingpongError(f"Couldn't send local address: {exc.strerror}") from None
        try:
            msg = read_exact(sock, MSG_LEN)
            if len(msg) != MSG_LEN:
                raise PingpongError(f"Couldn't read/write remote address: got {len(msg)} of {MSG_LEN} bytes")
            sock.sendall(DONE)
        except OSError as exc:
            raise PingpongError(f"Couldn't read/write remote address: {exc.strerror}") from None
    return Dest.parse(msg)


def server_exch_dest(pp: Pingpong, ib_port: int, mtu: int, port: int, sl: int, my_dest: Dest, sgid_idx: int) -> Dest:
    """``pp_server_exch_dest``: accept one client, read its address, connect the QP, answer,
    read ``done``."""
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
    with conn:
        try:
            msg = read_exact(conn, MSG_LEN)
        except OSError as exc:
            raise PingpongError(f"Couldn't read remote address: {exc.strerror}") from None
        if len(msg) != MSG_LEN:
            raise PingpongError(f"{len(msg)}/{MSG_LEN}: Couldn't read remote address")
        rem_dest = Dest.parse(msg)
        try:
            pp.connect(ib_port, my_dest.psn, mtu, sl, rem_dest, sgid_idx)
        except PingpongError as exc:
            raise PingpongError(f"Couldn't connect to remote QP: {exc}") from None
        try:
            conn.sendall(my_dest.wire())
            done = read_exact(conn, len(DONE))
        except OSError as exc:
            raise PingpongError(f"Couldn't send/recv local address: {exc.strerror}") from None
        if len(done) != len(DONE):
            raise PingpongError("Couldn't send/recv local address: no 'done' from the client")
    return rem_dest
