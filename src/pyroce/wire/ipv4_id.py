"""Which IPv4 ID makes a received ICRC valid, for a receiver that cannot see the ID.

The ICRC covers the IPv4 Identification, and a UDP socket hands over the payload without the
IP header. Linux rxe counts its IDs up (27571, 27572, ...), the kernel gives the segments of
a GSO send the IDs 0, 1, 2, ...; only a peer that always sends ID 0 can be checked as if the
ID were 0. But CRC-32 is affine: the residue of a packet checked as if its ID were 0 differs
from the right one by ``M x``, where ``x`` is the real ID's 16 bits and ``M`` a 32 x 16 matrix
over GF(2) that depends only on the packet's length. So for an observed difference ``r``, four
table lookups give the one ``x`` that 16 of the equations allow, and two more check that the
other 16 hold too. Over a UDP socket, 16 of the ICRC's 32 bits therefore still check an IPv4
packet (a random corruption passes with probability 2**-16); IPv6, which has no ID, and a
raw link, which sees the header, check all 32.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Final

from pyroce.wire.icrc import Buffer, icrc_seed, seed_difference

ID_BITS: Final = 16
_MAX_SOLVERS: Final = 512  # distinct packet lengths kept; a flood of odd lengths clears the cache


class IdSolver:
    """Solves ``M x = r`` for one packet length: ``M``'s columns are how each ID bit moves
    the residue (``columns[i]`` for bit ``i``)."""

    __slots__ = ("_delta_hi", "_delta_lo", "_id0", "_id1", "_id2", "_id3")

    def __init__(self, columns: list[int]) -> None:
        # Reduced row echelon form over GF(2): each basis vector has a 1 at its own pivot bit
        # and 0 at every other pivot, with the ID bits that combine to it.
        basis: list[tuple[int, int, int]] = []  # (pivot bit, residue difference, ID bits)
        for bit, column in enumerate(columns):
            vector, ident = column, 1 << bit
            for pivot, other, other_ident in basis:
                if vector >> pivot & 1:
                    vector, ident = vector ^ other, ident ^ other_ident
            if not vector:
                continue  # this bit's effect is a sum of others' (not for CRC-32 and 16 bits)
            top = vector.bit_length() - 1
            basis = [(p, v ^ vector, i ^ ident) if v >> top & 1 else (p, v, i) for p, v, i in basis]
            basis.append((top, vector, ident))
        # r -> x is linear in r's pivot bits; x -> M x is linear in x: both become byte tables
        unit = [0] * 32
        for pivot, _, ident in basis:
            unit[pivot] = ident
        self._id0, self._id1, self._id2, self._id3 = (_table(unit[8 * byte : 8 * byte + 8], "H") for byte in range(4))
        self._delta_lo, self._delta_hi = (_table(columns[8 * byte : 8 * byte + 8], "I") for byte in range(2))

    def solve(self, difference: int) -> int | None:
        """The ID whose ICRC differs by ``difference`` from ID 0's, or None if no ID does."""
        ident = (self._id0[difference & 0xFF] ^ self._id1[difference >> 8 & 0xFF]
                 ^ self._id2[difference >> 16 & 0xFF] ^ self._id3[difference >> 24])  # fmt: skip
        return ident if self._delta_lo[ident & 0xFF] ^ self._delta_hi[ident >> 8] == difference else None


def _table(units: list[int], typecode: str) -> array:
    """The XOR of ``units[i]`` over the set bits i of each byte value."""
    table = array(typecode, [0]) * 256
    for value in range(1, 256):
        low = value & -value
        table[value] = table[value ^ low] ^ units[low.bit_length() - 1]
    return table


_solvers: Final[dict[int, IdSolver]] = {}


def id_solver(size: int, headers: Callable[[int, int], Buffer]) -> IdSolver:
    """The solver for ``size``-byte UDP payloads; ``headers(size, ident)`` gives the raw IPv4
    and UDP headers of such a datagram with that ID (any addresses: they cancel out)."""
    solver = _solvers.get(size)
    if solver is None:
        if len(_solvers) >= _MAX_SOLVERS:
            _solvers.clear()
        base = icrc_seed(headers(size, 0))
        columns = [seed_difference(icrc_seed(headers(size, 1 << bit)), base, size) for bit in range(ID_BITS)]
        solver = _solvers[size] = IdSolver(columns)
    return solver
