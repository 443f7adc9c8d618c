"""The QP state machine of ibv_modify_qp, as Linux's ib_modify_qp_is_ok() applies it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyroce.verbs.qp_transitions import (
    VALID_TRANSITIONS,
    TransitionError,
    check_transition,
    mask_names,
    optional_mask,
    required_mask,
)

# Written out here on purpose (not imported): libibverbs' numbers, so the tests pin the module to them.
RESET, INIT, RTR, RTS, SQD, SQE, ERR = range(7)
STATES = range(7)
SMI, GSI, RC, UC, UD, RAW_PACKET, XRC_INI, XRC_TGT = 0, 1, 2, 3, 4, 8, 9, 10
QP_TYPES = (SMI, GSI, RC, UC, UD, 5, 6, RAW_PACKET, XRC_INI, XRC_TGT)

STATE = 1
CUR_STATE = 2
EN_SQD_ASYNC_NOTIFY = 4
ACCESS_FLAGS = 8
PKEY_INDEX = 16
PORT = 32
QKEY = 64
AV = 128
PATH_MTU = 256
TIMEOUT = 512
RETRY_CNT = 1024
RNR_RETRY = 2048
RQ_PSN = 4096
MAX_QP_RD_ATOMIC = 8192
ALT_PATH = 16384
MIN_RNR_TIMER = 32768
SQ_PSN = 65536
MAX_DEST_RD_ATOMIC = 131072
PATH_MIG_STATE = 262144
CAP = 524288
DEST_QPN = 1048576
RATE_LIMIT = 1 << 25

ALL_BITS = (1 << 26) - 1

RC_INIT_TO_RTR = AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
RC_RTR_TO_RTS = SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC


def accepts(qp_type: int, cur: int, nxt: int, mask: int) -> bool:
    try:
        check_transition(qp_type, cur, nxt, mask)
    except TransitionError:
        return False
    return True


# -- the table, spot by spot (values read from the kernel source, independently of the module) --


def test_rc_reset_to_init_requires_pkey_port_access() -> None:
    assert required_mask(RC, RESET, INIT) == PKEY_INDEX | PORT | ACCESS_FLAGS
    assert optional_mask(RC, RESET, INIT) == 0
    check_transition(RC, RESET, INIT, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS)


def test_rc_init_to_rtr_requirements() -> None:
    assert required_mask(RC, INIT, RTR) == RC_INIT_TO_RTR
    assert optional_mask(RC, INIT, RTR) == ALT_PATH | ACCESS_FLAGS | PKEY_INDEX
    check_transition(RC, INIT, RTR, STATE | RC_INIT_TO_RTR)


def test_rc_rtr_to_rts_requirements() -> None:
    assert required_mask(RC, RTR, RTS) == RC_RTR_TO_RTS
    assert optional_mask(RC, RTR, RTS) == CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE
    check_transition(RC, RTR, RTS, STATE | RC_RTR_TO_RTS)


def test_ud_rows() -> None:
    assert required_mask(UD, RESET, INIT) == PKEY_INDEX | PORT | QKEY
    assert required_mask(UD, INIT, RTR) == 0
    assert optional_mask(UD, INIT, RTR) == PKEY_INDEX | QKEY
    assert required_mask(UD, RTR, RTS) == SQ_PSN
    check_transition(UD, RESET, INIT, STATE | PKEY_INDEX | PORT | QKEY)
    check_transition(UD, INIT, RTR, STATE)
    check_transition(UD, RTR, RTS, STATE | SQ_PSN)


def test_uc_init_to_rtr_has_no_rd_atomic_or_rnr() -> None:
    assert required_mask(UC, INIT, RTR) == AV | PATH_MTU | DEST_QPN | RQ_PSN
    assert required_mask(UC, RTR, RTS) == SQ_PSN
    with pytest.raises(TransitionError, match="IBV_QP_MIN_RNR_TIMER"):
        check_transition(UC, INIT, RTR, STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MIN_RNR_TIMER)


def test_special_types() -> None:
    assert required_mask(SMI, RESET, INIT) == PKEY_INDEX | QKEY  # no PORT: fixed at creation
    assert required_mask(GSI, RESET, INIT) == PKEY_INDEX | QKEY
    assert required_mask(RAW_PACKET, RESET, INIT) == PORT
    assert required_mask(XRC_TGT, RTR, RTS) == TIMEOUT | SQ_PSN
    assert required_mask(XRC_INI, INIT, RTR) == AV | PATH_MTU | DEST_QPN | RQ_PSN
    assert optional_mask(RAW_PACKET, RTS, RTS) == RATE_LIMIT


def test_rate_limit_only_for_raw_packet() -> None:
    check_transition(RAW_PACKET, RTS, RTS, STATE | RATE_LIMIT)
    with pytest.raises(TransitionError, match="IBV_QP_RATE_LIMIT"):
        check_transition(RC, RTS, RTS, STATE | RATE_LIMIT)


def test_cap_is_never_allowed() -> None:
    for cur, nxt in VALID_TRANSITIONS:
        for qp_type in QP_TYPES:
            assert not accepts(qp_type, cur, nxt, STATE | CAP | required_mask(qp_type, cur, nxt))


def test_valid_pairs_are_the_kernel_table() -> None:
    assert VALID_TRANSITIONS == {
        (RESET, RESET), (RESET, INIT),
        (INIT, RESET), (INIT, ERR), (INIT, INIT), (INIT, RTR),
        (RTR, RESET), (RTR, ERR), (RTR, RTS),
        (RTS, RESET), (RTS, ERR), (RTS, RTS), (RTS, SQD),
        (SQD, RESET), (SQD, ERR), (SQD, RTS), (SQD, SQD),
        (SQE, RESET), (SQE, ERR), (SQE, RTS),
        (ERR, RESET), (ERR, ERR),
    }  # fmt: skip


# -- check_transition's behaviour and messages --


def test_reset_to_rtr_is_invalid() -> None:
    with pytest.raises(TransitionError) as info:
        check_transition(RC, RESET, RTR, STATE | RC_INIT_TO_RTR)
    assert info.value.reason == "RESET -> RTR is not a valid QP transition"
    with pytest.raises(TransitionError):
        required_mask(RC, RESET, RTR)


@pytest.mark.parametrize("qp_type", QP_TYPES)
@pytest.mark.parametrize("cur", [INIT, RTR, RTS, SQD, SQE, ERR])
def test_any_state_to_err_or_reset_with_only_state(qp_type: int, cur: int) -> None:
    check_transition(qp_type, cur, ERR, STATE)
    check_transition(qp_type, cur, RESET, STATE)
    check_transition(qp_type, cur, ERR, 0)  # IBV_QP_STATE is tolerated, not required


def test_reset_to_err_is_not_in_the_linux_table() -> None:
    with pytest.raises(TransitionError, match="RESET -> ERR is not a valid"):
        check_transition(RC, RESET, ERR, STATE)


def test_missing_required_named() -> None:
    with pytest.raises(TransitionError) as info:
        check_transition(RC, INIT, RTR, STATE | (RC_INIT_TO_RTR & ~DEST_QPN))
    assert info.value.missing == DEST_QPN
    assert info.value.reason.startswith("INIT -> RTR for RC requires IBV_QP_AV, IBV_QP_PATH_MTU")
    assert info.value.reason.endswith("(missing: IBV_QP_DEST_QPN)")


def test_extra_bit_rejected_and_named() -> None:
    with pytest.raises(TransitionError) as info:
        check_transition(RC, INIT, RTR, STATE | RC_INIT_TO_RTR | TIMEOUT)
    assert info.value.disallowed == TIMEOUT
    assert info.value.reason == "attribute IBV_QP_TIMEOUT is not allowed in INIT -> RTR for RC"


def test_cur_state_rule() -> None:
    check_transition(RC, RTS, RTS, STATE | CUR_STATE)
    check_transition(UD, SQE, RTS, STATE | CUR_STATE)
    with pytest.raises(TransitionError, match="only allowed when the current state is RTR, RTS, SQD or SQE"):
        check_transition(RC, INIT, INIT, STATE | CUR_STATE)
    # The current state passes the first rule, but the row does not list CUR_STATE.
    with pytest.raises(TransitionError, match="attribute IBV_QP_CUR_STATE is not allowed in RTS -> ERR"):
        check_transition(RC, RTS, ERR, STATE | CUR_STATE)
    with pytest.raises(TransitionError, match="not allowed in SQE -> RTS for RC"):
        check_transition(RC, SQE, RTS, STATE | CUR_STATE)


def test_unknown_inputs() -> None:
    with pytest.raises(TransitionError, match="unknown QP type"):
        check_transition(7, RESET, RESET, STATE)
    with pytest.raises(TransitionError, match="unknown QP state"):
        check_transition(RC, RESET, 7, STATE)
    with pytest.raises(TransitionError, match="unknown QP state"):
        required_mask(RC, -1, RESET)
    with pytest.raises(TransitionError, match="negative"):
        check_transition(RC, RTS, ERR, -1)


def test_mask_names() -> None:
    assert mask_names(0) == []
    assert mask_names(DEST_QPN | STATE | AV) == ["IBV_QP_STATE", "IBV_QP_AV", "IBV_QP_DEST_QPN"]
    assert mask_names(RATE_LIMIT | (1 << 21)) == ["1<<21", "IBV_QP_RATE_LIMIT"]
    names = mask_names((1 << 21) - 1)
    assert names[0] == "IBV_QP_STATE" and names[-1] == "IBV_QP_DEST_QPN" and len(names) == 21


# -- the property: check_transition is exactly ib_modify_qp_is_ok() over the table data --


def kernel_would_accept(qp_type: int, cur: int, nxt: int, mask: int) -> bool:
    if mask & CUR_STATE and cur not in (RTR, RTS, SQD, SQE):
        return False
    if (cur, nxt) not in VALID_TRANSITIONS:
        return False
    req = required_mask(qp_type, cur, nxt)
    opt = optional_mask(qp_type, cur, nxt)
    return mask & req == req and mask & ~(req | opt | STATE) == 0


VALID_PAIRS = sorted(VALID_TRANSITIONS)


@st.composite
def triples(draw: st.DrawFn) -> tuple[int, int, int, int]:
    qp_type = draw(st.sampled_from(QP_TYPES))
    if draw(st.booleans()):
        # Near the boundary of a valid row: its required bits, some optional ones, maybe STATE,
        # then maybe one bit flipped (often one of the row's own bits).
        cur, nxt = draw(st.sampled_from(VALID_PAIRS))
        req, opt = required_mask(qp_type, cur, nxt), optional_mask(qp_type, cur, nxt)
        mask = req | (opt & draw(st.integers(0, ALL_BITS))) | draw(st.sampled_from([0, STATE]))
        if draw(st.booleans()):
            row_bits = [1 << n for n in range(26) if (req | opt) >> n & 1] or [STATE]
            mask ^= draw(st.sampled_from(row_bits) | st.integers(0, 25).map(lambda n: 1 << n))
    else:
        cur = draw(st.sampled_from(STATES))
        nxt = draw(st.sampled_from(STATES))
        mask = draw(st.integers(0, ALL_BITS))
    return qp_type, cur, nxt, mask


@settings(max_examples=1000)
@given(triples())
def test_check_transition_is_ib_modify_qp_is_ok(triple: tuple[int, int, int, int]) -> None:
    qp_type, cur, nxt, mask = triple
    assert accepts(qp_type, cur, nxt, mask) == kernel_would_accept(qp_type, cur, nxt, mask)


@given(triples())
def test_rejection_reason_matches_the_fields(triple: tuple[int, int, int, int]) -> None:
    qp_type, cur, nxt, mask = triple
    try:
        check_transition(qp_type, cur, nxt, mask)
    except TransitionError as err:
        for name in mask_names(err.missing | err.disallowed):
            assert name in err.reason
        assert err.missing & mask == 0
        assert err.disallowed & ~mask == 0


@pytest.mark.parametrize("qp_type", QP_TYPES)
def test_every_row_every_single_bit_flip(qp_type: int) -> None:
    """Exhaustively: each valid row's minimal mask, and that mask with any one of 26 bits flipped."""
    for cur, nxt in VALID_PAIRS:
        for base in (required_mask(qp_type, cur, nxt), required_mask(qp_type, cur, nxt) | STATE):
            assert accepts(qp_type, cur, nxt, base)
            for n in range(26):
                mask = base ^ (1 << n)
                assert accepts(qp_type, cur, nxt, mask) == kernel_would_accept(qp_type, cur, nxt, mask), (
                    qp_type,
                    cur,
                    nxt,
                    mask_names(mask),
                )
