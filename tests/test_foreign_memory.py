"""MRs of another process's memory (the shared NIC's clients): a real child process maps memory,
this process registers it as foreign MRs on pyroce0 (``ForeignMemory``) and moves data into
and out of it with every operation, and the failures: memory that is not mapped at
registration (EFAULT), unmapped afterwards or the process killed (the operation fails with
REM_ACCESS_ERR or LOC_PROT_ERR; nothing crashes; counted as ``dma_errors``)."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pyroce.verbs.enums as e
from pyroce.ib.enums import Access
from pyroce.nic.memory import MrTable
from pyroce.nic.mirrored import MirroredMemory
from pyroce.nicd.process_memory import (
    BULK_BYTES,
    ForeignMemory,
    ProcessAccess,
    allow_tracer,
    page_starts,
    probe,
    process_vm_readv,
)
from pyroce.testing.plugin import use_embedded_nic
from pyroce.transport.memory import MemFault
from pyroce.transport.work import Sge
from pyroce.verbs.mr import MR
from pyroce.verbs.mw import MW, MWBind, MWBindInfo
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.rc_pair import ALL_ACCESS, Endpoint, connected_pair
from tests.waiting import spin_until

pytestmark = pytest.mark.embedded_nic  # the shared NIC's own side (its clients get EOPNOTSUPP)

S = e.ibv_wc_status
WR = e.ibv_wr_opcode
A = e.ibv_access_flags
CHILD = Path(__file__).with_name("foreign_child.py")
SIZE = 2 << 20  # the child's mapping
FILL = 0x5A  # what the child fills it with


class Child:
    """A client process: ``SIZE`` bytes mapped at ``address``, driven through stdin."""

    def __init__(self, size: int = SIZE) -> None:
        self.process = subprocess.Popen([sys.executable, str(CHILD), str(size)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.pid, self.address = map(int, self.process.stdout.readline().split())  # type: ignore[union-attr]
        self.size = size

    def ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return self.process.stdout.readline().strip()  # type: ignore[union-attr]

    def read(self, offset: int, length: int) -> bytes:
        return bytes.fromhex(self.ask(f"read {offset} {length}"))

    def fill(self, offset: int, length: int, byte: int) -> None:
        assert self.ask(f"fill {offset} {length} {byte}") == "ok"

    def unmap(self) -> None:
        assert self.ask("unmap") == "ok"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def child() -> Iterator[Child]:
    process = Child()
    yield process
    process.close()


@pytest.fixture(scope="module")
def shared_pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    with pytest.MonkeyPatch.context() as patch:  # set up before the marker's per-test fixture
        use_embedded_nic(patch)
        a, b = connected_pair()
    yield a, b
    a.close()
    b.close()


def foreign_mr(ep: Endpoint, child: Child, offset: int = 0, length: int = SIZE, access: int = ALL_ACCESS) -> MR:
    return MR(ep.pd, length, access, address=ForeignMemory(child.pid, child.address + offset, length))


def counted_calls(monkeypatch: pytest.MonkeyPatch, method: str) -> list[tuple[int, int]]:
    """Each (offset, length) ``ForeignMemory.<method>`` is called with from now on (still made)."""
    calls: list[tuple[int, int]] = []
    original = getattr(ForeignMemory, method)

    def counted(memory: ForeignMemory, offset: int, length: int) -> None:
        calls.append((offset, length))
        original(memory, offset, length)

    monkeypatch.setattr(ForeignMemory, method, counted)
    return calls


def dirty(ep: Endpoint) -> dict:
    return ep.ctx.device.engine.mrs.dirty  # type: ignore[no-any-return]


def dma_errors(ep: Endpoint) -> int:
    return ep.ctx.device.stats().get("dma_errors", 0)  # type: ignore[no-any-return]


def post(ep: Endpoint, opcode: int, sg: list[SGE], rkey: int = 0, raddr: int = 0, **fields: int) -> int:
    """Post one signaled WR and return its completion's status."""
    wr = SendWR(wr_id=9, opcode=opcode, sg=sg, **fields)
    if rkey:
        wr.set_wr_rdma(rkey, raddr)
    ep.qp.post_send(wr)
    (done,) = ep.poll()
    return int(done.status)


def atomic(ep: Endpoint, opcode: int, sg: SGE, rkey: int, raddr: int, compare_add: int, swap: int = 0) -> int:
    wr = SendWR(wr_id=10, opcode=opcode, sg=[sg])
    wr.set_wr_atomic(rkey, raddr, compare_add, swap)
    ep.qp.post_send(wr)
    (done,) = ep.poll()
    return int(done.status)


# --- the system calls ---------------------------------------------------------------------------


def test_the_process_file_moves_bytes_and_answers_efault() -> None:
    source = ctypes.create_string_buffer(b"0123456789abcdef", 16)
    target = bytearray(16)
    process = ProcessAccess(os.getpid())
    process.read_into(memoryview(target), ctypes.addressof(source))
    assert target == b"0123456789abcdef"
    process.write_from(memoryview(target)[:4], ctypes.addressof(source) + 4)
    assert source.raw[:8] == b"01230123"
    with pytest.raises(OSError) as failed:
        process.read_into(memoryview(target)[:4], 8)  # page 0 is never mapped
    assert failed.value.errno == errno.EFAULT
    with pytest.raises(OSError) as failed:
        process.write_from(memoryview(target)[:4], 8)
    assert failed.value.errno == errno.EFAULT


