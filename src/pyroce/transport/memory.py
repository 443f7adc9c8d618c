"""The memory-protection contract between the transport and whoever owns memory (the NIC).

IBA 10.6: every access names a key; the owner checks the key, the protection domain, the
access rights and the bounds, and only then hands out a view of exactly the bytes asked for.
The transport never forms an address: it writes into and reads from those views, so nothing
outside a registered region can be touched whatever a peer sends.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar


class MemFault(enum.Enum):
    """Why a memory access was refused."""

    BAD_KEY = "no MR or MW has this key"
    BAD_PD = "the MR belongs to another protection domain"
    ACCESS = "the MR does not grant this access"
    BOUNDS = "the range lies outside the MR"
    UNMAPPED = "the MR's memory is no longer mapped"  # another process's memory (the shared NIC's client)


Held = TypeVar("Held")


class MemoryTable(Generic[Held]):
    """What the transport asks of memory's owner, the base class of the owner's table
    (``pyroce.nic.memory.MrTable``). A class, not a protocol: the transport calls it per
    message, and compiled code calls a compiled base class's methods directly, where it looks
    a protocol's up by name and boxes every argument."""

    def __init__(self) -> None:
        # Ranges the owner writes back to memory it mirrors, while the transport holds their
        # views (by the owner's key, ``Held`` the owner's record of each): empty when none is
        # (memory the NIC addresses itself), and then ``placed`` has nothing to do.
        self.dirty: dict[int, Held] = {}

    def lookup(self, key: int, addr: int, length: int, access: int, pdn: int,
               placing: bool = False) -> memoryview | MemFault:  # fmt: skip
        """A writable view of ``length`` bytes at ``addr`` in the region named by ``key``, or
        the reason the access is refused. ``access``: the ``Access`` flags asked for, as a
        plain int (per packet: an ``IntFlag`` operator builds an enum member). ``length`` 0 is
        always allowed and touches nothing.
        ``placing``: the view is a message's destination (an RDMA WRITE's target, a receive
        buffer, a READ's or an atomic's local buffer), which the transport fills in order from
        its start and hands back with ``placed``: until then none of it need reach the memory
        (memory the NIC mirrors is written back only as far as ``placed`` says)."""
        raise NotImplementedError

    def placed(self, view: memoryview, length: int) -> bool:
        """The transport is done with a ``placing`` view: its first ``length`` bytes were
        placed. Before the ACK or the completion that says so, as a NIC's DMA lands before
        them; a view dropped without it (its message failed or was cut short) leaves the
        memory as it was. False if they could not reach the memory (mirrored memory its
        program unmapped, or a program gone, which ``lookup`` does not probe for a
        ``placing`` view): the message fails as one whose destination ``lookup`` refused."""
        raise NotImplementedError

    def placed_later(self, view: memoryview, length: int, refuse: Callable[[int], None], token: int) -> bool:
        """``placed``, for a message nothing completes where it lands (an RDMA WRITE without
        immediate, answered by an ACK alone): the bytes may go back with the others placed
        since, by ``push_placed``, which must come before the ACK leaves or anything else the
        responder takes; if they cannot, ``refuse(token)`` is called then (the message fails as
        ``placed``'s False fails it). False if it failed now."""
        return self.placed(view, length)

    def push_placed(self) -> None:
        """Write back what ``placed_later`` left, refusing the messages whose bytes could not."""

    def invalidate(self, key: int, qpn: int) -> MemFault | None:
        """Invalidate the memory window ``key`` bound by ``qpn`` (IBA 10.6.7.2.5), or say why not."""
        raise NotImplementedError
