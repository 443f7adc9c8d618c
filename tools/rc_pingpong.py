#!/usr/bin/env python3
"""rc_pingpong.py - rdma-core's ``ibv_rc_pingpong`` on pyroce: RC SEND ping-pong over RoCEv2.

A line-by-line port of ``libibverbs/examples/rc_pingpong.c`` (rdma-core v44) to pyroce's
pyverbs-compatible API, so it interoperates with the real tool on any RoCEv2 device (Linux rxe,
hardware NICs) and with itself::

    rc_pingpong.py [options]            start a server and wait for a connection
    rc_pingpong.py [options] <host>     connect to the server at <host>

Options (the real tool's subset): ``-p PORT`` TCP port (18515), ``-d DEV`` device (pyroce0),
``-i IB_PORT`` (1), ``-s SIZE`` message size (4096), ``-m MTU`` path MTU (1024), ``-r RX_DEPTH``
receives posted at a time (500), ``-n ITERS`` exchanges (1000), ``-l SL`` service level (0),
``-g GID_IDX`` local GID index (0; pyroce0 has only index 0, and RoCE needs a GID), ``-c``
validate the buffer.

Out of band, over TCP, exactly as the C tool: the client connects and writes its 52-byte
``"%04x:%06x:%06x:%s"`` LID:QPN:PSN:GID message (GID = the 16 raw bytes as 32 hex digits) plus
NUL, reads the server's, writes ``"done\\0"``, then moves its QP to RTR/RTS; the server accepts,
reads, moves its QP to RTR/RTS, writes its own message and reads ``done``. RC attributes as in
``pp_connect_ctx``: max_dest_rd_atomic 1, min_rnr_timer 12, timeout 14, retry_cnt 7,
rnr_retry 7, max_rd_atomic 1, a random 24-bit PSN, and a GRH when the peer's GID has a
non-zero interface id.

Data path: ``rx_depth`` receives of ``size`` bytes are posted up front (and topped up when one
or none is left); the client posts one SEND, and each side posts its next SEND once both its
previous SEND and a RECV have completed, until ``iters`` of each have completed. Then::

    <bytes> bytes in <s> seconds = <Mbit/s> Mbit/sec
    <iters> iters in <s> seconds = <usec> usec/iter

``-c``: as in the C tool, the client writes 0 at the first byte of every page of its buffer
(the rest is 0x7b) before the first SEND; at the end the buffer holds whatever was last received
and must still be that pattern. The C tool checks only the first byte of each page and only on
the server; this one checks every byte on both sides and prints ``invalid data in page N`` for
each page that differs (same message as the C tool).

pyroce's device gets its IPv4 address from ``PYROCE_ADDR``. Errors: one line on stderr, exit
status 1.
"""

from __future__ import annotations

import argparse
import mmap
import random
import socket
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

try:
    import pyroce  # noqa: F401  (from an installed pyroce, or else from this checkout)
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import pyroce.verbs.enums as e
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context, get_device_list
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

PINGPONG_RECV_WRID = 1
PINGPONG_SEND_WRID = 2
MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1  # sizeof msg in the C tool: 52
DONE = b"done\0"
FILL = 0x7B  # memset(ctx->buf, 0x7b, size)
MTU_ENUM = {256: e.ibv_mtu.IBV_MTU_256, 512: e.ibv_mtu.IBV_MTU_512, 1024: e.ibv_mtu.IBV_MTU_1024,
            2048: e.ibv_mtu.IBV_MTU_2048, 4096: e.ibv_mtu.IBV_MTU_4096}  # fmt: skip
QPS = e.ibv_qp_state
MASK = e.ibv_qp_attr_mask


class PingpongError(Exception):
    """A failure reported as one line on stderr, exit status 1."""