@pytest.mark.parametrize("pages", [2, 8])  # through /proc/<pid>/mem; past BULK_BYTES, process_vm_readv
def test_a_partial_transfer_is_resumed_and_its_fault_raised(pages: int) -> None:
    """A range whose last page is not mapped: the pages before it arrive, then EFAULT."""
    size = pages * mmap.PAGESIZE
    area = mmap.mmap(-1, size)
    area[:] = b"\x11" * (size - mmap.PAGESIZE) + b"\x22" * mmap.PAGESIZE
    holder = (ctypes.c_char * size).from_buffer(area)
    base = ctypes.addressof(holder)
    hole = base + size - mmap.PAGESIZE
    libc = ctypes.CDLL(None)
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    target = ctypes.create_string_buffer(mmap.PAGESIZE + 8)
    try:
        assert libc.munmap(hole, mmap.PAGESIZE) == 0
        moved = process_vm_readv(os.getpid(), [(ctypes.addressof(target), mmap.PAGESIZE + 8)],
                                 [(hole - 8, mmap.PAGESIZE + 8)])  # fmt: skip
        assert moved == 8  # the kernel's partial transfer: up to the fault
        landed = bytearray(size)
        assert (len(landed) >= BULK_BYTES) == (pages == 8)
        with pytest.raises(OSError) as failed:
            ProcessAccess(os.getpid()).read_into(memoryview(landed), base)
        assert failed.value.errno == errno.EFAULT
        assert landed[: size - mmap.PAGESIZE] == b"\x11" * (size - mmap.PAGESIZE)
        with pytest.raises(OSError) as failed:
            ProcessAccess(os.getpid()).write_from(memoryview(landed), base)
        assert failed.value.errno == errno.EFAULT
        with pytest.raises(OSError):
            probe(os.getpid(), base, size)
        probe(os.getpid(), base + 5, mmap.PAGESIZE - 5)
    finally:
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]  # fmt: skip
        # the hole back (MAP_FIXED), so the mmap object unmaps what it mapped
        libc.mmap(hole, mmap.PAGESIZE, 3, 0x32, -1, 0)
        del holder
        area.close()


def test_ranges_go_back_in_one_call_and_one_that_faults_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ForeignMemory.push_ranges``: ranges far apart in one ``process_vm_writev``; the call
    stops at a page made read-only, which ``push`` writes alone through the file (as a DMA into
    a pinned page), and at an unmapped one, which fails alone; it goes on after each."""
    page = mmap.PAGESIZE
    area = mmap.mmap(-1, 4 * page, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # as a program's heap
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))  # (the export ends with the temporary)
    libc = ctypes.CDLL(None)
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    memory = ForeignMemory(os.getpid(), base, 4 * page)
    alone = counted_calls(monkeypatch, "push")
    try:
        assert libc.mprotect(base + page, page, 1) == 0  # PROT_READ
        assert libc.munmap(base + 2 * page, page) == 0
        ranges = [(at * page + 10, 2) for at in range(4)]
        for offset, _ in ranges:
            memory.mirror[offset : offset + 2] = b"ok"
        assert memory.push_ranges(ranges) == [2]
        assert alone == [(page + 10, 2), (2 * page + 10, 2)]
        assert area[10:12] == area[page + 10 : page + 12] == area[3 * page + 10 : 3 * page + 12] == b"ok"
    finally:
        libc.mprotect(base + page, page, 3)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]  # fmt: skip
        libc.mmap(base + 2 * page, page, 3, 0x32, -1, 0)  # the hole back (MAP_FIXED)
        memory.close()
        area.close()


def test_page_starts() -> None:
    page = mmap.PAGESIZE
    assert page_starts(page * 10 + 5, 1) == [page * 10 + 5]
    assert page_starts(page * 10 + 5, page) == [page * 10 + 5, page * 11]
    assert page_starts(page * 10, 3 * page) == [page * 10, page * 11, page * 12]
    assert page_starts(page, 0) == []


def test_allow_tracer_answers() -> None:
    """prctl(PR_SET_PTRACER): True with Yama, False without; either way no error."""
    assert allow_tracer(os.getpid()) in (True, False)


# --- the memory table, with memory that is a bytearray standing for another process's ----------


class FakeMemory(MirroredMemory):
    """"Another process's" memory: ``remote``; ``gone`` makes every access fail as an unmapped one."""

    def __init__(self, length: int) -> None:
        self.address, self.length = 0x10000, length
        self.remote = bytearray(b"r" * length)
        self.mirror = mmap.mmap(-1, length)
        self.gone = False
        self.pulls: list[tuple[int, int]] = []
        self.pushes: list[tuple[int, int]] = []

    def _check(self) -> None:
        if self.gone:
            raise OSError(errno.EFAULT, "gone")

    def probe(self, offset: int, length: int, writable: bool) -> None:
        self._check()

    def pull(self, offset: int, length: int) -> None:
        self._check()
        self.pulls.append((offset, length))
        self.mirror[offset : offset + length] = self.remote[offset : offset + length]

    def push(self, offset: int, length: int) -> None:
        self._check()
        self.pushes.append((offset, length))
        self.remote[offset : offset + length] = self.mirror[offset : offset + length]

    def read(self, offset: int, length: int) -> bytes:
        self._check()
        return bytes(self.remote[offset : offset + length])

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._check()
        self.remote[offset : offset + len(data)] = data


def table_with(memory: FakeMemory) -> tuple[MrTable, int]:
    table = MrTable()
    region = table.register(1, memoryview(memory.mirror)[: memory.length], memory.address, Access(15), memory)
    return table, region.key


def test_a_read_pulls_and_leaves_nothing_dirty() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    memory.remote[100:104] = b"abcd"
    view = table.lookup(key, memory.address + 100, 4, Access.REMOTE_READ, 1)
    assert bytes(view) == b"abcd" and not table.dirty  # type: ignore[arg-type]
    del view
    assert memory.pushes == []


def test_a_write_pushes_the_bytes_it_changed_when_its_last_view_goes() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address + 4000, 300, Access.LOCAL_WRITE, 1)
    assert isinstance(view, memoryview) and len(view) == 300 and len(table.dirty) == 1
    part = view[10:20]
    part[:] = b"x" * 10
    del view
    assert memory.pushes == [] and memory.remote[4010:4020] == b"r" * 10  # a slice still holds it
    del part
    assert memory.pushes == [(4010, 10)] and not table.dirty
    assert memory.remote[4000:4300] == b"r" * 10 + b"x" * 10 + b"r" * 280


def test_a_destination_goes_back_as_far_as_placed_and_only_then() -> None:
    """A message's destination (a WRITE's target here) is filled from its start: nothing of it
    is pulled (a memory gone shows when it is placed), nothing goes back before ``placed`` (a
    flush mid-message, its view dropped) and then exactly what it names, once; the program's
    bytes past it stay."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address + 1000, 4096, Access.REMOTE_WRITE, 1, placing=True)
    assert isinstance(view, memoryview) and memory.pulls == []
    view[:2048] = b"w" * 2048
    table.flush()  # the end of an engine pass with the message still open
    assert memory.pushes == [] and memory.remote[1000:1002] == b"rr"
    memory.remote[4000:4004] = b"mine"  # the program's, past what the WRITE placed
    assert table.placed(view, 2048)
    assert memory.pushes == [(1000, 2048)] and not table.dirty
    del view
    assert memory.pushes == [(1000, 2048)]
    assert memory.remote[1000:3048] == b"w" * 2048 and memory.remote[4000:4004] == b"mine"


