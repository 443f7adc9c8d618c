"""Several engines behind one NIC address, each datagram handed to the engine of its QP.

One engine is one Python thread, so one NIC address serving two busy programs runs both
programs' transport on one core. A NIC may instead run several engines, each owning a share of
its QPs, and let the kernel do what a real NIC's receive steering does: every engine binds the
address and UDP port 4791 with ``SO_REUSEPORT``, and a classic BPF program attached to the
group (``SO_ATTACH_REUSEPORT_CBPF``) reads each datagram's BTH DestQP and returns the index of
the socket whose engine owns it, whatever the sender and its source port. The rule lives in
``engine_of``, the program in ``steering_program`` (the link attaches it: ``link.udp``), and
the two are checked against each other (``tests/test_steering.py``). This module does no I/O:
the device model numbers its QPs and loops back its own by the same rule.

- QP0 and QP1 (the connection manager's MADs) belong to engine 0, as does what is too short to
  carry a BTH;
- any other QPN belongs to engine ``qpn % engines``, so an engine numbers its QPs in its own
  residue class (``Steering.owns``).

The kernel numbers a group's sockets in the order they joined it, so engine ``i`` binds after
engines ``0 .. i-1`` (the one that starts them waits for each); a socket that leaves the group
renumbers the last one, so the engines of one address stop together.

Packets of several QPs must not share a UDP GSO send (``nic.tx``): the kernel steers such a
send by its first datagram's DestQP when it delivers it whole to a socket that asked for GRO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pyroce.wire.bth import DEST_QP_WORD, MAX_QPN

FIRST_STEERED_QPN: Final = 2  # QP0 and QP1 stay with engine 0
MAX_ENGINES: Final = 64
# <linux/filter.h>: classic BPF instructions (code, jt, jf, k)
_LD_W_ABS, _ALU_AND_K, _JGE_K, _ALU_MOD_K, _RET_K, _RET_A = 0x20, 0x54, 0x35, 0x94, 0x06, 0x16


@dataclass(frozen=True, slots=True)
class Steering:
    """This engine's place among the NIC address's engines."""

    engines: int
    index: int

    def __post_init__(self) -> None:
        if not 1 <= self.engines <= MAX_ENGINES:
            raise ValueError(f"{self.engines} engines: a NIC runs 1 to {MAX_ENGINES}")
        if not 0 <= self.index < self.engines:
            raise ValueError(f"engine {self.index} of {self.engines}: engines are numbered 0 to {self.engines - 1}")

    def owns(self, qpn: int) -> bool:
        return engine_of(qpn, self.engines) == self.index


def engine_of(qpn: int, engines: int) -> int:
    """The engine that owns QP ``qpn`` of a NIC with ``engines`` engines."""
    return 0 if qpn < FIRST_STEERED_QPN else qpn % engines


def steering_program(engines: int) -> list[tuple[int, int, int, int]]:
    """``engine_of`` as classic BPF over a UDP payload: the socket index for its datagram (a
    load past the end ends the program with 0: engine 0 gets what carries no BTH)."""
    return [
        (_LD_W_ABS, 0, 0, DEST_QP_WORD),  # the UDP payload's: the BTH
        (_ALU_AND_K, 0, 0, MAX_QPN),
        (_JGE_K, 1, 0, FIRST_STEERED_QPN),  # a steered QPN: on to the modulo
        (_RET_K, 0, 0, 0),
        (_ALU_MOD_K, 0, 0, engines),
        (_RET_A, 0, 0, 0),
    ]
