"""``pyroce rdma-core-tests``: rdma-core's own test suite (Debian's python3-pyverbs ships it) run
on pyroce0 through the C driver, unmodified, and summed up per file."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

from pyroce.cli.errors import CliError
from pyroce.cli.unittest_log import OUTCOMES, CaseResult, parse, tally
from pyroce.driver.build import BuildError, cache_root, library_dir
from pyroce.driver.environment import driver_environment

SHIPPED = Path("/usr/share/doc/rdma-core/tests")  # where Debian's python3-pyverbs puts the suite
PACKAGE = "python3-pyverbs"
DESCRIPTION = f"""Run rdma-core's test suite on pyroce: {SHIPPED} (from {PACKAGE}, apt-get installed
first if missing) is copied to --work-dir and unzipped, then `run_tests.py --dev pyroce0 -v` runs
under the Python pyverbs is built for (--python) with pyroce's libibverbs.so.1, as `pyroce run`
would. Prints a table: per test file, its tests passed, failed, errors, skipped, and why (skip
reasons, failures' last lines), with totals; --json FILE writes it and every test's outcome.
Exit 0 when nothing failed or errored, 1 otherwise; the run's log stays in the work dir."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("rdma-core-tests", help="run rdma-core's pyverbs test suite on pyroce",
                                   description=DESCRIPTION)  # fmt: skip
    parser.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                        help="only tests matching PATTERN (unittest's -k, repeatable), e.g. tests.test_pd.")  # fmt: skip
    parser.add_argument("--python", default="/usr/bin/python3", help="the Python pyverbs is installed for")
    parser.add_argument("--work-dir", type=Path, help="where the suite is copied (default: pyroce's cache)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the table and every test's outcome")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole run (default 1800)")
    parser.add_argument("--no-install", action="store_true", help=f"never apt-get install {PACKAGE}")
    parser.set_defaults(run=_run)
    return parser


def ensure_suite(python: str, install: bool) -> None:
    """pyverbs importable by ``python`` and the suite on disk: ``apt-get install`` it if not."""
    if _has_pyverbs(python) and (SHIPPED / "run_tests.py").is_file():
        return
    if not install or shutil.which("apt-get") is None:
        raise CliError(f"rdma-core's tests need {PACKAGE} (apt-get install {PACKAGE})")
    install_step = ["apt-get", "install", "-y", "--no-upgrade", PACKAGE]  # what is installed stays as it is
    print(f"pyroce rdma-core-tests: {PACKAGE} is missing: running `{' '.join(install_step)}` (and `apt-get update` "
          f"if that fails; --no-install never does)", file=sys.stderr, flush=True)  # fmt: skip
    for step in (install_step, ["apt-get", "update"], install_step):
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode == 0 and step[1] == "install":
            break
    if not (_has_pyverbs(python) and (SHIPPED / "run_tests.py").is_file()):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CliError(f"cannot install {PACKAGE} for {python}: {last}")


def copy_suite(work_dir: Path) -> Path:
    """A fresh copy of the shipped suite with its gzipped files unzipped; returns its folder."""
    suite = work_dir / "tests"
    shutil.rmtree(suite, ignore_errors=True)
    shutil.copytree(SHIPPED, suite)
    for packed in suite.glob("*.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    return suite


def run_suite(python: str, suite: Path, patterns: list[str], timeout: float) -> tuple[str, int]:
    """``run_tests.py --dev pyroce0 -v`` on the C driver: its output and exit status."""
    try:
        env = driver_environment(library_dir(), os.environ)
    except BuildError as exc:
        raise CliError(str(exc)) from None
    env.pop("PYTHONPATH", None)  # this interpreter's, not the suite's: PYROCE_PYTHONPATH finds pyroce
    command = [python, "run_tests.py", "--dev", "pyroce0", "-v", *(arg for p in patterns for arg in ("-k", p))]
    try:
        done = subprocess.run(command, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return output + f"\n(pyroce: the run took more than {timeout:g} s and was stopped)\n", -9
    return done.stdout, done.returncode


def table_lines(outcomes: list[CaseResult]) -> list[str]:
    """The per-file table, Markdown, with a totals row."""
    files = tally(outcomes)
    lines = ["| file | tests | pass | fail | error | skip | skip reasons (count) / failures |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for name, entry in files.items():
        reasons = "; ".join(f"{reason[:90]} ({count})" for reason, count in entry.reasons.most_common())
        counts = " | ".join(str(entry.counts[outcome]) for outcome in OUTCOMES)
        lines.append(f"| {name} | {entry.tests} | {counts} | {reasons} |")
    totals = " | ".join(f"**{sum(entry.counts[outcome] for entry in files.values())}**" for outcome in OUTCOMES)
    lines.append(f"| **total** | **{len(outcomes)}** | {totals} | |")
    return lines


def report(outcomes: list[CaseResult], returncode: int, log: Path) -> dict[str, Any]:
    """The JSON document: totals, per file, every test."""
    files = tally(outcomes)
    return {
        "device": "pyroce0",
        "returncode": returncode,
        "log": str(log),
        "totals": {"tests": len(outcomes), **{o: sum(f.counts[o] for f in files.values()) for o in OUTCOMES}},
        "files": {
            name: {"tests": entry.tests, **{o: entry.counts[o] for o in OUTCOMES}, "reasons": dict(entry.reasons)}
            for name, entry in files.items()
        },
        "tests": [{"id": item.test_id, "outcome": item.outcome, "reason": item.reason} for item in outcomes],
    }


def _run(args: argparse.Namespace, out: TextIO) -> int:
    ensure_suite(args.python, install=not args.no_install)
    work_dir = args.work_dir or cache_root() / "rdma-core-tests"
    suite = copy_suite(work_dir)
    output, returncode = run_suite(args.python, suite, args.patterns, args.timeout)
    log = work_dir / "run.log"
    log.write_text(output)
    outcomes = parse(output)
    if not outcomes:
        tail = " / ".join(output.strip().splitlines()[-2:]) or "no output"
        raise CliError(f"the suite ran no test (exit {returncode}, log {log}): {tail}")
    print("\n".join(table_lines(outcomes)), file=out)
    print(f"log: {log}", file=out)
    if args.json:
        args.json.write_text(json.dumps(report(outcomes, returncode, log), indent=1) + "\n")
    failed = any(item.outcome in ("fail", "error") for item in outcomes)
    return 1 if failed or returncode not in (0, 1) else 0


def _has_pyverbs(python: str) -> bool:
    if shutil.which(python) is None:
        return False
    done = subprocess.run([python, "-c", "import pyverbs"], capture_output=True, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    return done.returncode == 0