@dataclass
class Dest:
    """``struct pingpong_dest``."""

    lid: int
    qpn: int
    psn: int
    gid: bytes  # 16 raw bytes

    def wire(self) -> bytes:
        """``sprintf(msg, "%04x:%06x:%06x:%s", ...)`` with ``gid_to_wire_gid``, plus the NUL."""
        msg = b"%04x:%06x:%06x:%s\0" % (self.lid, self.qpn, self.psn, self.gid.hex().encode())
        if len(msg) != MSG_LEN:
            raise PingpongError(f"local address does not fit the {MSG_LEN}-byte message")
        return msg

    @classmethod
    def parse(cls, msg: bytes) -> Dest:
        """``sscanf(msg, "%x:%x:%x:%s", ...)`` and ``wire_gid_to_gid``."""
        text = msg.split(b"\0", 1)[0].decode("ascii", "replace")
        parts = text.split(":", 3)
        try:
            lid, qpn, psn = (int(p, 16) for p in parts[:3])
            gid = bytes.fromhex(parts[3][:32].ljust(32, "0"))
        except (ValueError, IndexError):
            raise PingpongError(f"bad remote address {text!r}") from None
        return cls(lid, qpn, psn, gid)

    def __str__(self) -> str:
        return (f"LID 0x{self.lid:04x}, QPN 0x{self.qpn:06x}, PSN 0x{self.psn:06x}, "
                f"GID {socket.inet_ntop(socket.AF_INET6, self.gid)}")  # fmt: skip


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def number(text: str) -> int:  # strtol(optarg, NULL, 0)
        try:
            return int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None

    ap = ArgumentParser(prog="rc_pingpong.py", description="RC SEND ping-pong (ibv_rc_pingpong on pyroce)")
    ap.add_argument("servername", nargs="?", help="connect to the server at this host (default: be the server)")
    ap.add_argument("-p", "--port", type=number, default=18515, help="listen on/connect to port (default 18515)")
    ap.add_argument("-d", "--ib-dev", default=None, help="use IB device (default first device found)")
    ap.add_argument("-i", "--ib-port", type=number, default=1, help="use port of IB device (default 1)")
    ap.add_argument("-s", "--size", type=number, default=4096, help="size of message to exchange (default 4096)")
    ap.add_argument("-m", "--mtu", type=number, default=1024, help="path MTU (default 1024)")
    ap.add_argument("-r", "--rx-depth", type=number, default=500,
                    help="number of receives to post at a time (default 500)")  # fmt: skip
    ap.add_argument("-n", "--iters", type=number, default=1000, help="number of exchanges (default 1000)")
    ap.add_argument("-l", "--sl", type=number, default=0, help="service level value")
    ap.add_argument("-g", "--gid-idx", type=number, default=0, help="local port gid index (default 0)")
    ap.add_argument("-c", "--chk", action="store_true", help="validate received buffer")
    ap.add_argument("--stats", action="store_true",
                    help="pyroce: print the device's packet counters on stderr at the end")  # fmt: skip
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        ap.error(f"port {args.port} is outside 0..65535")
    if args.ib_port < 1:
        ap.error(f"ib port {args.ib_port} must be 1 or more")
    if args.mtu not in MTU_ENUM:
        ap.error(f"mtu {args.mtu} is not one of 256, 512, 1024, 2048, 4096")
    if args.size < 0 or args.rx_depth < 1 or args.iters < 0:
        ap.error("size and iters must not be negative, rx-depth must be at least 1")
    return args


