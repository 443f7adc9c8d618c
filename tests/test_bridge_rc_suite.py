"""tests/test_rc_datapath.py through the simulator bridge: the same tests, each endpoint's NIC a
model served over a socketpair (tests/bridge_pair.py), so every ring, record and MR crosses as
DMA messages and every packet as an Ethernet frame the driver side carries between the models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.test_rc_datapath as suite
from tests.bridge_pair import Models
from tests.rc_pair import Endpoint
from tests.test_rc_datapath import *  # the suite's tests, collected here with this module's fixtures

# Tests that count one device's packets with both QPs on it (the suite's loopback pair): their
# endpoints share one model, whose loopback carries the packets.
ONE_DEVICE = {"test_counters_per_qp_and_per_device", "test_every_path_mtu_segments_and_reassembles"}


@pytest.fixture(scope="module")
def models() -> Iterator[Models]:
    models = Models()
    yield models
    models.close()


@pytest.fixture(scope="module")
def two_models(models: Models) -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = models.pair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def pair(request: pytest.FixtureRequest, two_models: tuple[Endpoint, Endpoint]) -> Iterator[tuple[Endpoint, Endpoint]]:
    """The module's pair on two models; a pair on one model for the ``ONE_DEVICE`` tests."""
    if request.node.originalname not in ONE_DEVICE:
        yield two_models
        return
    models = Models()
    a, b = models.pair(one_model=True)
    yield a, b
    a.close()
    b.close()
    models.close()


@pytest.fixture(autouse=True)
def bridged_pairs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The suite's own ``connected_pair`` calls make their endpoints on models too."""
    models = Models()
    one_model = request.node.originalname in ONE_DEVICE
    monkeypatch.setattr(suite, "connected_pair", lambda **connect: models.pair(one_model, **connect))
    yield
    models.close()
