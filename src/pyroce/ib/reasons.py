"""Why a work request failed: pyroce's reason codes, carried in the WC's ``vendor_err``.

"Transport retry counter exceeded" is the error RDMA users meet most and understand least; the
status alone cannot say whether the peer was unreachable, not ready, or refused. Each failing
completion carries one of these codes, and the QP keeps a one-line detail (PSNs, keys,
timers) that the verbs layer prefixes with the QP and its peer.
"""

from __future__ import annotations

import enum


class Reason(enum.IntEnum):
    """``WC.vendor_err`` values (0: none). The text is the generic explanation."""

    NONE = 0
    ACK_TIMEOUT = 1
    SEQUENCE_NAKS = 2
    RESPONSES_LOST = 3
    RNR_EXHAUSTED = 4
    REMOTE_ACCESS = 5
    REMOTE_INVALID_REQUEST = 6
    REMOTE_OPERATIONAL = 7
    LOCAL_PROTECTION = 8
    LOCAL_LENGTH = 9
    BAD_WQE = 10
    FLUSHED = 11
    RECV_TOO_SHORT = 12
    RECV_PROTECTION = 13
    ENGINE_ERROR = 14
    INJECTED = 15
    OP_NOT_SUPPORTED = 16
    LOCAL_MEMORY_OP = 17
    UD_TOO_LONG = 18
    NO_ROUTE = 19

    @property
    def text(self) -> str:
        return REASON_TEXT[self]


REASON_TEXT = {
    Reason.NONE: "no error",
    Reason.ACK_TIMEOUT: "no ACK before the local ACK timeout, retry_cnt times: peer unreachable or not in RTR",
    Reason.SEQUENCE_NAKS: "the peer kept NAKing a PSN sequence error: packets lost on the way, retry_cnt times",
    Reason.RESPONSES_LOST: "read or atomic responses kept going missing, retry_cnt times",
    Reason.RNR_EXHAUSTED: "receiver not ready: the peer had no receive posted, rnr_retry times",
    Reason.REMOTE_ACCESS: "remote access error: R_Key, PD, access flags or range outside the peer's MR",
    Reason.REMOTE_INVALID_REQUEST: "the peer refused the request: length, opcode sequence, alignment, or an "
    "operation its QP does not allow",
    Reason.REMOTE_OPERATIONAL: "the peer failed to execute the request (its receive WQE was unusable)",
    Reason.LOCAL_PROTECTION: "a local SGE is not inside a registered MR of this PD with the needed access",
    Reason.LOCAL_LENGTH: "a local buffer is too short for the operation",
    Reason.BAD_WQE: "the WQE in the send queue could not be decoded",
    Reason.FLUSHED: "flushed: the QP is in the error state (an earlier work request failed)",
    Reason.RECV_TOO_SHORT: "an incoming SEND was longer than the receive buffer",
    Reason.RECV_PROTECTION: "the receive buffer is not inside a registered MR of this PD with local write",
    Reason.ENGINE_ERROR: "pyroce's engine failed while handling this QP (a bug: please report it with the "
    "device's last_error); the QP moved to the error state",
    Reason.INJECTED: "a fault injected by a test's fault plan moved the QP to the error state",
    Reason.OP_NOT_SUPPORTED: "the QP's transport has no such operation (a READ or an atomic on UC)",
    Reason.LOCAL_MEMORY_OP: "a memory window bind or invalidation was refused: MR range, access, PD or key",
    Reason.UD_TOO_LONG: "a UD message is one packet: it may not be longer than the port's active MTU",
    Reason.NO_ROUTE: "the address handle's GID is not an address this device's link can reach",
}
