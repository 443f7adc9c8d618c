"""24-bit packet sequence number arithmetic (IBA 9.7.1), the only place PSN math lives.

``a`` is later than ``b`` when ``0 < (a - b) mod 2**24 < 2**23``: half the space is ahead of a
PSN and half behind it, as rxe's ``psn_compare`` treats it.
"""

from __future__ import annotations

from typing import Final

PSN_BITS: Final = 24
PSN_MASK: Final = (1 << PSN_BITS) - 1
PSN_HALF: Final = 1 << (PSN_BITS - 1)


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2**24 (``n`` may be negative)."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in the 24-bit window, in ``[-2**23, 2**23)``."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def psn_compare(a: int, b: int) -> int:
    """-1, 0 or 1 as ``a`` is before, equal to or after ``b``."""
    d = psn_diff(a, b)
    return (d > 0) - (d < 0)


def psn_in_window(psn: int, first: int, count: int) -> bool:
    """Whether ``psn`` lies in the ``count`` PSNs starting at ``first`` (wrap-aware)."""
    return ((psn - first) & PSN_MASK) < count


def psn_in_range(psn: int, first: int, end: int) -> bool:
    """Whether ``psn`` lies in ``[first, end)`` (wrap-aware; the range shorter than 2**23): one
    test where ``psn_diff(psn, first) >= 0 and psn_diff(psn, end) < 0`` takes two calls."""
    return ((psn - first) & PSN_MASK) < ((end - first) & PSN_MASK)
