"""Completion queue entries in mlx5's 64-byte layout (``struct mlx5_cqe64``/``mlx5_err_cqe``).

Byte 63 ``op_own``: opcode in bits 7:4, the solicited event bit 1 (``mlx5dv_get_cqe_se``),
owner bit 0. The producer (the engine) writes bytes
0-59 first and the last word (``wqe_counter``, signature, ``op_own``) last, so a consumer
that sees a valid ``op_own`` sees a whole CQE. ``nic.rings.CqRing`` writes and reads them
with the layouts below (``produce``, ``poll``).
"""

from __future__ import annotations

import enum
import struct
from typing import Final

from pyroce.ib.enums import WcStatus

CQE_SIZE: Final = 64
# A responder CQE's ``flags_rqpn`` bits 29:28 say the message came with a GRH: the NIC writes
# GRH_FLAG, a reader takes any bit of GRH_MASK (libmlx5's ``(flags_rqpn >> 28) & 3``)
GRH_FLAG: Final = 1 << 28
GRH_MASK: Final = 3 << 28
# Bits 27:24 (libmlx5's ``wc.sl``) of a RoCE UD receive's CQE: the packet type, as a ConnectX
# writes it (its PRM; IBA A17.4.5.1 asks for the flag): UDP-encapsulated (RoCEv2), then the L3
# header. UCX's UD transport reads it to find the destination address in the receive buffer.
ROCE_PKT_SHIFT: Final = 24
ROCE_PKT_UDP: Final = 0x8
ROCE_PKT_IPV6: Final = 0x1
ROCE_PKT_IPV4: Final = 0x2


class CqeOpcode(enum.IntEnum):
    """``MLX5_CQE_*``: op_own bits 7:4."""

    REQ = 0
    RESP_WR_IMM = 1
    RESP_SEND = 2
    RESP_SEND_IMM = 3
    RESP_SEND_INV = 4
    REQ_ERR = 13
    RESP_ERR = 14
    INVALID = 15


class CqeSyndrome(enum.IntEnum):
    """``MLX5_CQE_SYNDROME_*`` of error CQEs (byte 55)."""

    LOCAL_LENGTH_ERR = 0x01
    LOCAL_QP_OP_ERR = 0x02
    LOCAL_PROT_ERR = 0x04
    WR_FLUSH_ERR = 0x05
    MW_BIND_ERR = 0x06
    BAD_RESP_ERR = 0x10
    LOCAL_ACCESS_ERR = 0x11
    REMOTE_INVAL_REQ_ERR = 0x12
    REMOTE_ACCESS_ERR = 0x13
    REMOTE_OP_ERR = 0x14
    TRANSPORT_RETRY_EXC_ERR = 0x15
    RNR_RETRY_EXC_ERR = 0x16
    REMOTE_ABORTED_ERR = 0x22


_CQE_FIELDS: Final = ("opcode", "qpn", "wqe_counter", "byte_cnt", "imm_inval", "srqn", "flags_rqpn", "timestamp",
                      "s_wqe_opcode", "syndrome", "vendor_err", "solicited")  # fmt: skip


class Cqe:
    """One completion. For requester CQEs ``s_wqe_opcode`` is the send WQE's opcode; for
    responder CQEs ``flags_rqpn`` carries the source QP (UD) and the GRH flag.

    A class of fixed fields, not a NamedTuple, as ``SendWqe``: one is read per completion
    polled, and the compiled build makes a native class in ~300 instructions where a
    NamedTuple took ~1 200. Equal when every field is."""

    __slots__ = _CQE_FIELDS

    def __init__(self, opcode: CqeOpcode, qpn: int, wqe_counter: int, byte_cnt: int = 0, imm_inval: int = 0,
                 srqn: int = 0, flags_rqpn: int = 0, timestamp: int = 0, s_wqe_opcode: int = 0, syndrome: int = 0,
                 vendor_err: int = 0, solicited: bool = False) -> None:  # fmt: skip
        """``imm_inval``: immediate data (network order as a big-endian int) or the invalidated
        rkey; ``syndrome``, ``vendor_err``: error CQEs only (``vendor_err`` is pyroce's reason
        code); ``solicited``: the message's last packet asked for a solicited event (BTH SE)."""
        self.opcode = opcode
        self.qpn = qpn
        self.wqe_counter = wqe_counter
        self.byte_cnt = byte_cnt
        self.imm_inval = imm_inval
        self.srqn = srqn
        self.flags_rqpn = flags_rqpn
        self.timestamp = timestamp
        self.s_wqe_opcode = s_wqe_opcode
        self.syndrome = syndrome
        self.vendor_err = vendor_err
        self.solicited = solicited

    def fields(self) -> tuple[object, ...]:
        """Every field, in the constructor's order."""
        return (self.opcode, self.qpn, self.wqe_counter, self.byte_cnt, self.imm_inval, self.srqn, self.flags_rqpn,
                self.timestamp, self.s_wqe_opcode, self.syndrome, self.vendor_err, self.solicited)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cqe) and self.fields() == other.fields()

    def __repr__(self) -> str:
        return "Cqe(" + ", ".join(f"{name}={value!r}" for name, value in zip(_CQE_FIELDS, self.fields())) + ")"


