"""The toy key-value store's own tests, in CI with no mock: pyroce's pytest plugin gives each
test real RC endpoints (``rc_pair`` in this process, ``rc_remote`` across two processes), and
``rdma_faults`` runs one through a lossy, reordering network.

    python3 -m pytest -q examples/kvstore
"""

from __future__ import annotations

import random

import pytest
from kvstore import SLOT_SIZE, SLOTS, VALUE_SIZE, KvClient, KvError, slot_of

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.testing import RemotePeer

STAGING = SLOTS * SLOT_SIZE  # the client's own slot buffer, after where a table would be


def client_of(local: RcEndpoint, table: PeerInfo) -> KvClient:
    return KvClient(local, table, staging_offset=STAGING)


def test_put_get_overwrite_delete(rc_pair: tuple[RcEndpoint, RcEndpoint]) -> None:
    client_ep, server_ep = rc_pair
    kv = client_of(client_ep, server_ep.info())
    assert kv.get("answer") is None
    kv.put("answer", b"42")
    assert kv.get("answer") == b"42"
    kv.put("answer", b"forty-two")
    assert kv.get("answer") == b"forty-two"
    kv.delete("answer")
    assert kv.get("answer") is None


def test_the_table_lives_in_the_other_process(rc_remote: tuple[RcEndpoint, RemotePeer]) -> None:
    """PUT writes into another process's memory over RoCEv2/UDP; its bytes are there."""
    local, peer = rc_remote
    kv = client_of(local, peer.info._replace(addr=peer.info.addr + peer.data_offset))  # past its receives
    kv.put("city", b"Lisbon")
    slot = peer.read(peer.data_offset + slot_of(b"city".ljust(32, b"\0")) * SLOT_SIZE, SLOT_SIZE)
    assert slot.startswith(b"city\0") and b"Lisbon" in slot
    assert kv.get("city") == b"Lisbon"


@pytest.mark.rdma_faults(loss=0.05, reorder=0.05, duplicate=0.01, seed=3)
def test_consistent_through_a_misbehaving_network(rc_pair: tuple[RcEndpoint, RcEndpoint]) -> None:
    client_ep, server_ep = rc_pair
    kv = client_of(client_ep, server_ep.info())
    rng = random.Random(1)
    model: dict[str, bytes] = {}
    for _ in range(150):
        key = f"k{rng.randrange(40)}"
        if rng.random() < 0.6:
            model[key] = rng.randbytes(rng.randrange(1, VALUE_SIZE))
            kv.put(key, model[key])
        else:
            assert kv.get(key) == model.get(key)
    assert client_ep.ctx.device.stats()["retransmitted_pkts"] > 0  # the faults did happen


def test_bad_input_and_refused_access_explain_themselves(rc_pair: tuple[RcEndpoint, RcEndpoint]) -> None:
    client_ep, server_ep = rc_pair
    kv = client_of(client_ep, server_ep.info())
    with pytest.raises(KvError, match="longer than"):
        kv.put("big", bytes(VALUE_SIZE + 1))
    with pytest.raises(KvError, match="must be 1 to 32 bytes"):
        kv.get("")
    wrong_key = client_of(client_ep, server_ep.info()._replace(rkey=server_ep.info().rkey ^ 0x100))
    with pytest.raises(KvError, match="GET failed: .*remote access error"):
        wrong_key.get("answer")
