"""Machine instructions per message on the fast path, counted, not timed.

The round of ``calls_per_msg.py`` (two NICs on an in-memory wire in host mode, a receive posted,
a signaled 2-byte SEND, each NIC stepped, both completions polled), run under valgrind's
callgrind, which counts every instruction the process executes: a run of ``--rounds`` rounds
minus a run of ``--base`` rounds, over the difference, is one message's instructions, both
sides, verbs, engines and completions, without the start-up both runs share. The count is the
same on a busy machine as on a quiet one (timings here move by a quarter between runs), so one
run shows what a change to the per-message path saves; for the compiled build as installed and
for the pure one (``PYROCE_PURE=1``). ``--op write`` or ``read`` counts an RDMA WRITE or READ
of ``--size`` bytes instead (PMTU 4096: the requester posts it, the requester's, the
responder's and the requester's engine pass, the completion polled; the bytes checked at the
end). Needs valgrind (``apt-get install valgrind``); about a minute.

    python3 benchmarks/instructions_per_msg.py [--op send|write|read] [--size N] [--rounds N] [--base N] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from calls_per_msg import WARMUP_ROUNDS, Side, one_round

import pyroce
from pyroce.link.memory import MemoryWire
from pyroce.verbs import enums as e
from pyroce.verbs.wr import SGE, SendWR

BUILDS = {"compiled": {}, "pure": {"PYROCE_PURE": "1"}}


class Uncounted:
    """``one_round``'s counter that counts nothing (no profile hook in the measured process)."""

    def counting(self, hop: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


RDMA_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
RDMA_OPS = {"write": (e.IBV_WR_RDMA_WRITE, e.IBV_WC_RDMA_WRITE), "read": (e.IBV_WR_RDMA_READ, e.IBV_WC_RDMA_READ)}


def rdma_round(requester: Side, responder: Side, op: str, size: int, now: float) -> None:
    """One RDMA WRITE or READ of ``size`` bytes between the two sides' MRs, and its completion."""
    opcode, wc_opcode = RDMA_OPS[op]
    wr = SendWR(opcode=opcode, sg=[SGE(requester.mr.buf, size, requester.mr.lkey)])
    wr.set_wr_rdma(responder.mr.rkey, responder.mr.buf)
    requester.qp.post_send(wr)
    requester.device.step(now)
    responder.device.step(now)
    requester.device.step(now)
    requester.poll_one(wc_opcode)


def rounds_then_exit(rounds: int, op: str, size: int) -> None:
    """The measured process: ``rounds`` rounds of ``calls_per_msg.one_round``, or of ``rdma_round``."""
    wire = MemoryWire()
    if op == "send":
        requester, responder = Side(wire, "10.9.1.1"), Side(wire, "10.9.1.2")
    else:
        requester, responder = (Side(wire, address, max(size, 4096), RDMA_ACCESS, e.IBV_MTU_4096)
                                for address in ("10.9.1.1", "10.9.1.2"))  # fmt: skip
        (requester if op == "write" else responder).mr.write(os.urandom(size), size)
    requester.connect(responder)
    responder.connect(requester)
    for index in range(WARMUP_ROUNDS + rounds):
        if op == "send":
            one_round(requester, responder, index * 1e-6, Uncounted())  # type: ignore[arg-type]
        else:
            rdma_round(requester, responder, op, size, index * 1e-6)
    if op != "send" and requester.mr.read(size, 0) != responder.mr.read(size, 0):
        raise SystemExit(f"instructions_per_msg: the {op}'s bytes did not arrive")
    requester.close()
    responder.close()


def instructions(rounds: int, env: dict[str, str], op: str, size: int) -> int:
    """What callgrind counted for a whole process running ``rounds`` rounds."""
    with tempfile.TemporaryDirectory() as folder:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/out", sys.executable, __file__,
                   "--child", str(rounds), "--op", op, "--size", str(size)]  # fmt: skip
        done = subprocess.run(command, check=False, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise SystemExit(f"instructions_per_msg: the counted run failed: {done.stderr.strip()[-500:]}")
        return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600, help="rounds of the longer run")
    parser.add_argument("--base", type=int, default=100, help="rounds of the shorter run")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--op", choices=("send", *RDMA_OPS), default="send", help="the message counted")
    parser.add_argument("--size", type=int, default=2, help="its bytes (write and read; a SEND is 2)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.op == "send" and args.size != 2:
        parser.error("--size is for --op write and read: the SEND round is calls_per_msg.py's 2-byte SEND")
    if args.child is not None:
        rounds_then_exit(args.child, args.op, args.size)
        return 0
    if shutil.which("valgrind") is None:
        print("instructions_per_msg: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 1
    path = os.pathsep.join(filter(None, (str(Path(pyroce.__file__).parent.parent), os.environ.get("PYTHONPATH"))))
    builds = BUILDS if pyroce.COMPILED else {"pure": BUILDS["pure"]}
    figures = {}
    for build, env in builds.items():
        env = {**env, "PYTHONPATH": path}
        counts = [instructions(rounds, env, args.op, args.size) for rounds in (args.rounds, args.base)]
        figures[build] = (counts[0] - counts[1]) / (args.rounds - args.base)
    heading = f"instructions per {args.size}-byte {args.op.upper()} (both sides)"
    print(f"{'build':<10}{heading:>50}")
    for build, count in figures.items():
        print(f"{build:<10}{count:>50,.0f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"instructions_per_msg": figures, "op": args.op, "size": args.size, "rounds": args.rounds,
                       "base": args.base}, out, indent=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
