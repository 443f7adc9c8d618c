"""Python-level function calls per 2-byte SEND on the fast path, counted, not timed.

Two NICs on an in-memory wire in host mode (``link.memory``, ``build_device(progress="host")``),
driven through the verbs API: each round posts a receive and a signaled 2-byte SEND, then steps
the NICs one at a time, so every call falls into exactly one hop:

- ``send``: ``post_send`` until the packet is on the wire (the requester's engine pass);
- ``receive``: ``post_recv``, the packet off the wire to the receive WC polled, with the ACK sent
  (the responder's pass and its poll);
- ``ack``: the ACK off the wire to the send WC polled (the requester's pass and its poll).

Each side builds its work requests once and posts them again every round, as perftest's latency
tests do, so a hop starts at ``post_send`` or ``post_recv``, not at the WR's making.

A call is what ``sys.setprofile`` reports as ``call``: a Python function or method entered (C
functions such as ``struct.pack`` or a socket's ``sendmsg`` are not counted). Host mode runs no
engine thread and no clock, so the figures are the same on every run and every machine: a test
(``tests/test_call_budget.py``) holds them under a budget, and ``benchmarks/run.py`` prints them.
They are pure Python's: ``setprofile`` sees no call of a module compiled with mypyc, so a
process running the compiled build counts in a child that runs every module's .py
(``PYROCE_PURE=1``).

    python3 benchmarks/calls_per_msg.py [--rounds N] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

import pyroce
from pyroce.host.assembly import build_device
from pyroce.link.memory import MemoryWire
from pyroce.nic.device import NicDevice
from pyroce.verbs import enums as e
from pyroce.verbs.addr import AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

HOPS = ("send", "receive", "ack")
MESSAGE_SIZE = 2
WARMUP_ROUNDS = 20  # first calls of a code path (imports, caches) are not the steady state
ROCE_V2_IPV4_GID_INDEX = 3


class Side:
    """One NIC with a context, a PD, an MR, a CQ and an RC QP, and the WRs it posts each round: a
    receive of 64 bytes and a signaled ``MESSAGE_SIZE``-byte SEND from the MR's start."""

    def __init__(self, wire: MemoryWire, address: str, mr_size: int = 4096, access: int = e.IBV_ACCESS_LOCAL_WRITE,
                 mtu: int = e.IBV_MTU_1024) -> None:  # fmt: skip
        self.device: NicDevice = build_device(f"sim-{address}", wire.link(address), progress="host")
        self.context = Context(device=self.device)
        self.pd = PD(self.context)
        self.access, self.mtu = access, mtu
        self.mr = MR(self.pd, mr_size, access)
        self.cq = CQ(self.context, 64)
        cap = QPCap(max_send_wr=16, max_recv_wr=16)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.recv_wr = RecvWR(sg=[SGE(self.mr.buf, 64, self.mr.lkey)])
        self.send_wr = SendWR(opcode=e.IBV_WR_SEND, sg=[SGE(self.mr.buf, MESSAGE_SIZE, self.mr.lkey)])

    def connect(self, peer: Side) -> None:
        attr = QPAttr(port_num=1, path_mtu=self.mtu)
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer.qp.qp_num, 0, 0
        dgid = peer.context.query_gid(1, ROCE_V2_IPV4_GID_INDEX)
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=dgid, sgid_index=ROCE_V2_IPV4_GID_INDEX))
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = 14, 7, 7, 12
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.qp_access_flags = self.access
        self.qp.to_rts(attr)

    def poll_one(self, expected_opcode: int) -> None:
        """The one WC this hop must have produced: a wrong or missing one fails the count."""
        count, wcs = self.cq.poll(1)
        if count != 1 or wcs[0].status != e.IBV_WC_SUCCESS or wcs[0].opcode != expected_opcode:
            raise RuntimeError(f"expected one successful completion of opcode {expected_opcode}: {wcs}")

    def close(self) -> None:
        self.context.close()
        self.device.close()


class CallCounter:
    """Counts the Python calls of the current thread under the hop named last (``counting``);
    this harness's own calls (the ``with`` around each hop, ``poll_one``) are not counted."""

    def __init__(self) -> None:
        self.calls = dict.fromkeys(HOPS, 0)
        self._hop = HOPS[0]

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename != __file__:
            self.calls[self._hop] += 1

    def counting(self, hop: str) -> CallCounter:
        self._hop = hop
        return self

    def __enter__(self) -> None:
        sys.setprofile(self)

    def __exit__(self, *exc_info: object) -> None:
        sys.setprofile(None)


def one_round(requester: Side, responder: Side, now: float, counter: CallCounter) -> None:
    """One SEND and its ACK, each hop counted."""
    with counter.counting("receive"):
        responder.qp.post_recv(responder.recv_wr)
    with counter.counting("send"):
        requester.qp.post_send(requester.send_wr)
        requester.device.step(now)
    with counter.counting("receive"):
        responder.device.step(now)
        responder.poll_one(e.IBV_WC_RECV)
    with counter.counting("ack"):
        requester.device.step(now)
        requester.poll_one(e.IBV_WC_SEND)


def calls_per_msg(rounds: int = 200) -> dict[str, float]:
    """The calls of each hop per message, averaged over ``rounds`` after a warm-up, in pure Python."""
    if pyroce.COMPILED:
        return _in_pure_python(rounds)
    wire = MemoryWire()
    requester, responder = Side(wire, "10.9.1.1"), Side(wire, "10.9.1.2")
    try:
        requester.connect(responder)
        responder.connect(requester)
        for index in range(WARMUP_ROUNDS):
            one_round(requester, responder, index * 1e-6, CallCounter())
        # The collector off while counting: a finalizer it runs (an object another test left
        # in a cycle, its ``__del__``) would count as this path's calls
        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            counter = CallCounter()
            for index in range(rounds):
                one_round(requester, responder, (WARMUP_ROUNDS + index) * 1e-6, counter)
        finally:
            if collecting:
                gc.enable()
    finally:
        requester.close()
        responder.close()
    return {hop: counter.calls[hop] / rounds for hop in HOPS}


def _in_pure_python(rounds: int) -> dict[str, float]:
    """``calls_per_msg`` in a child with ``PYROCE_PURE=1`` and this process's pyroce first on its path."""
    path = os.pathsep.join(filter(None, (str(Path(pyroce.__file__).parent.parent), os.environ.get("PYTHONPATH"))))
    with tempfile.TemporaryDirectory() as folder:
        figures = Path(folder) / "calls.json"
        subprocess.run([sys.executable, __file__, "--rounds", str(rounds), "--json", str(figures)], check=True,
                       env={**os.environ, "PYROCE_PURE": "1", "PYTHONPATH": path}, stdout=subprocess.DEVNULL, timeout=300)  # fmt: skip
        return json.loads(figures.read_text())["calls_per_msg"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures = calls_per_msg(args.rounds)
    print(f"{'hop':<10}{'calls/msg':>10}")
    for hop, calls in figures.items():
        print(f"{hop:<10}{calls:>10.1f}")
    print(f"{'requester':<10}{figures['send'] + figures['ack']:>10.1f}")
    print(f"{'responder':<10}{figures['receive']:>10.1f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"calls_per_msg": figures, "rounds": args.rounds}, out, indent=2)


if __name__ == "__main__":
    main()
