"""``pyroce rc_pingpong``, ``uc_pingpong``, ``srq_pingpong`` and ``ud_pingpong``: rdma-core's
``ibv_rc_pingpong``, ``ibv_uc_pingpong``, ``ibv_srq_pingpong`` and ``ibv_ud_pingpong`` on pyroce, SEND ping-pong over
RoCEv2 with the C tools' options, TCP exchange and output lines, so either side can be the real
tool on rxe or a NIC (``tools/rxe_interop.sh``). Each tool is a ``PingpongTool``: what it builds
(``pyroce.apps.pingpong``, the verbs side) and how its options and exchange differ
(``pyroce.cli.pingpong_exchange``)."""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from pyroce.apps.pingpong import FILL, MTU_ENUM, QPT, Dest, Pingpong, PingpongError, UdPingpong
from pyroce.cli.args import port
from pyroce.cli.errors import CliError
from pyroce.cli.pingpong_exchange import client_exch_dest, server_exch_dest
from pyroce.host.stats_file import summary_line
from pyroce.ib.addressing import ROCE_V2_INDEX
from pyroce.verbs.device import get_device_list
from pyroce.verbs.pyverbs_error import PyverbsError

GID_NOTE = """pyroce0's GID table is Linux's for a RoCE port: 0 and 1 link-local (RoCE v1, v2),
2 and 3 its address (::ffff:<its IPv4 address> or its IPv6 address; RoCE v1, v2). Index 3 is
RoCE v2 over the address, the default here; give the real tool its own index of its RoCE v2 GID
of the same family (mlx5: -g 3, rxe: -g 1 for IPv4)."""
MAX_QP = 256  # srq_pingpong.c: the exchange always carries this many addresses


def number(text: str) -> int:
    """``strtol(optarg, NULL, 0)``: decimal, 0x hex or 0 octal."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def between(low: int, high: int | None = None) -> Any:
    """A number from ``low`` (to ``high``)."""

    def check(text: str) -> int:
        value = number(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is more than {high}")
        return value

    return check


def mtu(text: str) -> int:
    value = number(text)
    if value not in MTU_ENUM:
        raise argparse.ArgumentTypeError(f"mtu {value} is not one of 256, 512, 1024, 2048, 4096")
    return value


def ratio(num: float, den: float) -> float:
    """``num / den`` with C's IEEE result for a zero divisor."""
    if den:
        return num / den
    return float("nan") if not num else float("inf") if num > 0 else float("-inf")