def test_placing_is_for_a_range_that_may_be_written_only() -> None:
    """``placing`` asked with an access that only reads (no caller's case, but the rule is the
    table's): the range is pulled whole and nothing of it is dirty."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    memory.remote[500:504] = b"data"
    view = table.lookup(key, memory.address + 500, 4, Access.REMOTE_READ, 1, placing=True)
    assert isinstance(view, memoryview) and bytes(view) == b"data"
    assert memory.pulls == [(500, 4)] and not table.dirty


def test_a_destination_never_placed_writes_nothing_back() -> None:
    """An abandoned message (an error, a QP reset): its view goes without ``placed``."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address, 64, Access.LOCAL_WRITE, 1, placing=True)
    view[:8] = b"halfway!"  # type: ignore[index]
    del view
    assert memory.pushes == [] and not table.dirty and memory.remote[:8] == b"r" * 8


def test_placed_leaves_ordinary_memory_alone() -> None:
    table = MrTable()
    region = table.register(1, memoryview(bytearray(64)), 0x1000, Access(15))
    view = table.lookup(region.key, 0x1000, 64, Access.REMOTE_WRITE, 1, placing=True)
    assert isinstance(view, memoryview)
    table.placed(view, 64)
    assert not table.dirty


def test_a_push_leaves_the_bytes_the_nic_did_not_write_to_the_program() -> None:
    """A receive buffer is looked up whole, but a short message writes its start only: the
    program's bytes past it, written after the pull, stay (as UCX keeps the next descriptor's
    header in the last bytes of a posted receive buffer: pushed whole, its list link went back to
    an old value and ucp_tag_recv_nbx crashed)."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address + 1024, 4096, Access.LOCAL_WRITE, 1)
    assert isinstance(view, memoryview)
    memory.remote[1024 + 4096 - 11 : 1024 + 4096] = b"descriptor!"  # the program's, meanwhile
    view[:31] = b"m" * 31
    table.flush()  # before the CQE
    assert memory.pushes == [(1024, 31)]
    view[31:40] = b"m" * 9  # more of it arrives: only that goes
    del view
    assert memory.pushes == [(1024, 31), (1055, 9)]
    assert memory.remote[1024:1064] == b"m" * 40 and memory.remote[1024 + 4085 : 1024 + 4096] == b"descriptor!"


def test_flush_pushes_what_is_still_held_and_an_overlapping_pull_sees_it() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address, 64, Access.LOCAL_WRITE, 1)
    view[:4] = b"NEW!"  # type: ignore[index]
    table.flush()
    assert memory.remote[:4] == b"NEW!" and len(table.dirty) == 1
    view[4:8] = b"more"  # type: ignore[index]
    # A second lookup over the same bytes pulls them: the NIC's bytes go out first, not lost
    again = table.lookup(key, memory.address + 2, 8, Access.REMOTE_READ, 1)
    assert bytes(again) == b"W!more" + b"rr"  # type: ignore[arg-type]


def test_an_overlapping_pull_is_no_change_of_the_nic_to_push_later() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address, 64, Access.LOCAL_WRITE, 1)
    view[:4] = b"NEW!"  # type: ignore[index]
    memory.remote[36] = ord("Z")  # the program's, before the next pull
    again = table.lookup(key, memory.address + 32, 16, Access.REMOTE_READ, 1)
    assert bytes(again)[4] == ord("Z")  # type: ignore[arg-type]
    memory.remote[36] = ord("Y")  # and after it
    del view
    assert memory.remote[:4] == b"NEW!" and memory.remote[36] == ord("Y")


def test_a_failed_pull_is_unmapped_and_a_failed_push_is_counted() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address, 64, Access.REMOTE_ATOMIC, 1)
    view[:8] = bytes(8)  # type: ignore[index]  # an atomic's result
    memory.gone = True
    del view  # the push fails: counted, not raised
    assert table.counters["dma_errors"] == 1
    assert table.lookup(key, memory.address, 8, Access.REMOTE_READ, 1) is MemFault.UNMAPPED
    assert table.counters["dma_errors"] == 2
    assert table.lookup(key, memory.address, 0, Access.REMOTE_READ, 1) is not MemFault.UNMAPPED  # touches nothing


def test_deregistering_drops_dirty_ranges_and_the_mirror() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    view = table.lookup(key, memory.address, 64, Access.REMOTE_WRITE, 1)
    region = table.region(key)
    assert region is not None
    region.view.release()
    table.deregister(region)
    assert not table.dirty and not memory.mirror.closed  # the transport still holds a view of it
    del view
    assert memory.pushes == []  # the mirror goes with its last reference
    view = table.lookup(key, memory.address, 64, Access.REMOTE_WRITE, 1)
    assert view is MemFault.BAD_KEY


def test_deregistering_closes_a_mirror_nothing_holds() -> None:
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    region = table.region(key)
    assert region is not None
    region.view.release()
    table.deregister(region)
    assert memory.mirror.closed


def test_ordinary_regions_never_touch_the_dirty_table() -> None:
    table = MrTable()
    region = table.register(1, memoryview(bytearray(64)), 0x1000, Access(15))
    view = table.lookup(region.key, 0x1000, 64, Access.REMOTE_WRITE, 1)
    assert type(view) is memoryview and view.obj is not None and not table.dirty  # type: ignore[union-attr]


def sources(key: int, memory: FakeMemory, *offsets: int, length: int = 2) -> list[Sge]:
    return [Sge(memory.address + offset, length, key) for offset in offsets]


def test_a_fetchs_sources_lying_close_are_pulled_as_one_span() -> None:
    """``prefetch``: the sources of the sends one fetch took (2-byte WRITEs a cache line apart,
    as perftest posts them) are one pull; their lookups in the pass pull nothing more, and read
    the program's bytes; after the pass (``fresh`` emptied) a lookup pulls again."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    memory.remote[100:102], memory.remote[164:166], memory.remote[228:230] = b"ab", b"cd", b"ef"
    table.prefetch(sources(key, memory, 100, 164, 228))
    assert memory.pulls == [(100, 130)]
    read = [bytes(table.lookup(key, memory.address + at, 2, 0, 1)) for at in (100, 164, 228)]  # type: ignore[arg-type]
    assert read == [b"ab", b"cd", b"ef"] and memory.pulls == [(100, 130)] and not table.dirty
    table.fresh.clear()  # the engine's pass ended
    memory.remote[100:102] = b"zz"
    assert bytes(table.lookup(key, memory.address + 100, 2, 0, 1)) == b"zz"  # type: ignore[arg-type]
    assert memory.pulls == [(100, 130), (100, 2)]


