"""Shared fixtures: the rxe golden captures copied from ../shared/data/rxe-captures, the
progress modes a device opened in a test runs in, and a connected RC pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyroce.wire import read_pcap
from tests.rc_pair import Endpoint, connected_pair

DATA = Path(__file__).parent / "data"
CAPTURES = sorted(DATA.glob("*.pcap"))


@pytest.fixture(scope="session")
def capture_records() -> dict[str, tuple[int, list]]:
    """Every capture's link type and records, read once per session."""
    return {path.name: read_pcap(path) for path in CAPTURES}


@pytest.fixture(params=["inline", "thread"])
def progress_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """pyroce0 opened from here on runs in this progress mode (a device already open keeps its own)."""
    monkeypatch.setenv("PYROCE_PROGRESS", request.param)
    return str(request.param)


pytest_plugins = ["pytester"]  # runs pytest sessions inside a test (the pyroce plugin's own tests)


@pytest.fixture
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    """Two connected RC endpoints, closed after the test."""
    a, b = connected_pair()
    yield a, b
    a.close()
    b.close()
