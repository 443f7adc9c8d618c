"""pyroce's pytest plugin, seen from a user's test suite (run inside ``pytester``): its
fixtures give working RC endpoints, its marker a misbehaving network, and a failing test's
report shows the failed completions with their reasons, the counters and the last packets."""

from __future__ import annotations

import pytest

USER_TESTS = """
import pytest
from pyroce.verbs.wr import SGE, SendWR, RecvWR
from pyroce.verbs.enums import ibv_wr_opcode

def write(a, b, rkey, length=3000):
    wr = SendWR(wr_id=7, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(rkey, b.mr.buf)
    a.qp.post_send(wr)
    return a.poll(1)[0]

def test_pair_moves_data(rc_pair):
    a, b = rc_pair
    a.mr.write(b"plugin!", 7)
    assert write(a, b, b.mr.rkey).status == 0 and b.mr.read(7, 0) == b"plugin!"

def test_remote_peer_gets_a_send(rc_remote):
    local, peer = rc_remote
    local.mr.write(b"to the other process", 20)
    local.qp.post_send(SendWR(wr_id=1, sg=[SGE(local.mr.buf, 20, local.mr.lkey)]))
    assert local.poll(1)[0].status == 0
    for _ in range(200):
        got = peer.received()
        if got:
            break
    assert got == [b"to the other process"]

@pytest.mark.rdma_faults(script=["drop:1:RC_RDMA_WRITE_MIDDLE"])
def test_scripted_fault(rc_pair):
    a, b = rc_pair
    assert write(a, b, b.mr.rkey).status == 0
    stats = a.ctx.device.stats()
    assert stats["injected_drop"] == 1 and stats["retransmitted_pkts"] >= 1

def test_fails_on_purpose(rc_pair):
    a, b = rc_pair
    wc = write(a, b, b.mr.rkey ^ 0x100)
    assert wc.status == 0
"""


def test_fixtures_marker_and_failure_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    report = result.stdout.str()
    assert "pyroce" in report and "test_fails_on_purpose" in report
    result.stdout.fnmatch_lines([
        "*failed: WC(wr_id=7, status=REM_ACCESS_ERR*reason=?qp 0x* remote access error: rkey*",
        "*pyroce0 at 127.*: *",
        "*last * packets:*",
        "*RC_RDMA_WRITE_FIRST qpn=0x* psn=0x* pay=1024*",
        "*RC_ACKNOWLEDGE*aeth=0x62*",  # the NAK: remote access error
    ])  # fmt: skip