def test_sources_far_apart_or_alone_are_pulled_each_by_its_lookup() -> None:
    """A span wider than a page that its sources fill less than half of, or a source alone, is
    not prefetched: each lookup pulls its own bytes, as without a prefetch."""
    memory = FakeMemory(1 << 20)
    table, key = table_with(memory)
    table.prefetch(sources(key, memory, 0, 500000, length=64))
    table.prefetch(sources(key, memory, 4096))
    assert memory.pulls == [] and not table.fresh
    table.lookup(key, memory.address + 500000, 64, 0, 1)
    assert memory.pulls == [(500000, 64)]
    table.prefetch(sources(key, memory, 0, 8192, 16384, length=8192))  # dense: 24 KiB of 24
    assert memory.pulls[1:] == [(0, 24576)]


def test_no_prefetch_over_bytes_the_nic_has_not_pushed_back() -> None:
    """A message's destination placed in the mirror and not yet pushed lies between two sources:
    a span pulled over it would put the program's old bytes over the NIC's, so none is."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    destination = table.lookup(key, memory.address + 150, 16, Access.REMOTE_WRITE, 1, placing=True)
    destination[:16] = b"placed by the NIC"[:16]  # type: ignore[index]
    table.prefetch(sources(key, memory, 100, 200))
    assert memory.pulls == [] and not table.fresh
    assert bytes(memory.mirror[150:166]) == b"placed by the NIC"[:16]
    assert table.placed(destination, 16)  # type: ignore[arg-type]
    assert memory.remote[150:166] == b"placed by the NIC"[:16]


def test_a_prefetch_that_faults_leaves_each_lookup_to_fail() -> None:
    """Memory gone: the span's pull fails quietly (nothing counted), and each lookup fails as
    it would have (UNMAPPED, counted): the WQE that named it completes in error."""
    memory = FakeMemory(8192)
    table, key = table_with(memory)
    memory.gone = True
    table.prefetch(sources(key, memory, 0, 64))
    assert not table.fresh and table.counters["dma_errors"] == 0
    assert table.lookup(key, memory.address, 2, 0, 1) is MemFault.UNMAPPED
    assert table.counters["dma_errors"] == 1


def test_sends_posted_together_from_foreign_memory(shared_pair: tuple[Endpoint, Endpoint], child: Child,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """WRITEs from a client's memory posted as one list (one fetch: their sources one pull)
    each carry their own bytes, as do those posted after the client wrote new ones."""
    a, b = shared_pair
    mr = foreign_mr(a, child)
    pulls = counted_calls(monkeypatch, "pull")
    for round_ in range(2):
        data = [os.urandom(2) for _ in range(16)]
        for index, value in enumerate(data):
            mr.write(value, 2, index * 64)
        wr = None
        for index in reversed(range(16)):
            wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(mr.buf + index * 64, 2, mr.lkey)], next_wr=wr,
                        send_flags=e.ibv_send_flags.IBV_SEND_SIGNALED if index == 15 else 0)  # fmt: skip
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 4096 * round_ + index * 2)
        a.qp.post_send(wr)
        (done,) = a.poll()
        assert done.status == S.IBV_WC_SUCCESS
        assert b.mr.read(32, 4096 * round_) == b"".join(data)
    assert [length for _, length in pulls] == [15 * 64 + 2] * 2  # each list's sources in one span
    assert not a.ctx.device.engine.mrs.fresh
    mr.close()


def write_list(targets: list[tuple[int, int]], source: Endpoint, length: int = 2) -> SendWR:
    """One chained list of signaled RDMA WRITEs of ``length`` bytes from ``source``'s MR, the
    ``index``-th from ``index * length`` to each (rkey, address) of ``targets``."""
    wr = None
    for index in reversed(range(len(targets))):
        rkey, address = targets[index]
        wr = SendWR(wr_id=index, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(source.mr.buf + index * length, length,
                    source.mr.lkey)], next_wr=wr)  # fmt: skip
        wr.set_wr_rdma(rkey, address)
    assert wr is not None
    return wr


def test_writes_placed_together_are_pushed_together(shared_pair: tuple[Endpoint, Endpoint], child: Child,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """RDMA WRITEs into a client's memory that one pass takes go back in one push where their
    ranges touch or overlap (16 to one address, as ``ib_write_bw`` writes; 16 one after the
    other, as a ring fills), each in place before its ACK: every one completes with its bytes
    there. They cost a push each, ~a third of the shared NIC's engine under ``ib_write_bw -s 2``."""
    a, b = shared_pair
    mr = foreign_mr(b, child)
    pushes = counted_calls(monkeypatch, "push")
    for step in (0, 2):  # one address, then each WRITE just after the one before
        data = os.urandom(32)
        a.mr.write(data, 32)
        pushes.clear()
        a.qp.post_send(write_list([(mr.rkey, mr.buf + 4096 + index * step) for index in range(16)], a))
        assert [wc.status for wc in a.poll(16)] == [S.IBV_WC_SUCCESS] * 16
        if step:
            assert child.read(4096, 32) == data
        else:
            assert child.read(4096, 2) == data[30:]  # the last WRITE's bytes
        assert pushes == [(4096, 2 + 15 * step)]
    assert not dirty(b) and not b.ctx.device.engine.mrs.unpushed
    mr.close()


