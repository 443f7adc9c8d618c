"""The QP state machine Linux enforces on ``ibv_modify_qp``: valid transitions and their attribute masks.

This is the kernel's ``qp_state_table`` and ``ib_modify_qp_is_ok()`` (torvalds/linux
``drivers/infiniband/core/verbs.c``, read at commit f4d8f354d753ab21379060a5cf5553fa45a698b2)
as Python data, kept in one place so that every layer (verbs, the soft device, tests) applies the
same rule: whether a (current state, next state) pair is a transition at all and, per QP type,
which ``ibv_qp_attr_mask`` bits it requires and which it merely allows. The table is Linux's
reading of the IBA vol. 1 Modify Queue Pair verb (chapter 11) and QP state diagram (chapter 10);
where they differ (RESET -> ERR) this follows Linux. Numbers are libibverbs' (rdma-core
``libibverbs/verbs.h`` at 85d8a414f05384dc9261a90d917989c99af3cc72): states RESET=0 .. ERR=6, mask
bits of ``enum ibv_qp_attr_mask`` (bit for bit the kernel's ``IB_QP_*``), and QP types of the
kernel's ``enum ib_qp_type`` (SMI=0, GSI=1, RC=2, UC=3, UD=4, RAW_PACKET=8, XRC_INI=9, XRC_TGT=10).
Callers pick the states as rdmavt and rxe do: current = ``attr.cur_qp_state`` if the mask has
IBV_QP_CUR_STATE else the QP's state; next = ``attr.qp_state`` if the mask has IBV_QP_STATE else
current (a modify without IBV_QP_STATE is an X -> X transition).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "VALID_TRANSITIONS",
    "TransitionError",
    "check_transition",
    "mask_names",
    "optional_mask",
    "required_mask",
]

# enum ibv_qp_state (= enum ib_qp_state)
_RESET, _INIT, _RTR, _RTS, _SQD, _SQE, _ERR = range(7)
_STATE_NAMES: tuple[str, ...] = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")

# enum ib_qp_type: the members below IB_QPT_MAX (11), which is how wide the kernel table's columns are.
_SMI, _GSI, _RC, _UC, _UD, _RAW_IPV6, _RAW_ETHERTYPE = range(7)
_RAW_PACKET, _XRC_INI, _XRC_TGT = 8, 9, 10
_QP_TYPE_NAMES: Mapping[int, str] = MappingProxyType({
    _SMI: "SMI", _GSI: "GSI", _RC: "RC", _UC: "UC", _UD: "UD", _RAW_IPV6: "RAW_IPV6",
    _RAW_ETHERTYPE: "RAW_ETHERTYPE", _RAW_PACKET: "RAW_PACKET", _XRC_INI: "XRC_INI", _XRC_TGT: "XRC_TGT",
})  # fmt: skip

# enum ibv_qp_attr_mask (= enum ib_qp_attr_mask for these bits)
_STATE = 1 << 0
_CUR_STATE = 1 << 1
_EN_SQD_ASYNC_NOTIFY = 1 << 2
_ACCESS_FLAGS = 1 << 3
_PKEY_INDEX = 1 << 4
_PORT = 1 << 5
_QKEY = 1 << 6
_AV = 1 << 7
_PATH_MTU = 1 << 8
_TIMEOUT = 1 << 9
_RETRY_CNT = 1 << 10
_RNR_RETRY = 1 << 11
_RQ_PSN = 1 << 12
_MAX_QP_RD_ATOMIC = 1 << 13
_ALT_PATH = 1 << 14
_MIN_RNR_TIMER = 1 << 15
_SQ_PSN = 1 << 16
_MAX_DEST_RD_ATOMIC = 1 << 17
_PATH_MIG_STATE = 1 << 18
_CAP = 1 << 19
_DEST_QPN = 1 << 20
_RATE_LIMIT = 1 << 25  # bits 21..24: kernel IB_QP_RESERVED1..4 (once SMAC, ALT_SMAC, VID, ALT_VID)

_ATTR_NAMES: Mapping[int, str] = MappingProxyType(
    {
        _STATE: "IBV_QP_STATE",
        _CUR_STATE: "IBV_QP_CUR_STATE",
        _EN_SQD_ASYNC_NOTIFY: "IBV_QP_EN_SQD_ASYNC_NOTIFY",
        _ACCESS_FLAGS: "IBV_QP_ACCESS_FLAGS",
        _PKEY_INDEX: "IBV_QP_PKEY_INDEX",
        _PORT: "IBV_QP_PORT",
        _QKEY: "IBV_QP_QKEY",
        _AV: "IBV_QP_AV",
        _PATH_MTU: "IBV_QP_PATH_MTU",
        _TIMEOUT: "IBV_QP_TIMEOUT",
        _RETRY_CNT: "IBV_QP_RETRY_CNT",
        _RNR_RETRY: "IBV_QP_RNR_RETRY",
        _RQ_PSN: "IBV_QP_RQ_PSN",
        _MAX_QP_RD_ATOMIC: "IBV_QP_MAX_QP_RD_ATOMIC",
        _ALT_PATH: "IBV_QP_ALT_PATH",
        _MIN_RNR_TIMER: "IBV_QP_MIN_RNR_TIMER",
        _SQ_PSN: "IBV_QP_SQ_PSN",
        _MAX_DEST_RD_ATOMIC: "IBV_QP_MAX_DEST_RD_ATOMIC",
        _PATH_MIG_STATE: "IBV_QP_PATH_MIG_STATE",
        _CAP: "IBV_QP_CAP",
        _DEST_QPN: "IBV_QP_DEST_QPN",
        _RATE_LIMIT: "IBV_QP_RATE_LIMIT",
    }
)

_Masks = Mapping[int, int]  # QP type -> attribute mask; a type not listed has 0, as in the C initialisers


def _masks(**by_type: int) -> _Masks:
    return MappingProxyType({_QP_TYPE_BY_NAME[name]: mask for name, mask in by_type.items()})


_QP_TYPE_BY_NAME: Mapping[str, int] = MappingProxyType({name: qpt for qpt, name in _QP_TYPE_NAMES.items()})
_NONE: _Masks = MappingProxyType({})

# Masks shared by several rows, named after what they are in the kernel table.
_RC_LIKE_INIT = _PKEY_INDEX | _PORT | _ACCESS_FLAGS
_MAD_INIT = _PKEY_INDEX | _QKEY  # SMI/GSI: the port is fixed when the QP is created

# qp_state_table[cur][next] = (req_param, opt_param); a pair not listed here has .valid = 0.
#
# What the kernel table says that one might not expect (all transcribed as is):
# * RESET -> ERR is not valid (the IBA allows it, and some copies of this table elsewhere have it).
#   Every other state may go to RESET or ERR with IBV_QP_STATE alone; ERR goes only to RESET or ERR.
# * IBV_QP_CUR_STATE: ib_modify_qp_is_ok() refuses it unless the current state is RTR, RTS, SQD or
#   SQE (before looking at the table), and the table then allows it only in RTR/RTS/SQD/SQE -> RTS.
# * IBV_QP_STATE is tolerated everywhere and required nowhere; every other bit outside req|opt is
#   refused, so IBV_QP_CAP (resizing a QP) is refused on every transition.
# * SQE -> RTS is valid for all types but lets only UD, UC, SMI and GSI carry attributes; an RC QP
#   accepts it with IBV_QP_STATE alone (RC never enters SQE: its send errors lead to ERR).
# * IBV_QP_RATE_LIMIT is optional only for RAW_PACKET in RTR -> RTS and RTS -> RTS. Besides, most
#   drivers refuse any bit above IB_QP_ATTR_STANDARD_BITS (GENMASK(20, 0)) with EOPNOTSUPP before
#   this check; drivers that pace RC QPs (e.g. bnxt_re) consult a second table of their own.
# * RAW_PACKET needs only IBV_QP_PORT for RESET -> INIT and may carry nothing in INIT -> INIT or
#   INIT -> RTR. RAW_IPV6 (5) and RAW_ETHERTYPE (6) are columns with no masks at all.
# * Link layer: older kernels (3.x) passed the link layer in and, for Ethernet, also required
#   IB_QP_SMAC and allowed IB_QP_VID/ALT_SMAC/ALT_VID (bits 21..24) in INIT -> RTR
#   (req_param_add_eth/opt_param_add_eth). Today the core resolves MACs from IBV_QP_AV itself and
#   the check has no link-layer input; a RoCE AV must carry a GRH, but that is checked with the AV.
# Outside ib_modify_qp_is_ok() (uverbs_cmd.c, not modelled here): states above ERR are refused with
# EINVAL, port numbers in IBV_QP_PORT/AV/ALT_PATH are checked, and for XRC the bits the type ignores
# are silently dropped before this check (XRC_INI: MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER; XRC_TGT:
# MAX_QP_RD_ATOMIC, RETRY_CNT, RNR_RETRY), so ibv_modify_qp accepts them although this table does not.
_TABLE: Mapping[tuple[int, int], tuple[_Masks, _Masks]] = MappingProxyType({
    (_RESET, _RESET): (_NONE, _NONE),
    (_RESET, _INIT): (
        _masks(UD=_PKEY_INDEX | _PORT | _QKEY, RAW_PACKET=_PORT, UC=_RC_LIKE_INIT, RC=_RC_LIKE_INIT,
               XRC_INI=_RC_LIKE_INIT, XRC_TGT=_RC_LIKE_INIT, SMI=_MAD_INIT, GSI=_MAD_INIT),
        _NONE,
    ),
    (_INIT, _RESET): (_NONE, _NONE),
    (_INIT, _ERR): (_NONE, _NONE),
    (_INIT, _INIT): (
        _NONE,
        _masks(UD=_PKEY_INDEX | _PORT | _QKEY, UC=_RC_LIKE_INIT, RC=_RC_LIKE_INIT,
               XRC_INI=_RC_LIKE_INIT, XRC_TGT=_RC_LIKE_INIT, SMI=_MAD_INIT, GSI=_MAD_INIT),
    ),
    (_INIT, _RTR): (
        _masks(UC=_AV | _PATH_MTU | _DEST_QPN | _RQ_PSN,
               RC=_AV | _PATH_MTU | _DEST_QPN | _RQ_PSN | _MAX_DEST_RD_ATOMIC | _MIN_RNR_TIMER,
               XRC_INI=_AV | _PATH_MTU | _DEST_QPN | _RQ_PSN,
               XRC_TGT=_AV | _PATH_MTU | _DEST_QPN | _RQ_PSN | _MAX_DEST_RD_ATOMIC | _MIN_RNR_TIMER),
        _masks(UD=_PKEY_INDEX | _QKEY,
               UC=_ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX,
               RC=_ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX,
               XRC_INI=_ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX,
               XRC_TGT=_ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX,
               SMI=_PKEY_INDEX | _QKEY, GSI=_PKEY_INDEX | _QKEY),
    ),
    (_RTR, _RESET): (_NONE, _NONE),
    (_RTR, _ERR): (_NONE, _NONE),
    (_RTR, _RTS): (
        _masks(UD=_SQ_PSN, UC=_SQ_PSN,
               RC=_TIMEOUT | _RETRY_CNT | _RNR_RETRY | _SQ_PSN | _MAX_QP_RD_ATOMIC,
               XRC_INI=_TIMEOUT | _RETRY_CNT | _RNR_RETRY | _SQ_PSN | _MAX_QP_RD_ATOMIC,
               XRC_TGT=_TIMEOUT | _SQ_PSN,
               SMI=_SQ_PSN, GSI=_SQ_PSN),
        _masks(UD=_CUR_STATE | _QKEY,
               UC=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _PATH_MIG_STATE,
               RC=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _MIN_RNR_TIMER | _PATH_MIG_STATE,
               XRC_INI=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _PATH_MIG_STATE,
               XRC_TGT=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _MIN_RNR_TIMER | _PATH_MIG_STATE,
               SMI=_CUR_STATE | _QKEY, GSI=_CUR_STATE | _QKEY,
               RAW_PACKET=_RATE_LIMIT),
    ),
    (_RTS, _RESET): (_NONE, _NONE),
    (_RTS, _ERR): (_NONE, _NONE),
    (_RTS, _RTS): (
        _NONE,
        _masks(UD=_CUR_STATE | _QKEY,
               UC=_CUR_STATE | _ACCESS_FLAGS | _ALT_PATH | _PATH_MIG_STATE,
               RC=_CUR_STATE | _ACCESS_FLAGS | _ALT_PATH | _PATH_MIG_STATE | _MIN_RNR_TIMER,
               XRC_INI=_CUR_STATE | _ACCESS_FLAGS | _ALT_PATH | _PATH_MIG_STATE,
               XRC_TGT=_CUR_STATE | _ACCESS_FLAGS | _ALT_PATH | _PATH_MIG_STATE | _MIN_RNR_TIMER,
               SMI=_CUR_STATE | _QKEY, GSI=_CUR_STATE | _QKEY,
               RAW_PACKET=_RATE_LIMIT),
    ),
    (_RTS, _SQD): (
        _NONE,
        _masks(UD=_EN_SQD_ASYNC_NOTIFY, UC=_EN_SQD_ASYNC_NOTIFY, RC=_EN_SQD_ASYNC_NOTIFY,
               XRC_INI=_EN_SQD_ASYNC_NOTIFY, XRC_TGT=_EN_SQD_ASYNC_NOTIFY,  # the kernel marks XRC_TGT "/* ??? */"
               SMI=_EN_SQD_ASYNC_NOTIFY, GSI=_EN_SQD_ASYNC_NOTIFY),
    ),
    (_SQD, _RESET): (_NONE, _NONE),
    (_SQD, _ERR): (_NONE, _NONE),
    (_SQD, _RTS): (
        _NONE,
        _masks(UD=_CUR_STATE | _QKEY,
               UC=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _PATH_MIG_STATE,
               RC=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _MIN_RNR_TIMER | _PATH_MIG_STATE,
               XRC_INI=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _PATH_MIG_STATE,
               XRC_TGT=_CUR_STATE | _ALT_PATH | _ACCESS_FLAGS | _MIN_RNR_TIMER | _PATH_MIG_STATE,
               SMI=_CUR_STATE | _QKEY, GSI=_CUR_STATE | _QKEY),
    ),
    (_SQD, _SQD): (
        _NONE,
        _masks(UD=_PKEY_INDEX | _QKEY,
               UC=_AV | _ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX | _PATH_MIG_STATE,
               RC=(_PORT | _AV | _TIMEOUT | _RETRY_CNT | _RNR_RETRY | _MAX_QP_RD_ATOMIC | _MAX_DEST_RD_ATOMIC
                   | _ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX | _MIN_RNR_TIMER | _PATH_MIG_STATE),
               XRC_INI=(_PORT | _AV | _TIMEOUT | _RETRY_CNT | _RNR_RETRY | _MAX_QP_RD_ATOMIC
                        | _ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX | _PATH_MIG_STATE),
               XRC_TGT=(_PORT | _AV | _TIMEOUT | _MAX_DEST_RD_ATOMIC
                        | _ALT_PATH | _ACCESS_FLAGS | _PKEY_INDEX | _MIN_RNR_TIMER | _PATH_MIG_STATE),
               SMI=_PKEY_INDEX | _QKEY, GSI=_PKEY_INDEX | _QKEY),
    ),
    (_SQE, _RESET): (_NONE, _NONE),
    (_SQE, _ERR): (_NONE, _NONE),
    (_SQE, _RTS): (
        _NONE,
        _masks(UD=_CUR_STATE | _QKEY, UC=_CUR_STATE | _ACCESS_FLAGS,
               SMI=_CUR_STATE | _QKEY, GSI=_CUR_STATE | _QKEY),
    ),
    (_ERR, _RESET): (_NONE, _NONE),
    (_ERR, _ERR): (_NONE, _NONE),
})  # fmt: skip

VALID_TRANSITIONS: frozenset[tuple[int, int]] = frozenset(_TABLE)
"""Every (current state, next state) pair the kernel table marks ``.valid``, for every QP type alike."""

# ib_modify_qp_is_ok(): IB_QP_CUR_STATE is refused unless the current state is one of these.
_CUR_STATE_FROM = frozenset({_RTR, _RTS, _SQD, _SQE})


class TransitionError(Exception):
    """An ``ibv_modify_qp`` that ``ib_modify_qp_is_ok()`` refuses (the kernel answers EINVAL).

    ``reason`` is a sentence for humans; ``missing`` holds the required bits the mask lacked and
    ``disallowed`` the bits it may not carry (0 when that was not the problem).
    """

    def __init__(self, reason: str, *, missing: int = 0, disallowed: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing
        self.disallowed = disallowed


def mask_names(mask: int) -> list[str]:
    """The ``IBV_QP_*`` names of the bits set in ``mask``, lowest bit first; an unnamed bit n is ``"1<<n"``."""
    if mask < 0:
        raise ValueError(f"attribute mask must not be negative, got {mask}")
    names = []
    bit = 0
    while mask >> bit:
        if (mask >> bit) & 1:
            names.append(_ATTR_NAMES.get(1 << bit, f"1<<{bit}"))
        bit += 1
    return names


def required_mask(qp_type: int, cur_state: int, next_state: int) -> int:
    """The ``req_param`` bits of ``cur_state -> next_state`` for ``qp_type``.

    Raises TransitionError for an unknown QP type or state, or for a pair the table does not allow.
    """
    return _row(qp_type, cur_state, next_state)[0]


def optional_mask(qp_type: int, cur_state: int, next_state: int) -> int:
    """The ``opt_param`` bits of ``cur_state -> next_state`` for ``qp_type`` (IBV_QP_STATE is allowed besides).

    Raises TransitionError for an unknown QP type or state, or for a pair the table does not allow.
    """
    return _row(qp_type, cur_state, next_state)[1]


def check_transition(qp_type: int, cur_state: int, next_state: int, mask: int) -> None:
    """Raise TransitionError unless ib_modify_qp_is_ok() would accept it.

    The checks run in the kernel's order, so the reason names the first one that fails: the
    IBV_QP_CUR_STATE rule, then validity of the pair, then the required bits, then the bits allowed.
    Unknown QP types, states and negative masks (which the kernel never sees) are refused first.
    """
    _check_type_and_states(qp_type, cur_state, next_state)
    if mask < 0:
        raise TransitionError(f"attribute mask must not be negative, got {mask}")
    if mask & _CUR_STATE and cur_state not in _CUR_STATE_FROM:
        raise TransitionError(
            f"IBV_QP_CUR_STATE is only allowed when the current state is RTR, RTS, SQD or SQE, "
            f"not {_STATE_NAMES[cur_state]}",
            disallowed=_CUR_STATE,
        )
    req, opt = _row(qp_type, cur_state, next_state)
    what = f"{_STATE_NAMES[cur_state]} -> {_STATE_NAMES[next_state]}"
    kind = _QP_TYPE_NAMES[qp_type]
    missing = req & ~mask
    if missing:
        raise TransitionError(
            f"{what} for {kind} requires {', '.join(mask_names(req))} (missing: {', '.join(mask_names(missing))})",
            missing=missing,
        )
    extra = mask & ~(req | opt | _STATE)
    if extra:
        names = mask_names(extra)
        noun, verb = ("attribute", "is") if len(names) == 1 else ("attributes", "are")
        raise TransitionError(f"{noun} {', '.join(names)} {verb} not allowed in {what} for {kind}", disallowed=extra)


def _check_type_and_states(qp_type: int, cur_state: int, next_state: int) -> None:
    if qp_type not in _QP_TYPE_NAMES:
        raise TransitionError(f"unknown QP type {qp_type}")
    for state in (cur_state, next_state):
        if not 0 <= state < len(_STATE_NAMES):
            raise TransitionError(f"unknown QP state {state}")


def _row(qp_type: int, cur_state: int, next_state: int) -> tuple[int, int]:
    _check_type_and_states(qp_type, cur_state, next_state)
    entry = _TABLE.get((cur_state, next_state))
    if entry is None:
        raise TransitionError(f"{_STATE_NAMES[cur_state]} -> {_STATE_NAMES[next_state]} is not a valid QP transition")
    req, opt = entry
    return req.get(qp_type, 0), opt.get(qp_type, 0)
