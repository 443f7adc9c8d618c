"""The memory table's windows on their own: keys, binds and invalidation (rxe_mw.c's rules)."""

from __future__ import annotations

import pytest

from pyroce.ib.enums import Access
from pyroce.nic.memory import BindError, MrTable
from pyroce.transport.memory import MemFault

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.MW_BIND


def table_with_window(mw_type: int = 2) -> tuple[MrTable, int]:
    """A table holding a 4 KiB MR at 0x10000 and a window on its second KiB, bound by QP 7."""
    mrs = MrTable()
    region = mrs.register(1, memoryview(bytearray(4096)), 0x10000, RW)
    window = mrs.alloc_window(1, mw_type)
    mrs.bind(window, region, 0x10400, 1024, Access.REMOTE_WRITE, window.key + 1, 7)
    return mrs, window.key


def test_only_the_binding_qp_invalidates_a_type2_window() -> None:
    mrs, key = table_with_window()
    assert mrs.invalidate(key, 8) is MemFault.ACCESS
    assert mrs.invalidate(key ^ 0x80, 7) is MemFault.BAD_KEY
    assert mrs.invalidate(key, 7) is None
    assert mrs.lookup(key, 0x10400, 8, Access.REMOTE_WRITE, 1) is MemFault.BAD_KEY


def test_type1_windows_and_mrs_are_not_invalidated() -> None:
    mrs, key = table_with_window(1)
    assert mrs.invalidate(key, 7) is MemFault.ACCESS
    region_key = mrs.register(1, memoryview(bytearray(64)), 0, RW).key
    assert mrs.invalidate(region_key, 7) is MemFault.BAD_KEY


@pytest.mark.parametrize(("addr", "length", "access"), [
    (0x103FF, 8, Access.REMOTE_WRITE),
    (0x107FC, 8, Access.REMOTE_WRITE),
    (0x10400, 8, Access.REMOTE_READ),
])  # fmt: skip
def test_a_window_checks_its_own_range_and_access(addr: int, length: int, access: Access) -> None:
    mrs, key = table_with_window()
    assert isinstance(mrs.lookup(key, addr, length, access, 1), MemFault)


def test_a_window_views_exactly_its_bytes_of_the_mr() -> None:
    mrs, key = table_with_window()
    view = mrs.lookup(key, 0x10400, 1024, Access.REMOTE_WRITE, 1)
    assert isinstance(view, memoryview) and len(view) == 1024
    assert mrs.lookup(key, 0x10400, 8, Access.REMOTE_WRITE, 2) is MemFault.BAD_PD


def test_a_window_is_bound_only_inside_a_bindable_mr_of_its_pd() -> None:
    mrs = MrTable()
    plain = mrs.register(1, memoryview(bytearray(64)), 0, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    other_pd = mrs.register(2, memoryview(bytearray(64)), 0, RW)
    window = mrs.alloc_window(1, 1)
    for region in (plain, other_pd):
        with pytest.raises(BindError):
            mrs.bind(window, region, 0, 64, Access.REMOTE_WRITE, 0, 7)
