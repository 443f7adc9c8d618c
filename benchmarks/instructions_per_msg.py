"""Machine instructions per 2-byte SEND on the fast path, counted, not timed.

The round of ``calls_per_msg.py`` (two NICs on an in-memory wire in host mode, a receive posted,
a signaled 2-byte SEND, each NIC stepped, both completions polled), run under valgrind's
callgrind, which counts every instruction the process executes: a run of ``--rounds`` rounds
minus a run of ``--base`` rounds, over the difference, is one message's instructions, both
sides, verbs, engines and completions, without the start-up both runs share. The count is the
same on a busy machine as on a quiet one (timings here move by a quarter between runs), so one
run shows what a change to the per-message path saves; for the compiled build as installed and
for the pure one (``PYROCE_PURE=1``). Needs valgrind (``apt-get install valgrind``); about a
minute.

    python3 benchmarks/instructions_per_msg.py [--rounds N] [--base N] [--json FILE]
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

import pyroce

BUILDS = {"compiled": {}, "pure": {"PYROCE_PURE": "1"}}


class Uncounted:
    """``one_round``'s counter that counts nothing (no profile hook in the measured process)."""

    def counting(self, hop: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def rounds_then_exit(rounds: int) -> None:
    """The measured process: ``rounds`` rounds of ``calls_per_msg.one_round``."""
    from calls_per_msg import WARMUP_ROUNDS, Side, one_round

    from pyroce.link.memory import MemoryWire

    wire = MemoryWire()
    requester, responder = Side(wire, "10.9.1.1"), Side(wire, "10.9.1.2")
    requester.connect(responder)
    responder.connect(requester)
    for index in range(WARMUP_ROUNDS + rounds):
        one_round(requester, responder, index * 1e-6, Uncounted())  # type: ignore[arg-type]
    requester.close()
    responder.close()


def instructions(rounds: int, env: dict[str, str]) -> int:
    """What callgrind counted for a whole process running ``rounds`` rounds."""
    with tempfile.TemporaryDirectory() as folder:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/out", sys.executable, __file__,
                   "--child", str(rounds)]  # fmt: skip
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
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        rounds_then_exit(args.child)
        return 0
    if shutil.which("valgrind") is None:
        print("instructions_per_msg: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 1
    path = os.pathsep.join(filter(None, (str(Path(pyroce.__file__).parent.parent), os.environ.get("PYTHONPATH"))))
    builds = BUILDS if pyroce.COMPILED else {"pure": BUILDS["pure"]}
    figures = {}
    for build, env in builds.items():
        env = {**env, "PYTHONPATH": path}
        figures[build] = (instructions(args.rounds, env) - instructions(args.base, env)) / (args.rounds - args.base)
    print(f"{'build':<10}{'instructions per 2-byte SEND (both sides)':>44}")
    for build, count in figures.items():
        print(f"{build:<10}{count:>44,.0f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"instructions_per_msg": figures, "rounds": args.rounds, "base": args.base}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