@pytest.mark.parametrize("last", ["write", "send"])
def test_a_write_whose_push_fails_later_is_the_one_refused(child: Child, last: str) -> None:
    """WRITEs placed in one pass whose push comes after the responder went on: the one whose
    memory went is refused (REM_ACCESS_ERR) and no ACK of the WRITEs after it leaves (they
    flush); those before it complete, their bytes in place. A SEND after it is not taken (its
    receive flushes): the responder pushes what it placed before it takes anything but a WRITE."""
    a, b = pair = connected_pair()
    gone = Child(65536)
    try:
        kept = foreign_mr(b, child, 0, 65536)
        lost = foreign_mr(b, gone, 0, 65536)
        gone.unmap()
        a.mr.write(b"abcdefgh", 8)
        b.qp.post_recv(RecvWR(wr_id=7, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
        wr = write_list([(kept.rkey, kept.buf), (kept.rkey, kept.buf + 2), (lost.rkey, lost.buf),
                         (kept.rkey, kept.buf + 4)], a)  # fmt: skip
        if last == "send":
            wr.next_wr.next_wr.next_wr = SendWR(wr_id=3, sg=[SGE(a.mr.buf, 2, a.mr.lkey)])
        a.qp.post_send(wr)
        statuses = [wc.status for wc in sorted(a.poll(4), key=lambda wc: wc.wr_id)]
        assert statuses == [S.IBV_WC_SUCCESS, S.IBV_WC_SUCCESS, S.IBV_WC_REM_ACCESS_ERR, S.IBV_WC_WR_FLUSH_ERR]
        assert child.read(0, 4) == b"abcd"
        (received,) = b.poll()
        assert received.wr_id == 7 and received.status == S.IBV_WC_WR_FLUSH_ERR
        assert not b.ctx.device.engine.mrs.unpushed
        kept.close()
        lost.close()
    finally:
        gone.close()
        for ep in pair:
            ep.close()


# --- registration ---------------------------------------------------------------------------------


def test_registration_reads_nothing_but_probes_every_page(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    _, b = shared_pair
    mr = foreign_mr(b, child, 4096, 8192)
    assert mr.buf == child.address + 4096 and mr.length == 8192
    assert mr.read(4, 0) == bytes([FILL]) * 4
    mr.write(b"from the NIC", 12, 100)
    assert child.read(4096 + 98, 16) == bytes([FILL]) * 2 + b"from the NIC" + bytes([FILL]) * 2
    mr.close()


def test_registering_unmapped_memory_is_efault(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    _, b = shared_pair
    with pytest.raises(PyverbsRDMAError) as failed:
        MR(b.pd, 4096, ALL_ACCESS, address=ForeignMemory(child.pid, 4096, 4096))
    assert failed.value.error_code == errno.EFAULT
    # past the end of the child's mapping: the last page is not mapped
    with pytest.raises(PyverbsRDMAError) as failed:
        MR(b.pd, 8192, ALL_ACCESS, address=ForeignMemory(child.pid, child.address + SIZE - 4096, 8192))
    assert failed.value.error_code == errno.EFAULT
    child.unmap()
    with pytest.raises(PyverbsRDMAError) as failed:
        foreign_mr(b, child, 0, 64)
    assert failed.value.error_code == errno.EFAULT


def test_read_only_memory_registers_only_without_local_write(shared_pair: tuple[Endpoint, Endpoint],
                                                           child: Child) -> None:  # fmt: skip
    _, b = shared_pair
    assert child.ask("protect") == "ok"
    with pytest.raises(PyverbsRDMAError) as failed:
        foreign_mr(b, child, 0, 4096)
    assert failed.value.error_code == errno.EFAULT
    mr = foreign_mr(b, child, 0, 4096, A.IBV_ACCESS_REMOTE_READ)
    mr.close()


def test_a_gone_process_is_not_registered(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    _, b = shared_pair
    pid, address = child.pid, child.address
    child.kill()
    with pytest.raises(PyverbsRDMAError) as failed:
        MR(b.pd, 64, ALL_ACCESS, address=ForeignMemory(pid, address, 64))
    assert failed.value.error_code == errno.ESRCH


# --- the operations -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 1000, 4096, 64 << 10, 1 << 20])
def test_rdma_write_into_a_foreign_mr(shared_pair: tuple[Endpoint, Endpoint], child: Child, size: int) -> None:
    a, b = shared_pair
    mr = foreign_mr(b, child)
    data = os.urandom(size)
    a.mr.write(data, size)
    at = 4096 + 3
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, size, a.mr.lkey)], mr.rkey, mr.buf + at) == S.IBV_WC_SUCCESS
    assert child.read(at, size) == data
    assert child.read(at - 3, 3) == child.read(at + size, 3) == bytes([FILL]) * 3
    assert not dirty(b)  # the views went with their operation, and their bytes with them
    mr.close()


def test_rdma_write_with_immediate_is_in_memory_before_its_completion(shared_pair: tuple[Endpoint, Endpoint],
                                                                      child: Child) -> None:  # fmt: skip
    a, b = shared_pair
    mr = foreign_mr(b, child)
    data = os.urandom(20000)
    a.mr.write(data, len(data))
    b.qp.post_recv(RecvWR(wr_id=1, sg=[]))
    status = post(a, WR.IBV_WR_RDMA_WRITE_WITH_IMM, [SGE(a.mr.buf, len(data), a.mr.lkey)], mr.rkey, mr.buf,
                  imm_data=7)  # fmt: skip
    assert status == S.IBV_WC_SUCCESS
    (recv,) = b.poll()
    assert recv.status == S.IBV_WC_SUCCESS and child.read(0, len(data)) == data
    mr.close()


@pytest.mark.parametrize("size", [8, 5000, 1 << 20])
def test_rdma_read_out_of_a_foreign_mr(shared_pair: tuple[Endpoint, Endpoint], child: Child, size: int) -> None:
    a, b = shared_pair
    mr = foreign_mr(b, child)
    data = os.urandom(size)
    child.fill(0, size, 0)
    mr.write(data, size, 64)
    assert post(a, WR.IBV_WR_RDMA_READ, [SGE(a.mr.buf, size, a.mr.lkey)], mr.rkey, mr.buf + 64) == S.IBV_WC_SUCCESS
    assert a.mr.read(size, 0) == data
    mr.close()


def test_a_foreign_mr_on_the_requester_side(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    """The client's memory as the local buffers of a WRITE (read), a READ (written) and an atomic's result."""
    a, b = shared_pair
    mr = foreign_mr(a, child)
    out = os.urandom(30000)
    mr.write(out, len(out))
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(mr.buf, len(out), mr.lkey)], b.mr.rkey, b.mr.buf) == S.IBV_WC_SUCCESS
    assert b.mr.read(len(out), 0) == out
    back = os.urandom(30000)
    b.mr.write(back, len(back))
    sg = [SGE(mr.buf + 100000, 10000, mr.lkey), SGE(mr.buf + 200000, 20000, mr.lkey)]
    assert post(a, WR.IBV_WR_RDMA_READ, sg, b.mr.rkey, b.mr.buf) == S.IBV_WC_SUCCESS
    assert child.read(100000, 10000) == back[:10000] and child.read(200000, 20000) == back[10000:]
    assert child.read(100000 + 10000, 4) == bytes([FILL]) * 4
    b.mr.write(struct.pack("=Q", 41), 8, 8)
    status = atomic(a, WR.IBV_WR_ATOMIC_FETCH_AND_ADD, SGE(mr.buf + 512, 8, mr.lkey), b.mr.rkey, b.mr.buf + 8, 1)
    assert status == S.IBV_WC_SUCCESS
    assert struct.unpack("=Q", child.read(512, 8)) == (41,) and struct.unpack("=Q", b.mr.read(8, 8)) == (42,)
    assert not dirty(a)
    mr.close()


def test_send_into_a_foreign_receive_buffer(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    a, b = shared_pair
    mr = foreign_mr(b, child)
    data = os.urandom(3000)
    a.mr.write(data, len(data))
    b.qp.post_recv(RecvWR(wr_id=2, sg=[SGE(mr.buf + 10, 1000, mr.lkey), SGE(mr.buf + 5000, 4000, mr.lkey)]))
    assert post(a, WR.IBV_WR_SEND, [SGE(a.mr.buf, len(data), a.mr.lkey)]) == S.IBV_WC_SUCCESS
    (recv,) = b.poll()
    assert recv.status == S.IBV_WC_SUCCESS and recv.byte_len == 3000
    assert child.read(10, 1000) == data[:1000] and child.read(5000, 2000) == data[1000:]
    # the rest of the receive buffer, and what is around it, keep their bytes
    assert child.read(5000 + 2000, 2000) == bytes([FILL]) * 2000
    assert child.read(0, 10) == child.read(1010, 10) == bytes([FILL]) * 10
    assert not dirty(b)
    mr.close()


def test_inline_data_and_a_send_from_foreign_memory(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    a, b = shared_pair
    mr = foreign_mr(a, child)
    mr.write(b"inline bytes from the client", 28, 300)
    b.qp.post_recv(RecvWR(wr_id=3, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    status = post(a, WR.IBV_WR_SEND, [SGE(mr.buf + 300, 28, mr.lkey)],
                  send_flags=e.ibv_send_flags.IBV_SEND_SIGNALED | e.ibv_send_flags.IBV_SEND_INLINE)  # fmt: skip
    assert status == S.IBV_WC_SUCCESS
    (recv,) = b.poll()
    assert recv.byte_len == 28 and b.mr.read(28, 0) == b"inline bytes from the client"
    b.qp.post_recv(RecvWR(wr_id=4, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    assert post(a, WR.IBV_WR_SEND, [SGE(mr.buf + 300, 28, mr.lkey)]) == S.IBV_WC_SUCCESS
    (recv,) = b.poll()
    assert recv.byte_len == 28 and b.mr.read(28, 0) == b"inline bytes from the client"
    mr.close()


def test_atomics_on_a_foreign_mr(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    a, b = shared_pair
    mr = foreign_mr(b, child)
    mr.write(struct.pack("=Q", 1000), 8, 64)
    result = SGE(a.mr.buf, 8, a.mr.lkey)
    assert atomic(a, WR.IBV_WR_ATOMIC_FETCH_AND_ADD, result, mr.rkey, mr.buf + 64, 5) == S.IBV_WC_SUCCESS
    assert struct.unpack("=Q", a.mr.read(8, 0)) == (1000,) and struct.unpack("=Q", child.read(64, 8)) == (1005,)
    assert atomic(a, WR.IBV_WR_ATOMIC_CMP_AND_SWP, result, mr.rkey, mr.buf + 64, 1005, 77) == S.IBV_WC_SUCCESS
    assert struct.unpack("=Q", child.read(64, 8)) == (77,)
    assert atomic(a, WR.IBV_WR_ATOMIC_CMP_AND_SWP, result, mr.rkey, mr.buf + 64, 1005, 99) == S.IBV_WC_SUCCESS
    assert struct.unpack("=Q", a.mr.read(8, 0)) == (77,) and struct.unpack("=Q", child.read(64, 8)) == (77,)
    assert child.read(56, 8) == child.read(72, 8) == bytes([FILL]) * 8
    assert not dirty(b)
    mr.close()


def test_a_window_over_a_foreign_mr(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    a, b = shared_pair
    mr = foreign_mr(b, child, 0, 65536, ALL_ACCESS | A.IBV_ACCESS_MW_BIND)
    mw = MW(b.pd, e.ibv_mw_type.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf + 4096, 4096, A.IBV_ACCESS_REMOTE_WRITE),
                            e.ibv_send_flags.IBV_SEND_SIGNALED))  # fmt: skip
    a.mr.write(b"through a window", 16)
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 16, a.mr.lkey)], mw.rkey, mr.buf + 4100) == S.IBV_WC_SUCCESS
    assert child.read(4100, 16) == b"through a window"
    mw.close()
    mr.close()


def test_ud_datagrams_from_and_into_foreign_memory(child: Child) -> None:
    from tests.test_ud_datapath import ah_to, ud_endpoint

    a, b = ud_endpoint(), ud_endpoint()
    try:
        source, target = foreign_mr(a, child, 0, 4096), foreign_mr(b, child, 65536, 8192)
        source.write(b"a datagram", 10)
        b.qp.post_recv(RecvWR(wr_id=6, sg=[SGE(target.buf + 100, 1000, target.lkey)]))
        wr = SendWR(wr_id=7, opcode=WR.IBV_WR_SEND, sg=[SGE(source.buf, 10, source.lkey)])
        wr.set_wr_ud(ah_to(a, b.info().gid), b.qp.qp_num, 0x11111111)
        a.qp.post_send(wr)
        assert [wc.status for wc in a.poll()] == [S.IBV_WC_SUCCESS]
        (recv,) = b.poll()
        assert recv.status == S.IBV_WC_SUCCESS and recv.byte_len == 40 + 10
        assert child.read(65536 + 100 + 40, 12) == b"a datagram" + bytes([FILL]) * 2
        assert child.read(65536 + 96, 4) == bytes([FILL]) * 4
        assert not dirty(b)
    finally:
        a.close()
        b.close()


def test_rereg_moves_an_mr_into_and_out_of_foreign_memory(shared_pair: tuple[Endpoint, Endpoint],
                                                          child: Child) -> None:  # fmt: skip
    a, b = shared_pair
    mr = MR(b.pd, 4096, ALL_ACCESS)
    rkey = mr.rkey
    memory = ForeignMemory(child.pid, child.address + 8192, 4096)
    mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, addr=memory, length=4096)
    assert (mr.rkey, mr.buf) == (rkey, child.address + 8192)
    a.mr.write(b"rereg'd", 7)
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 7, a.mr.lkey)], rkey, mr.buf + 1) == S.IBV_WC_SUCCESS
    assert child.read(8192, 9) == bytes([FILL]) + b"rereg'd" + bytes([FILL])
    mr.rereg(e.ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION, addr=bytearray(64), length=64)
    assert memory.mirror.closed
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 7, a.mr.lkey)], rkey, mr.buf) == S.IBV_WC_SUCCESS
    assert mr.read(7, 0) == b"rereg'd"
    mr.close()


