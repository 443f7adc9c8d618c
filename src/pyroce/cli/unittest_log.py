"""Reading what ``python -m unittest -v`` (rdma-core's ``run_tests.py -v``) printed: each test's
id, outcome and why (a skip's reason, a failure's or error's last traceback line), and the
tallies per file, so a run can be compared with another without reading its log."""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field

OUTCOMES = ("pass", "fail", "error", "skip")
# "name (module.Class.name)", optionally a docstring line, then " ... "; setUpClass errors too
_HEADER = re.compile(r"^(?P<name>\S+) \((?P<id>[\w.]+)\)(?:\n[^\n]*?)? \.\.\. ", re.MULTILINE)
_RESULT = re.compile(r"(?:^|(?<= \.\.\. ))(?P<word>ok|FAIL|ERROR|expected failure|unexpected success"
                     r"|skipped (?P<reason>'.*'|\".*\"))$", re.MULTILINE)  # fmt: skip
_WORDS = {"ok": "pass", "expected failure": "pass", "FAIL": "fail", "unexpected success": "fail", "ERROR": "error"}
_DETAIL = re.compile(r"^(?P<kind>ERROR|FAIL): (?P<name>\S+) \((?P<id>[\w.]+)\)\n.*?^-{70}\n(?P<trace>.*?)(?=^={70}$|^-{70}$)",
                     re.MULTILINE | re.DOTALL)  # fmt: skip


@dataclass(frozen=True)
class CaseResult:
    """One test as unittest reported it; ``test_id`` as ``tests.test_pd.PDTest.test_alloc_pd``."""

    test_id: str
    outcome: str  # one of OUTCOMES
    reason: str = ""

    @property
    def file(self) -> str:
        """The test file, ``test_pd``: the id's second part (the first is the package)."""
        parts = self.test_id.split(".")
        return parts[1] if len(parts) > 2 else parts[0]


@dataclass
class FileTally:
    """One file's counts and its reasons (skip reasons and failures' last lines) with counts."""

    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def tests(self) -> int:
        return sum(self.counts.values())


def parse(log: str) -> list[CaseResult]:
    """Every test of a ``-v`` log, in order. A test whose result line never came (the program
    died in it) is an error, "no result: the run ended in this test"."""
    details = {m["id"] if m["name"].startswith("setUp") else _test_id(m): _last_line(m["trace"])
               for m in _DETAIL.finditer(log)}  # fmt: skip
    headers = list(_HEADER.finditer(log))
    found = []
    for header, following in zip(headers, [*headers[1:], None]):
        test_id = header["id"] if header["name"].startswith(("setUp", "tearDown")) else _test_id(header)
        end = following.start() if following else len(log)
        result = _RESULT.search(log, header.end(), end)
        if result is None:
            found.append(CaseResult(test_id, "error", "no result: the run ended in this test"))
        elif result["reason"]:
            found.append(CaseResult(test_id, "skip", ast.literal_eval(result["reason"])))
        else:
            outcome = _WORDS[result["word"]]
            found.append(CaseResult(test_id, outcome, details.get(test_id, "") if outcome != "pass" else ""))
    return found


def tally(outcomes: list[CaseResult]) -> dict[str, FileTally]:
    """Per file, in name order."""
    files: dict[str, FileTally] = {}
    for item in sorted(outcomes, key=lambda item: item.file):
        entry = files.setdefault(item.file, FileTally())
        entry.counts[item.outcome] += 1
        if item.reason:
            entry.reasons[item.reason if item.outcome == "skip" else f"{item.outcome.upper()}: {item.reason}"] += 1
    return files


def _test_id(match: re.Match[str]) -> str:
    # Python 3.11 prints "name (module.Class.name)", 3.10 "name (module.Class)"
    test_id = match["id"]
    return test_id if test_id.endswith("." + match["name"]) else f"{test_id}.{match['name']}"


def _last_line(trace: str) -> str:
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