@dataclass(frozen=True)
class PingpongTool:
    """One of the C examples: its QP type, whether its QPs (``-q``, default 16) share an SRQ,
    how many addresses its exchange carries each way, its buffer's fill and smallest ``-s``.
    ``datagram``: ud_pingpong.c, whose default size is 1024 (rdma-core 44's code; its help text
    still says 2048), which has no ``-m`` (a UD message
    is at most the port's MTU) and no ``-c``, and whose local address line has ``: GID``."""

    name: str
    summary: str
    qp_type: int
    srq: bool = False
    slots: int = 1
    fill: int = FILL
    min_size: int = 0
    datagram: bool = False

    def add_parser(self, subparsers: Any) -> argparse.ArgumentParser:
        description = (f"{self.summary} (ibv_{self.name}): without SERVERNAME, wait for a client on TCP PORT; "
                       f"with it, connect to the server there. Either side may be rdma-core's ibv_{self.name} "
                       f"on another RoCEv2 device. {GID_NOTE}")  # fmt: skip
        parser = subparsers.add_parser(self.name, help=f"{self.summary} (ibv_{self.name})", description=description)
        parser.add_argument("servername", nargs="?", help="connect to the server at this host (default: be the server)")
        parser.add_argument("-p", "--port", type=port, default=18515, help="listen on/connect to port (default 18515)")
        parser.add_argument("-d", "--ib-dev", default=None, help="use IB device (default first device found)")
        parser.add_argument("-i", "--ib-port", type=between(1), default=1, help="use port of IB device (default 1)")
        size = 1024 if self.datagram else 4096
        parser.add_argument("-s", "--size", type=between(self.min_size), default=size,
                            help=f"size of message to exchange (default {size})")  # fmt: skip
        if not self.datagram:
            parser.add_argument("-m", "--mtu", type=mtu, default=1024, help="path MTU (default 1024)")
        if self.srq:
            parser.add_argument("-q", "--num-qp", type=between(1, MAX_QP - 1), default=16,
                                help="number of QPs to use (default 16)")  # fmt: skip
        parser.add_argument("-r", "--rx-depth", type=between(1), default=500,
                            help="number of receives to post at a time (default 500)")  # fmt: skip
        parser.add_argument("-n", "--iters", type=between(0), default=1000,
                            help=f"number of exchanges{', all QPs together' if self.srq else ''} (default 1000)")  # fmt: skip
        parser.add_argument("-l", "--sl", type=number, default=0, help="service level value")
        parser.add_argument("-g", "--gid-idx", type=number, default=ROCE_V2_INDEX,
                            help=f"local port gid index (default {ROCE_V2_INDEX}: RoCE v2 over the address)")  # fmt: skip
        if not self.datagram:
            parser.add_argument("-c", "--chk", action="store_true", help="validate received buffer")
        parser.add_argument("--stats", action="store_true",
                            help="pyroce: print the device's packet counters on stderr at the end")  # fmt: skip
        parser.set_defaults(run=self.run, mtu=1024, chk=False)
        if not self.srq:
            parser.set_defaults(num_qp=1)
        return parser

    def run(self, args: argparse.Namespace, out: TextIO) -> int:
        if args.num_qp > args.rx_depth:
            raise CliError(f"rx_depth {args.rx_depth} is too small for {args.num_qp} QPs -- "
                           "must have at least one receive per QP.")  # fmt: skip
        try:
            self.pingpong(args, out)
        except PingpongError as exc:
            raise CliError(" ".join(str(exc).split())) from None
        return 0

    def pingpong(self, args: argparse.Namespace, out: TextIO) -> None:
        """``main`` of the C tools: open, post receives, exchange addresses, connect, run."""
        names = [d.name.decode() for d in get_device_list()]
        dev_name = args.ib_dev if args.ib_dev is not None else names[0]
        if dev_name not in names:
            raise PingpongError(f"IB device {dev_name} not found")
        pp: Pingpong
        if self.datagram:
            pp = UdPingpong(dev_name, args.size, args.rx_depth, args.ib_port)
        else:
            pp = Pingpong(dev_name, args.size, args.rx_depth, args.ib_port, qp_type=self.qp_type,
                          num_qp=args.num_qp, srq=self.srq, fill=self.fill)  # fmt: skip
        try:
            self.exchange_and_run(pp, dev_name, args, out)
        finally:
            pp.close()

    def exchange_and_run(self, pp: Pingpong, dev_name: str, args: argparse.Namespace, out: TextIO) -> None:
        """Everything after the device opened, so ``pingpong`` closes it on any error."""
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
        my_dests = [Dest(port_attr.lid, qp.qp_num, random.getrandbits(24), gid) for qp in pp.qps]
        for dest in my_dests:
            local = str(dest).replace(", GID ", ": GID ") if self.datagram else str(dest)  # ud_pingpong.c's printf
            print(f"  local address:  {local}", file=out, flush=True)
        path_mtu = MTU_ENUM[args.mtu]

        def connect(rem_dests: list[Dest]) -> None:
            pp.connect(args.ib_port, path_mtu, args.sl, my_dests, rem_dests, args.gid_idx)

        if args.servername:
            rem_dests = client_exch_dest(args.servername, args.port, my_dests, self.slots)
        else:
            rem_dests = server_exch_dest(args.port, my_dests, self.slots, connect)
        for dest in rem_dests:
            print(f"  remote address: {dest}", file=out, flush=True)
        if args.servername:
            connect(rem_dests)
            if args.chk:
                pp.mark_pages()
        pp.start(client=bool(args.servername))
        start = time.time()
        pp.run(args.iters)
        usec = (time.time() - start) * 1e6
        nbytes = args.size * args.iters * 2
        print(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = {ratio(nbytes * 8.0, usec):.2f} Mbit/sec", file=out)
        print(f"{args.iters} iters in {usec / 1e6:.2f} seconds = {ratio(usec, args.iters):.2f} usec/iter", file=out)
        if args.chk:  # printed, and the exit status stays 0, as in the C tools
            for page in pp.bad_pages():
                print(f"invalid data in page {page}", file=out)
        if args.stats:
            print(summary_line(dev_name, pp.ctx.device.stats()), file=sys.stderr, flush=True)


RC_PINGPONG = PingpongTool("rc_pingpong", "RC SEND ping-pong", QPT.IBV_QPT_RC)
UC_PINGPONG = PingpongTool("uc_pingpong", "UC SEND ping-pong", QPT.IBV_QPT_UC)
SRQ_PINGPONG = PingpongTool("srq_pingpong", "RC SEND ping-pong of several QPs sharing one SRQ", QPT.IBV_QPT_RC,
                            srq=True, slots=MAX_QP, fill=0, min_size=1)  # fmt: skip
UD_PINGPONG = PingpongTool("ud_pingpong", "UD SEND ping-pong", QPT.IBV_QPT_UD, datagram=True)
