"""Shared fixtures: the rxe golden captures copied from ../shared/data/rxe-captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyroce.wire import read_pcap

DATA = Path(__file__).parent / "data"
CAPTURES = sorted(DATA.glob("*.pcap"))


@pytest.fixture(scope="session")
def capture_records() -> dict[str, tuple[int, list]]:
    """Every capture's link type and records, read once per session."""
    return {path.name: read_pcap(path) for path in CAPTURES}


pytest_plugins = ["pytester"]  # runs pytest sessions inside a test (the pyroce plugin's own tests)