# Bytes 0-62, everything but ``op_own``: written before it and read after it, in one call each
# (flags_rqpn@24 srqn@32 imm@36 byte_cnt@44 timestamp@48 opcode_qpn@56 wqe_counter@60 signature@62)
CQE_BODY: Final = struct.Struct(">24xIxxxxIIxxxxIQIHx")
CQE_ERROR: Final = struct.Struct(">BB")  # vendor_err_synd@54, syndrome@55: over the timestamp, in error CQEs
# Byte offsets of the fields above, for readers that load a CQE word by word in place (a GPU
# kernel, pyroce.gpu.helpers): ``byte_cnt``, the error word (vendor error, syndrome in its low
# byte), ``s_wqe_opcode``/QPN, and the last word (``wqe_counter``, signature, ``op_own``).
CQE_BYTE_CNT_AT: Final = 44
CQE_SYNDROME_WORD_AT: Final = 52
CQE_OPCODE_QPN_AT: Final = 56
CQE_TAIL_AT: Final = 60
CQE_OP_OWN_AT: Final = 63
CQE_OPCODES: Final = {int(opcode): opcode for opcode in CqeOpcode}
# Sets of the plain values: a lookup in them costs no enum attribute access (per CQE read)
ERROR_OPCODES: Final = frozenset({int(CqeOpcode.REQ_ERR), int(CqeOpcode.RESP_ERR)})
RECV_OPCODES: Final = frozenset({int(CqeOpcode.RESP_SEND), int(CqeOpcode.RESP_SEND_IMM), int(CqeOpcode.RESP_SEND_INV),
                          int(CqeOpcode.RESP_WR_IMM), int(CqeOpcode.RESP_ERR)})  # fmt: skip
CQE_ERROR_AT: Final = CQE_SYNDROME_WORD_AT + 2


# mlx5 error CQE syndromes <-> libibverbs work completion statuses (mlx5's
# ``mlx5_handle_error_cqe``); a status with no syndrome of its own travels as GENERAL_ERR.
STATUS_OF_SYNDROME: Final = {
    CqeSyndrome.LOCAL_LENGTH_ERR: WcStatus.LOC_LEN_ERR,
    CqeSyndrome.LOCAL_QP_OP_ERR: WcStatus.LOC_QP_OP_ERR,
    CqeSyndrome.LOCAL_PROT_ERR: WcStatus.LOC_PROT_ERR,
    CqeSyndrome.WR_FLUSH_ERR: WcStatus.WR_FLUSH_ERR,
    CqeSyndrome.MW_BIND_ERR: WcStatus.MW_BIND_ERR,
    CqeSyndrome.BAD_RESP_ERR: WcStatus.BAD_RESP_ERR,
    CqeSyndrome.LOCAL_ACCESS_ERR: WcStatus.LOC_ACCESS_ERR,
    CqeSyndrome.REMOTE_INVAL_REQ_ERR: WcStatus.REM_INV_REQ_ERR,
    CqeSyndrome.REMOTE_ACCESS_ERR: WcStatus.REM_ACCESS_ERR,
    CqeSyndrome.REMOTE_OP_ERR: WcStatus.REM_OP_ERR,
    CqeSyndrome.TRANSPORT_RETRY_EXC_ERR: WcStatus.RETRY_EXC_ERR,
    CqeSyndrome.RNR_RETRY_EXC_ERR: WcStatus.RNR_RETRY_EXC_ERR,
    CqeSyndrome.REMOTE_ABORTED_ERR: WcStatus.REM_ABORT_ERR,
}
SYNDROME_OF_STATUS: Final = {status: syndrome for syndrome, status in STATUS_OF_SYNDROME.items()}
GENERAL_ERR_SYNDROME: Final = 0xFF  # no mlx5 syndrome: reported as IBV_WC_GENERAL_ERR
