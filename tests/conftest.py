"""Shared fixtures: the rxe golden captures copied from ../shared/data/rxe-captures, the
progress modes a device opened in a test runs in, and a connected RC pair.

The suite runs on either NIC a Python program can have (``PYROCE_NIC``: its own, the default, or
the host's shared ``pyroce nicd``); a test that reaches into the device model is marked
``embedded_nic`` (the pyroce plugin's marker), so under ``PYROCE_NIC=shared`` it still runs, on
its own NIC, and everything else runs on the shared one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyroce.testing.plugin import use_embedded_nic
from pyroce.wire import read_pcap
from tests.rc_pair import Endpoint, connected_pair

DATA = Path(__file__).parent / "data"
CAPTURES = sorted(DATA.glob("*.pcap"))


@pytest.fixture(scope="session", autouse=True)
def own_shared_nics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The shared NICs that programs of this run start (``pyroce run``) are this run's own: a stats
    folder of its own names them apart from a user's, and they stop 5 s after their last program."""
    saved = {name: os.environ.get(name) for name in ("PYROCE_STATS_DIR", "PYROCE_NICD_IDLE")}
    os.environ["PYROCE_STATS_DIR"] = str(tmp_path_factory.mktemp("stats"))
    os.environ["PYROCE_NICD_IDLE"] = "5"
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def capture_records() -> dict[str, tuple[int, list]]:
    """Every capture's link type and records, read once per session."""
    return {path.name: read_pcap(path) for path in CAPTURES}


@pytest.fixture(params=["inline", "thread"])
def progress_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """pyroce0 opened from here on runs in this progress mode (a device already open keeps its own);
    ``inline`` is the embedded NIC's (the shared NIC's engine thread runs everything), so that
    variant runs there under ``PYROCE_NIC=shared`` too."""
    monkeypatch.setenv("PYROCE_PROGRESS", request.param)
    if request.param == "inline":
        use_embedded_nic(monkeypatch)
    return str(request.param)


pytest_plugins = ["pytester"]  # runs pytest sessions inside a test (the pyroce plugin's own tests)


@pytest.fixture
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    """Two connected RC endpoints, closed after the test."""
    a, b = connected_pair()
    yield a, b
    a.close()
    b.close()
