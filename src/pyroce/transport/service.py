"""What a connected QP does differently as RC or UC (IBA 9.7 and 9.8): one row per service.

Rule: the requester, responder and QP read these rows and never test the transport
themselves, so each difference between RC and UC lives here, once. What is the same
(segmentation by path MTU, placement, the responder's checks and their order) is shared code.

UC (IBA 9.8) is RC without the reliability: no ACKs, no AckReq, no retransmission and no
timer; a send WR completes once its last packet is handed to the wire; SEND and RDMA WRITE
only (no READ or atomics, no SEND with invalidate: UC has no such opcodes); and a request the
responder refuses is dropped silently with the rest of its message (IBA 9.7.5.1.x's class D/E
errors; rxe's ``drop_msg``), where RC NAKs it.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from pyroce.transport.requester import SEGMENT_OPCODES
from pyroce.transport.responder import ERRORS, UC_ERRORS, ErrorAction, RespState
from pyroce.transport.work import WorkOp
from pyroce.wire.opcodes import Opcode, Transport


class Service(NamedTuple):
    """One transport service's rules."""

    transport: Transport
    """The top three opcode bits of its packets; a packet with others is not for this QP."""
    acked: bool
    """Whether requests are acknowledged: AckReq, ACK/NAK, retransmission, the ACK timer, and
    the ACKs header prediction retires."""
    segments: dict[WorkOp, tuple[int, int, int, int]]
    """The opcodes (FIRST, MIDDLE, LAST, ONLY) of each segmented operation the service has."""
    ops: frozenset[WorkOp]
    """The send WR operations the service has; another fails the WR (LOC_QP_OP_ERR, as rxe)."""
    errors: dict[RespState, ErrorAction]
    """How the responder answers each failed check."""
    predicted: frozenset[int]
    """The opcodes header prediction takes (``RcQp.receive_predicted``): the packets after the
    first of a SEND or WRITE that carry no immediate (a BTH alone), a SEND ONLY without one
    (the 2-byte message's packet), a WRITE's FIRST and ONLY without one (a BTH and a RETH), and
    on RC every READ response (a BTH, and an AETH that must say ACK)."""
    runs: frozenset[int]
    """Of those, the MIDDLEs whose followers in a GRO run are placed in one loop (``RcQp.receive_run``)."""


UC_OPS: Final = frozenset({WorkOp.SEND, WorkOp.SEND_WITH_IMM, WorkOp.RDMA_WRITE, WorkOp.RDMA_WRITE_WITH_IMM})

READ_RESPONSES: Final = frozenset({Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
                            Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY})  # fmt: skip
RC_PREDICTED: Final = frozenset({Opcode.RC_SEND_MIDDLE, Opcode.RC_SEND_LAST, Opcode.RC_SEND_ONLY, Opcode.RC_RDMA_WRITE_FIRST,
                                 Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_LAST, Opcode.RC_RDMA_WRITE_ONLY}
                                ) | READ_RESPONSES  # fmt: skip
RC_RUNS: Final = frozenset({Opcode.RC_SEND_MIDDLE, Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE})


def _uc(opcodes: frozenset[int]) -> frozenset[int]:
    """RC's request opcodes as UC's (the top three bits: IBA 9.2.1)."""
    return frozenset(Transport.UC | opcode for opcode in opcodes - READ_RESPONSES)


SERVICES: Final = {
    Transport.RC: Service(Transport.RC, True, SEGMENT_OPCODES, frozenset(WorkOp), ERRORS, RC_PREDICTED, RC_RUNS),
    Transport.UC: Service(
        Transport.UC,
        False,
        {op: tuple(Transport.UC | opcode for opcode in SEGMENT_OPCODES[op]) for op in UC_OPS},  # type: ignore[misc]
        UC_OPS,
        UC_ERRORS,
        _uc(RC_PREDICTED),
        _uc(RC_RUNS),
    ),
}