class Pingpong:
    """``struct pingpong_context`` with ``pp_init_ctx``, ``pp_post_recv``, ``pp_post_send``,
    ``pp_connect_ctx`` and ``parse_single_wc``."""

    def __init__(self, dev_name: str, size: int, rx_depth: int, ib_port: int) -> None:
        self.size = size
        self.rx_depth = rx_depth
        self.send_flags: int = e.ibv_send_flags.IBV_SEND_SIGNALED
        self.pending = 0
        self.rcnt = self.scnt = self.routs = 0  # RECVs and SENDs completed, receives outstanding
        self.ctx = Context(name=dev_name)
        try:
            self.pd = PD(self.ctx)
            self.mr = MR(self.pd, size, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
            self.mr.write(bytes([FILL]) * size, size)
            self.cq = CQ(self.ctx, rx_depth + 1)
            cap = QPCap(max_send_wr=1, max_recv_wr=rx_depth, max_send_sge=1, max_recv_sge=1)
            self.qp = QP(self.pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
            _, init_attr = self.qp.query(MASK.IBV_QP_CAP)
            if init_attr.cap.max_inline_data >= size:
                self.send_flags |= e.ibv_send_flags.IBV_SEND_INLINE
            attr = QPAttr(qp_state=QPS.IBV_QPS_INIT, port_num=ib_port)
            attr.pkey_index = 0
            attr.qp_access_flags = 0
            try:
                self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_PKEY_INDEX | MASK.IBV_QP_PORT
                               | MASK.IBV_QP_ACCESS_FLAGS)  # fmt: skip
            except PyverbsError as exc:
                raise PingpongError(f"Failed to modify QP to INIT: {exc}") from None
        except BaseException:
            self.ctx.close()
            raise
        self.sge = SGE(self.mr.buf, size, self.mr.lkey)

    def close(self) -> None:
        self.ctx.close()

    def post_recv(self, n: int) -> int:
        """Post ``n`` receives one by one; the number posted."""
        for i in range(n):
            try:
                self.qp.post_recv(RecvWR(wr_id=PINGPONG_RECV_WRID, num_sge=1, sg=[self.sge]))
            except PyverbsError:
                return i
        return n

    def post_send(self) -> None:
        wr = SendWR(wr_id=PINGPONG_SEND_WRID, opcode=e.ibv_wr_opcode.IBV_WR_SEND, num_sge=1, sg=[self.sge],
                    send_flags=self.send_flags)  # fmt: skip
        try:
            self.qp.post_send(wr)
        except PyverbsError as exc:
            raise PingpongError(f"Couldn't post send: {exc}") from None

    def connect(self, port: int, my_psn: int, mtu: int, sl: int, dest: Dest, sgid_idx: int) -> None:
        attr = QPAttr(qp_state=QPS.IBV_QPS_RTR, path_mtu=mtu)
        attr.dest_qp_num = dest.qpn
        attr.rq_psn = dest.psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=0)
        if any(dest.gid[8:]):  # dest->gid.global.interface_id
            attr.ah_attr = AHAttr(dlid=dest.lid, sl=sl, src_path_bits=0, port_num=port, is_global=1,
                                  gr=GlobalRoute(dgid=GID(dest.gid), hop_limit=1, sgid_index=sgid_idx))  # fmt: skip
        try:
            self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_AV | MASK.IBV_QP_PATH_MTU | MASK.IBV_QP_DEST_QPN
                           | MASK.IBV_QP_RQ_PSN | MASK.IBV_QP_MAX_DEST_RD_ATOMIC | MASK.IBV_QP_MIN_RNR_TIMER)  # fmt: skip
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTR: {exc}") from None
        attr.qp_state = QPS.IBV_QPS_RTS
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.sq_psn = my_psn
        attr.max_rd_atomic = 1
        try:
            self.qp.modify(attr, MASK.IBV_QP_STATE | MASK.IBV_QP_TIMEOUT | MASK.IBV_QP_RETRY_CNT
                           | MASK.IBV_QP_RNR_RETRY | MASK.IBV_QP_SQ_PSN | MASK.IBV_QP_MAX_QP_RD_ATOMIC)  # fmt: skip
        except PyverbsError as exc:
            raise PingpongError(f"Failed to modify QP to RTS: {exc}") from None

    def run(self, iters: int) -> None:
        """The completion loop of ``main``: until ``iters`` SENDs and RECVs have completed."""
        self.rcnt = self.scnt = 0
        while self.rcnt < iters or self.scnt < iters:
            n, wcs = self.cq.poll(2)  # busy polling as the C tool does; the poll runs the engine
            for wc in wcs[:n]:
                self.parse_wc(wc, iters)

    def parse_wc(self, wc: WC, iters: int) -> None:
        """``parse_single_wc``."""
        if wc.status != e.ibv_wc_status.IBV_WC_SUCCESS:
            raise PingpongError(f"Failed status {e.ibv_wc_status_str(wc.status)} ({wc.status}) for wr_id {wc.wr_id}")
        if wc.wr_id == PINGPONG_SEND_WRID:
            self.scnt += 1
        elif wc.wr_id == PINGPONG_RECV_WRID:
            self.routs -= 1
            if self.routs <= 1:
                self.routs += self.post_recv(self.rx_depth - self.routs)
                if self.routs < self.rx_depth:
                    raise PingpongError(f"Couldn't post receive ({self.routs})")
            self.rcnt += 1
        else:
            raise PingpongError(f"Completion for unknown wr_id {wc.wr_id}")
        self.pending &= ~wc.wr_id
        if self.scnt < iters and not self.pending:
            self.post_send()
            self.pending = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID

    def mark_pages(self) -> None:
        """``-c`` on the client: ``ctx->buf[i] = i / page_size % sizeof(char)``, i.e. 0 per page."""
        for offset in range(0, self.size, mmap.PAGESIZE):
            self.mr.write(b"\0", 1, offset)

    def bad_pages(self) -> list[int]:
        """``-c`` at the end: pages whose bytes are not the client's pattern (0, then 0x7b)."""
        data = self.mr.read(self.size, 0)
        page = mmap.PAGESIZE
        expected = b"\0" + bytes([FILL]) * (page - 1)
        bad = []
        for offset in range(0, self.size, page):
            got = data[offset : offset + page]
            if got != expected[: len(got)]:
                bad.append(offset // page)
        return bad


def read_exact(sock: socket.socket, count: int) -> bytes:
    """Up to ``count`` bytes: fewer only at end of stream."""
    buf = b""
    while len(buf) < count:
        chunk = sock.recv(count - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def client_exch_dest(servername: str, port: int, my_dest: Dest) -> Dest:
    """``pp_client_exch_dest``: connect, write ours, read theirs, write ``done``."""
    try:
        infos = socket.getaddrinfo(servername, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PingpongError(f"{exc.strerror} for {servername}:{port}") from None
    sock = None
    for family, socktype, proto, _, addr in infos:
        try:
            sock = socket.socket(family, socktype, proto)
            sock.connect(addr)
            break
        except OSError:
            if sock is not None:
                sock.close()
            sock = None
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
    listener = None
    for family, socktype, proto, _, addr in socket.getaddrinfo(None, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                                                               0, socket.AI_PASSIVE):  # fmt: skip
        try:
            listener = socket.socket(family, socktype, proto)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(addr)
            break
        except OSError:
            if listener is not None:
                listener.close()
            listener = None
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


def ratio(num: float, den: float) -> float:
    """``num / den`` with C's IEEE result for a zero divisor."""
    if den:
        return num / den
    return float("nan") if not num else float("inf") if num > 0 else float("-inf")


def pingpong(args: argparse.Namespace) -> None:
    names = [d.name.decode() for d in get_device_list()]
    if not names:
        raise PingpongError("No IB devices found")
    dev_name = args.ib_dev if args.ib_dev is not None else names[0]
    if dev_name not in names:
        raise PingpongError(f"IB device {dev_name} not found")
    pp = Pingpong(dev_name, args.size, args.rx_depth, args.ib_port)
    try:
        pp.routs = pp.post_recv(pp.rx_depth)
        if pp.routs < pp.rx_depth:
            raise PingpongError(f"Couldn't post receive ({pp.routs})")
        try:
            port_attr = pp.ctx.query_port(args.ib_port)
        except PyverbsError as exc:
            raise PingpongError(f"Couldn't get port info: {exc}") from None
        if port_attr.link_layer != e.ibv_link_layer.IBV_LINK_LAYER_ETHERNET and not port_attr.lid:
            raise PingpongError("Couldn't get local LID")
        gid = bytes(16)
        if args.gid_idx >= 0:
            try:
                gid = pp.ctx.query_gid(args.ib_port, args.gid_idx).raw
            except PyverbsError:
                raise PingpongError(f"can't read sgid of index {args.gid_idx}") from None
        my_dest = Dest(port_attr.lid, pp.qp.qp_num, random.getrandbits(24), gid)
        print(f"  local address:  {my_dest}", flush=True)
        mtu = MTU_ENUM[args.mtu]
        if args.servername:
            rem_dest = client_exch_dest(args.servername, args.port, my_dest)
        else:
            rem_dest = server_exch_dest(pp, args.ib_port, mtu, args.port, args.sl, my_dest, args.gid_idx)
        print(f"  remote address: {rem_dest}", flush=True)
        if args.servername:
            pp.connect(args.ib_port, my_dest.psn, mtu, args.sl, rem_dest, args.gid_idx)
        pp.pending = PINGPONG_RECV_WRID
        if args.servername:
            if args.chk:
                pp.mark_pages()
            pp.post_send()
            pp.pending |= PINGPONG_SEND_WRID
        start = time.time()
        pp.run(args.iters)
        usec = (time.time() - start) * 1e6
        nbytes = args.size * args.iters * 2
        print(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = {ratio(nbytes * 8.0, usec):.2f} Mbit/sec")
        print(f"{args.iters} iters in {usec / 1e6:.2f} seconds = {ratio(usec, args.iters):.2f} usec/iter", flush=True)
        if args.chk:
            for page in pp.bad_pages():
                print(f"invalid data in page {page}", flush=True)
        if args.stats:
            counters = pp.ctx.device.stats()
            names = ("sent_pkts", "rcvd_pkts", "icrc_errors", "retransmitted_pkts", "drop_wrong_source")
            print(f"{dev_name} counters: " + ", ".join(f"{name} {counters.get(name, 0)}" for name in names),
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        pp.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        pingpong(args)
    except (PingpongError, PyverbsError) as exc:
        print(" ".join(str(exc).split()), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
