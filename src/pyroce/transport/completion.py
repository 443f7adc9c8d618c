"""What the transport reports when work finishes: IBA work completions (IBA 11.4.2.1).

The status, opcode and flags are ``pyroce.ib``'s (libibverbs' numbering), so a status crosses
every layer unchanged; the engine turns a ``Completion`` into an mlx5 CQE and the verbs layer
turns the CQE back into a ``WC``.
"""

from __future__ import annotations

import functools
from typing import Final, NamedTuple

from pyroce.ib.enums import WcFlag, WcOpcode, WcStatus


class Completion(NamedTuple):
    """One work completion. ``is_recv`` says which queue ``wqe_counter`` indexes."""

    is_recv: bool
    wqe_counter: int
    status: WcStatus
    opcode: WcOpcode
    byte_len: int = 0
    imm: int = 0  # immediate data as it came on the wire (big-endian u32), or the invalidated R_Key
    flags: WcFlag = WcFlag.NONE
    src_qp: int = 0
    vendor_err: int = 0
    solicited: bool = False  # a receive completion of a message whose last packet had SE set
    # a UD receive's packet came over IPv4, not IPv6: RoCEv2's CQE says which (IBA A17.4.5.1)
    ipv4: bool = False


# A Completion from all eleven fields, without NamedTuple.__new__'s frame (one per signaled WQE)
new_completion: Final = functools.partial(tuple.__new__, Completion)