def test_the_engine_pushes_what_is_held_before_a_cqe_and_after_a_pass(shared_pair: tuple[Endpoint, Endpoint],
                                                                     child: Child) -> None:  # fmt: skip
    """A range the NIC holds (as a multi-packet message holds its target): pushed before any CQE
    of the device is written, and at the end of a pass that writes none."""
    a, b = shared_pair
    mr = foreign_mr(b, child, 0, 65536)
    device = b.ctx.device
    with device._lock:
        view = device.engine.mrs.lookup(mr.lkey, mr.buf + 8, 8, Access.LOCAL_WRITE, b.pd.pdn)
        assert isinstance(view, memoryview)
        view[:] = b"before Q"
    a.mr.write(b"x", 1)
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 1, a.mr.lkey)], b.mr.rkey, b.mr.buf) == S.IBV_WC_SUCCESS
    assert child.read(8, 8) == b"before Q"
    with device._lock:
        view[:] = b"a pass.."
    wr = SendWR(wr_id=11, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 1, a.mr.lkey)], send_flags=0)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)  # unsignaled: no CQE anywhere, only passes
    spin_until(lambda: child.read(8, 8) == b"a pass..", "the end of a pass to push the held range",
               lambda: a.cq.poll(1))  # fmt: skip
    with device._lock:
        view[:] = b"dropped!"
        del view  # the last view: pushed now
        assert not device.engine.mrs.dirty
    assert child.read(8, 8) == b"dropped!"
    mr.close()


