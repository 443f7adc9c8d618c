"""``pyroce rc_pingpong``: rdma-core's ``ibv_rc_pingpong`` on pyroce, RC SEND ping-pong over
RoCEv2, with the C tool's options, TCP exchange and output lines, so either side can be the
real tool on rxe or a NIC (``tools/rxe_interop.sh``). The verbs side is
``pyroce.apps.pingpong``, the exchange ``pyroce.cli.rc_pingpong_exchange``."""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any, TextIO

from pyroce.apps.pingpong import MTU_ENUM, PINGPONG_RECV_WRID, PINGPONG_SEND_WRID, Dest, Pingpong, PingpongError
from pyroce.cli.args import port
from pyroce.cli.errors import CliError
from pyroce.cli.rc_pingpong_exchange import client_exch_dest, server_exch_dest
from pyroce.verbs.device import get_device_list
from pyroce.verbs.pyverbs_error import PyverbsError

DESCRIPTION = """RC SEND ping-pong (ibv_rc_pingpong): without SERVERNAME, wait for a client on
TCP PORT; with it, connect to the server there. Either side may be rdma-core's ibv_rc_pingpong
on another RoCEv2 device. pyroce0's GID is index 0 (its only one: ::ffff:<its IPv4 address>,
or its IPv6 address, RoCE v2); give the real tool its own index of its RoCE v2 GID of the same
family (rxe: -g 1 or 3 for IPv4)."""
COUNTERS = ("sent_pkts", "rcvd_pkts", "icrc_errors", "retransmitted_pkts", "drop_wrong_source")


def number(text: str) -> int:
    """``strtol(optarg, NULL, 0)``: decimal, 0x hex or 0 octal."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def at_least(low: int) -> Any:
    def check(text: str) -> int:
        value = number(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        return value

    return check


def mtu(text: str) -> int:
    value = number(text)
    if value not in MTU_ENUM:
        raise argparse.ArgumentTypeError(f"mtu {value} is not one of 256, 512, 1024, 2048, 4096")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("rc_pingpong", help="RC SEND ping-pong (ibv_rc_pingpong)", description=DESCRIPTION)
    parser.add_argument("servername", nargs="?", help="connect to the server at this host (default: be the server)")
    parser.add_argument("-p", "--port", type=port, default=18515, help="listen on/connect to port (default 18515)")
    parser.add_argument("-d", "--ib-dev", default=None, help="use IB device (default first device found)")
    parser.add_argument("-i", "--ib-port", type=at_least(1), default=1, help="use port of IB device (default 1)")
    parser.add_argument(
        "-s", "--size", type=at_least(0), default=4096, help="size of message to exchange (default 4096)"
    )
    parser.add_argument("-m", "--mtu", type=mtu, default=1024, help="path MTU (default 1024)")
    parser.add_argument("-r", "--rx-depth", type=at_least(1), default=500,
                        help="number of receives to post at a time (default 500)")  # fmt: skip
    parser.add_argument("-n", "--iters", type=at_least(0), default=1000, help="number of exchanges (default 1000)")
    parser.add_argument("-l", "--sl", type=number, default=0, help="service level value")
    parser.add_argument("-g", "--gid-idx", type=number, default=0, help="local port gid index (default 0)")
    parser.add_argument("-c", "--chk", action="store_true", help="validate received buffer")
    parser.add_argument("--stats", action="store_true",
                        help="pyroce: print the device's packet counters on stderr at the end")  # fmt: skip
    parser.set_defaults(run=_run)
    return parser


def ratio(num: float, den: float) -> float:
    """``num / den`` with C's IEEE result for a zero divisor."""
    if den:
        return num / den
    return float("nan") if not num else float("inf") if num > 0 else float("-inf")


def _run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        pingpong(args, out)
    except PingpongError as exc:
        raise CliError(" ".join(str(exc).split())) from None
    return 0


def pingpong(args: argparse.Namespace, out: TextIO) -> None:
    """``main`` of ``rc_pingpong.c``: open, post receives, exchange addresses, connect, run."""
    names = [d.name.decode() for d in get_device_list()]
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
        gid = bytes(16)
        if args.gid_idx >= 0:
            try:
                gid = pp.ctx.query_gid(args.ib_port, args.gid_idx).raw
            except PyverbsError:
                raise PingpongError(f"can't read sgid of index {args.gid_idx}") from None
        my_dest = Dest(port_attr.lid, pp.qp.qp_num, random.getrandbits(24), gid)
        print(f"  local address:  {my_dest}", file=out, flush=True)
        path_mtu = MTU_ENUM[args.mtu]
        if args.servername:
            rem_dest = client_exch_dest(args.servername, args.port, my_dest)
        else:
            rem_dest = server_exch_dest(pp, args.ib_port, path_mtu, args.port, args.sl, my_dest, args.gid_idx)
        print(f"  remote address: {rem_dest}", file=out, flush=True)
        if args.servername:
            pp.connect(args.ib_port, my_dest.psn, path_mtu, args.sl, rem_dest, args.gid_idx)
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
        print(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = {ratio(nbytes * 8.0, usec):.2f} Mbit/sec", file=out)
        print(f"{args.iters} iters in {usec / 1e6:.2f} seconds = {ratio(usec, args.iters):.2f} usec/iter", file=out)
        if args.chk:  # printed, and the exit status stays 0, as in the C tool
            for page in pp.bad_pages():
                print(f"invalid data in page {page}", file=out)
        if args.stats:
            counters = pp.ctx.device.stats()
            listed = ", ".join(f"{name} {counters.get(name, 0)}" for name in COUNTERS)
            print(f"{dev_name} counters: {listed}", file=sys.stderr, flush=True)
    finally:
        pp.close()
