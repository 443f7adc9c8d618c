"""Work requests as the transport sees them: what the engine decoded from a WQE ring.

``wqe_counter`` is the ring position the completion reports back (mlx5's ``wqe_counter``);
the verbs layer maps it to the user's ``wr_id``, so no user object ever reaches the transport.
"""

from __future__ import annotations

import enum
import functools
from typing import Final, NamedTuple, Protocol


class Sge:
    """A scatter/gather entry: ``length`` bytes at ``addr`` in the MR named by ``lkey``.

    A class of fixed fields, not a NamedTuple, as ``nic.wqe.SendWqe``: one is decoded per data
    segment of every WQE fetched, and the compiled build makes a native class in ~300
    instructions where a NamedTuple took ~1 200. Equal when every field is."""

    __slots__ = ("addr", "length", "lkey")

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr = addr
        self.length = length
        self.lkey = lkey

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Sge) and self.addr == other.addr and self.length == other.length
                and self.lkey == other.lkey)  # fmt: skip

    def __repr__(self) -> str:
        return f"Sge(addr={self.addr:#x}, length={self.length}, lkey={self.lkey:#x})"


class SgeLike(Protocol):
    """What a data segment is written from: a transport ``Sge``, or a verbs ``SGE`` as posted
    (read only)."""

    @property
    def addr(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def lkey(self) -> int: ...


class WorkOp(enum.IntEnum):
    """The operation of a send work request (IBA 10.8.2)."""

    SEND = 0
    SEND_WITH_IMM = 1
    SEND_WITH_INV = 2
    RDMA_WRITE = 3
    RDMA_WRITE_WITH_IMM = 4
    RDMA_READ = 5
    ATOMIC_CMP_AND_SWP = 6
    ATOMIC_FETCH_AND_ADD = 7


READS_AND_ATOMICS: Final = frozenset({WorkOp.RDMA_READ, WorkOp.ATOMIC_CMP_AND_SWP, WorkOp.ATOMIC_FETCH_AND_ADD})
ATOMICS: Final = frozenset({WorkOp.ATOMIC_CMP_AND_SWP, WorkOp.ATOMIC_FETCH_AND_ADD})


class UdDest(NamedTuple):
    """Where a UD send goes (the WQE's datagram segment): the destination GID, QPN and the
    Q_Key the WR names (its top bit set: the sending QP's own Q_Key, IBA 10.2.5)."""

    dgid: bytes
    dqpn: int
    qkey: int


class SendWork:
    """One send WQE. ``imm`` is the immediate as it goes on the wire (a big-endian u32) or the
    R_Key to invalidate; ``inline`` carries the bytes of an inline send (then ``sges`` is
    empty). ``swap_add``/``compare`` are the atomic operands; ``length`` is the message's.

    A class of fixed fields, not a NamedTuple: one is made for every WQE the engine fetches, and
    the compiled build makes a native class in ~60 ns where a NamedTuple takes ~300-450 (its
    ``tuple.__new__`` copies the fields out of a tuple made for it); interpreted, the two cost
    the same (docs/performance.md, "Records built per message")."""

    __slots__ = (
        "compare",
        "fence",
        "imm",
        "inline",
        "length",
        "op",
        "raddr",
        "rkey",
        "sges",
        "signaled",
        "solicited",
        "swap_add",
        "ud",
        "wqe_counter",
    )

    def __init__(self, wqe_counter: int, op: WorkOp, sges: tuple[Sge, ...] = (), signaled: bool = True,
                 solicited: bool = False, fence: bool = False, imm: int = 0, raddr: int = 0, rkey: int = 0,
                 swap_add: int = 0, compare: int = 0, inline: bytes | None = None, ud: UdDest | None = None) -> None:  # fmt: skip
        self.wqe_counter = wqe_counter
        self.op = op
        self.sges = sges
        self.signaled = signaled
        self.solicited = solicited
        self.fence = fence
        self.imm = imm
        self.raddr = raddr
        self.rkey = rkey
        self.swap_add = swap_add
        self.compare = compare
        self.inline = inline
        self.ud = ud
        # the message's length in bytes (8 for atomics, whatever their SGE says), counted once
        length = 0
        if op in ATOMICS:
            length = 8
        elif inline is not None:
            length = len(inline)
        else:
            for sge in sges:  # a loop, not sum() over a generator: no frame per message
                length += sge.length
        self.length = length


class RecvWork(NamedTuple):
    """One receive WQE: where an incoming SEND's bytes go."""

    wqe_counter: int
    sges: tuple[Sge, ...]


# Built once per WQE on the fast path: the tuples NamedTuple.__new__ would make, from all their
# fields, without its Python frame
new_recv_work: Final = functools.partial(tuple.__new__, RecvWork)