def test_deregistration_drops_the_mirror(shared_pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    a, b = shared_pair
    memory = ForeignMemory(child.pid, child.address, 65536)
    mr = MR(b.pd, 65536, ALL_ACCESS, address=memory)
    a.mr.write(b"x" * 64, 64)
    assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 64, a.mr.lkey)], mr.rkey, mr.buf) == S.IBV_WC_SUCCESS
    mr.close()
    assert memory.mirror.closed


# --- a client that unmaps, or dies ---------------------------------------------------------------


def still_works(pair: tuple[Endpoint, Endpoint]) -> None:
    """The device goes on: a fresh pair on it moves a WRITE."""
    a, b = connected_pair()
    try:
        a.mr.write(b"alive", 5)
        assert post(a, WR.IBV_WR_RDMA_WRITE, [SGE(a.mr.buf, 5, a.mr.lkey)], b.mr.rkey, b.mr.buf) == S.IBV_WC_SUCCESS
        assert b.mr.read(5, 0) == b"alive"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["unmap", "kill"])
@pytest.mark.parametrize("operation", ["write", "read", "atomic"])
def test_a_peer_reaching_memory_that_went_gets_rem_access_err(pair: tuple[Endpoint, Endpoint], child: Child,
                                                              how: str, operation: str) -> None:  # fmt: skip
    a, b = pair
    mr = foreign_mr(b, child, 0, 65536)
    errors = dma_errors(b)
    child.unmap() if how == "unmap" else child.kill()
    sg = SGE(a.mr.buf, 8 if operation == "atomic" else 4096, a.mr.lkey)
    if operation == "atomic":
        status = atomic(a, WR.IBV_WR_ATOMIC_FETCH_AND_ADD, sg, mr.rkey, mr.buf, 1)
    else:
        opcode = WR.IBV_WR_RDMA_WRITE if operation == "write" else WR.IBV_WR_RDMA_READ
        status = post(a, opcode, [sg], mr.rkey, mr.buf)
    assert status == S.IBV_WC_REM_ACCESS_ERR
    assert dma_errors(b) == errors + 1
    mr.close()
    still_works(pair)


