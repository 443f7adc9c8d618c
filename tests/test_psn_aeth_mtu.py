"""PSN arithmetic, AETH syndromes and MTU sizes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyroce.wire import (
    RNR_TIMER_US,
    AethKind,
    Mtu,
    NakCode,
    ack_syndrome,
    describe_syndrome,
    mtu_for_netdev,
    mtu_from_bytes,
    mtu_to_bytes,
    nak_syndrome,
    psn_add,
    psn_compare,
    psn_diff,
    psn_in_range,
    psn_in_window,
    rnr_nak_syndrome,
    rnr_timer_from_us,
    rnr_timer_to_us,
    syndrome_kind,
    syndrome_value,
)

psns = st.integers(0, 0xFFFFFF)


def test_psn_wraps_at_2_24():
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_add(0xFFFFF0, 0x20) == 0x10
    assert psn_add(0, -1) == 0xFFFFFF
    assert psn_diff(0x10, 0xFFFFF0) == 0x20
    assert psn_diff(0xFFFFF0, 0x10) == -0x20
    assert psn_compare(0x000005, 0xFFFFFE) == 1
    assert psn_compare(0xFFFFFE, 0x000005) == -1
    assert psn_compare(7, 7) == 0
    assert psn_in_window(0x2, 0xFFFFFE, 5) and not psn_in_window(0x3, 0xFFFFFE, 5)
    assert psn_in_range(0x1, 0xFFFFFE, 0x2) and not psn_in_range(0x2, 0xFFFFFE, 0x2)


def test_psn_half_window_boundary():
    """A PSN 2^23 ahead counts as behind (the window is [-2^23, 2^23))."""
    assert psn_diff(1 << 23, 0) == -(1 << 23)
    assert psn_diff((1 << 23) - 1, 0) == (1 << 23) - 1


@given(psns, psns, st.integers(0, (1 << 23) - 1))
def test_psn_in_range_is_the_two_comparisons(psn, first, count):
    """One test for ``first <= psn < first + count`` across the wrap, as the completer's ghost
    check wrote it with two ``psn_diff`` calls."""
    end = psn_add(first, count)
    assert psn_in_range(psn, first, end) == (psn_diff(psn, first) >= 0 and psn_diff(psn, end) < 0)


@given(psns, st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_add_and_diff_are_inverse(psn, n):
    assert psn_diff(psn_add(psn, n), psn) == n
    assert psn_compare(psn_add(psn, n), psn) == (n > 0) - (n < 0)


def test_syndromes_match_rocev2_md():
    assert ack_syndrome() == 0x1F
    assert nak_syndrome(NakCode.PSN_SEQ_ERR) == 0x60
    assert nak_syndrome(NakCode.INVALID_REQUEST) == 0x61
    assert nak_syndrome(NakCode.REMOTE_ACCESS_ERR) == 0x62
    assert nak_syndrome(NakCode.REMOTE_OP_ERR) == 0x63
    assert rnr_nak_syndrome(14) == 0x2E
    assert syndrome_kind(0x2E) is AethKind.RNR_NAK and syndrome_value(0x2E) == 14
    assert describe_syndrome(0x1F) == "ACK credits=31"
    assert describe_syndrome(0x2E) == "RNR_NAK timer=14 (1.28 ms)"
    assert describe_syndrome(0x62) == "NAK REMOTE_ACCESS_ERR"
    assert describe_syndrome(0x7F) == "NAK code 31"
    with pytest.raises(ValueError, match="RNR timer code 32 outside 0..31"):
        rnr_nak_syndrome(32)


def test_rnr_timer_table():
    assert len(RNR_TIMER_US) == 32
    assert rnr_timer_to_us(0) == 655360 and rnr_timer_to_us(1) == 10 and rnr_timer_to_us(31) == 491520
    assert rnr_timer_to_us(12) == 640  # 0.64 ms, rdma-core's usual min_rnr_timer
    assert all(RNR_TIMER_US[c] < RNR_TIMER_US[c + 1] for c in range(1, 31))
    assert rnr_timer_from_us(640) == 12
    assert rnr_timer_from_us(641) == 13
    assert rnr_timer_from_us(1) == 1
    assert rnr_timer_from_us(500_000) == 0  # only the 655.36 ms code is that long
    for code in range(1, 32):
        assert rnr_timer_from_us(rnr_timer_to_us(code)) == code


def test_mtu_enum():
    assert [mtu_to_bytes(m) for m in range(1, 6)] == [256, 512, 1024, 2048, 4096]
    assert mtu_from_bytes(1024) is Mtu.IBV_MTU_1024
    assert mtu_for_netdev(1500) is Mtu.IBV_MTU_1024  # rxe on Ethernet: "Mtu: 1024[B]"
    assert mtu_for_netdev(9000) is Mtu.IBV_MTU_4096
    assert mtu_for_netdev(65536) is Mtu.IBV_MTU_4096  # loopback
    assert mtu_for_netdev(1120) is Mtu.IBV_MTU_1024
    assert mtu_for_netdev(1119) is Mtu.IBV_MTU_512
    with pytest.raises(ValueError):
        mtu_from_bytes(1500)
    with pytest.raises(ValueError):
        mtu_to_bytes(6)
    with pytest.raises(ValueError, match="too small"):
        mtu_for_netdev(300)