@pytest.mark.parametrize("how", ["unmap", "kill"])
@pytest.mark.parametrize("operation", ["write", "read", "atomic"])
def test_local_sges_in_memory_that_went_are_loc_prot_err(pair: tuple[Endpoint, Endpoint], child: Child,
                                                         how: str, operation: str) -> None:  # fmt: skip
    """A WRITE's source is refused before its request leaves; a READ's or atomic's
    destination when its response is placed (the request was sent: nothing probed it)."""
    a, b = pair
    mr = foreign_mr(a, child, 0, 65536)
    child.unmap() if how == "unmap" else child.kill()
    if operation == "atomic":
        status = atomic(a, WR.IBV_WR_ATOMIC_FETCH_AND_ADD, SGE(mr.buf, 8, mr.lkey), b.mr.rkey, b.mr.buf, 1)
    else:
        opcode = WR.IBV_WR_RDMA_WRITE if operation == "write" else WR.IBV_WR_RDMA_READ
        status = post(a, opcode, [SGE(mr.buf, 4000, mr.lkey)], b.mr.rkey, b.mr.buf)
    assert status == S.IBV_WC_LOC_PROT_ERR
    assert dma_errors(a) >= 1
    mr.close()
    still_works(pair)


def test_a_receive_buffer_that_went_fails_the_receive(pair: tuple[Endpoint, Endpoint], child: Child) -> None:
    """IBA's receive protection error: LOC_PROT_ERR here, REM_OP_ERR at the sender."""
    a, b = pair
    mr = foreign_mr(b, child, 0, 65536)
    b.qp.post_recv(RecvWR(wr_id=5, sg=[SGE(mr.buf, 4096, mr.lkey)]))
    child.unmap()
    assert post(a, WR.IBV_WR_SEND, [SGE(a.mr.buf, 100, a.mr.lkey)]) == S.IBV_WC_REM_OP_ERR
    (recv,) = b.poll()
    assert recv.status == S.IBV_WC_LOC_PROT_ERR
    mr.close()
    still_works(pair)


def test_a_uc_write_into_memory_that_went_is_dropped(child: Child) -> None:
    """UC answers nothing: a WRITE with immediate whose destination went (seen when its last
    packet is placed) is dropped and counted, and its receive WQE waits for the next message."""
    a, b = connected_pair(qp_type=e.ibv_qp_type.IBV_QPT_UC)
    try:
        mr = foreign_mr(b, child, 0, 65536)
        b.qp.post_recv(RecvWR(wr_id=5, sg=[]))
        errors, dropped = dma_errors(b), b.ctx.device.stats().get("drop_uc_rkey_violation", 0)
        child.unmap()
        sg = [SGE(a.mr.buf, 4000, a.mr.lkey)]
        assert post(a, WR.IBV_WR_RDMA_WRITE_WITH_IMM, sg, mr.rkey, mr.buf, imm_data=7) == S.IBV_WC_SUCCESS
        spin_until(lambda: b.ctx.device.stats().get("drop_uc_rkey_violation", 0) == dropped + 1,
                   "the message dropped", lambda: b.cq.poll(1))  # fmt: skip
        assert b.cq.poll(1)[0] == 0 and dma_errors(b) == errors + 1
        assert post(a, WR.IBV_WR_RDMA_WRITE_WITH_IMM, sg, b.mr.rkey, b.mr.buf, imm_data=8) == S.IBV_WC_SUCCESS
        (recv,) = b.poll()
        assert (recv.status, recv.wr_id, recv.imm_data) == (S.IBV_WC_SUCCESS, 5, 8)
        mr.close()
    finally:
        a.close()
        b.close()


def test_a_push_into_memory_unmapped_meanwhile_is_counted(child: Child) -> None:
    """The client unmaps between the pull and the push: the push fails, counted, not raised."""
    table = MrTable()
    memory = ForeignMemory(child.pid, child.address, 8192)
    region = table.register(1, memoryview(memory.mirror)[:8192], child.address, Access(15), memory)
    view = table.lookup(region.key, child.address, 100, Access.LOCAL_WRITE, 1)
    target = table.lookup(region.key, child.address + 200, 100, Access.REMOTE_WRITE, 1, placing=True)
    assert isinstance(view, memoryview) and isinstance(target, memoryview)
    view[:5] = target[:5] = b"lost!"
    child.unmap()
    table.flush()
    assert table.counters["dma_errors"] == 1
    del view
    assert table.counters["dma_errors"] == 2
    assert not table.placed(target, 5)  # the message fails: the transport answers it
    assert table.counters["dma_errors"] == 3 and not table.dirty
