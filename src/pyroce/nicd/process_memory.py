"""Reaching a client's memory from the shared NIC: ``process_vm_readv``/``process_vm_writev``.

A program's MRs are its own memory (``malloc``, a stack, a mapped file); the shared NIC runs in
another process and copies between that memory and a local mirror (``ForeignMemory``, which
``pyroce.nic.memory.MrTable`` pulls from and pushes to around each operation). The kernel checks
every access against the client's page tables: an address the client cannot access is EFAULT,
never a signal, so a client that unmaps or dies under an operation fails that operation only.

Permission: the caller needs ptrace read access to the client (same user and the client
dumpable, or CAP_SYS_PTRACE). Under Yama's ``kernel.yama.ptrace_scope`` 1 (Ubuntu's default)
only an ancestor may, unless the client names the NIC's process with ``allow_tracer`` (what the
driver does once it knows the daemon's pid); scope 2 needs CAP_SYS_PTRACE, scope 3 forbids it.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import threading
import weakref
from collections.abc import Callable, Sequence

from pyroce.nic.mirrored import MirroredMemory

IOV_MAX = 1024  # iovecs the kernel takes in one call (UIO_MAXIOV)
IOVEC = struct.Struct("@PN")  # struct iovec: iov_base, iov_len
PAGE_SIZE = mmap.PAGESIZE
PR_SET_PTRACER = 0x59616D61  # "Yama"
PR_SET_PTRACER_ANY = 0xFFFFFFFFFFFFFFFF  # (unsigned long)-1


class Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_CALL_ARGS = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
              ctypes.c_ulong]  # fmt: skip
_process_vm_readv = _libc.process_vm_readv
_process_vm_readv.argtypes = _CALL_ARGS
_process_vm_readv.restype = ctypes.c_ssize_t
_process_vm_writev = _libc.process_vm_writev
_process_vm_writev.argtypes = _CALL_ARGS
_process_vm_writev.restype = ctypes.c_ssize_t
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def _iovecs(ranges: Sequence[tuple[int, int]]) -> ctypes.Array[Iovec]:
    array = (Iovec * len(ranges))()
    for slot, (address, length) in zip(array, ranges):
        slot.iov_base, slot.iov_len = address, length
    return array


def _call(function: Callable[..., int], name: str, pid: int, local: Sequence[tuple[int, int]],
          remote: Sequence[tuple[int, int]]) -> int:  # fmt: skip
    local_iov, remote_iov = _iovecs(local), _iovecs(remote)
    while True:
        moved = function(pid, ctypes.byref(local_iov), len(local), ctypes.byref(remote_iov), len(remote), 0)
        if moved >= 0:
            return int(moved)
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, f"{name}(pid {pid}): {os.strerror(code)}")


def process_vm_readv(pid: int, local: Sequence[tuple[int, int]], remote: Sequence[tuple[int, int]]) -> int:
    """One ``process_vm_readv``: (address, length) ranges of this process filled from those of
    ``pid``. The bytes moved, which may be fewer than asked (a partial transfer stops at the
    first remote range that faults); ``OSError`` with the errno when nothing could be."""
    return _call(_process_vm_readv, "process_vm_readv", pid, local, remote)


def process_vm_writev(pid: int, local: Sequence[tuple[int, int]], remote: Sequence[tuple[int, int]]) -> int:
    """One ``process_vm_writev``: this process's ranges into those of ``pid`` (as ``process_vm_readv``)."""
    return _call(_process_vm_writev, "process_vm_writev", pid, local, remote)


def _copy(call: Callable[..., int], name: str, pid: int, local: int, remote: int, length: int) -> None:
    """One range each side (the NIC's case: two iovecs, no lists), resumed after a partial transfer."""
    done = 0
    while done < length:
        local_iov, remote_iov = Iovec(local + done, length - done), Iovec(remote + done, length - done)
        moved = call(pid, ctypes.byref(local_iov), 1, ctypes.byref(remote_iov), 1, 0)
        if moved < 0:
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            raise OSError(code, f"{name}(pid {pid}, 0x{remote + done:x}): {os.strerror(code)}")
        if moved == 0:  # nothing moved and no error: never expected, but never loop on it
            raise OSError(errno.EFAULT, f"{name}(pid {pid}): no progress at 0x{remote + done:x}")
        done += moved  # a partial transfer: the rest again, which faults if the next page does


def page_starts(address: int, length: int) -> list[int]:
    """The first byte of ``address``..``address + length`` in each page it touches."""
    if length <= 0:
        return []
    first = address - address % PAGE_SIZE
    return [address] + list(range(first + PAGE_SIZE, address + length, PAGE_SIZE))


def probe(pid: int, address: int, length: int) -> None:
    """Raise ``OSError`` (EFAULT) unless one byte of every page of the range can be read: one
    ``process_vm_readv`` of one byte per page (``IOV_MAX`` pages a call)."""
    pages = page_starts(address, length)
    sink = ctypes.create_string_buffer(min(len(pages), IOV_MAX) or 1)
    base = ctypes.addressof(sink)
    for at in range(0, len(pages), IOV_MAX):
        chunk = pages[at : at + IOV_MAX]
        moved = process_vm_readv(pid, [(base, len(chunk))], [(page, 1) for page in chunk])
        if moved != len(chunk):
            bad = chunk[moved]
            raise OSError(errno.EFAULT, f"process {pid} cannot read 0x{bad:x} ({os.strerror(errno.EFAULT)})")


def writable_ranges(pid: int) -> list[tuple[int, int]]:
    """The [start, end) address ranges ``pid`` maps writable (``/proc/<pid>/maps``)."""
    ranges = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            span, perms = line.split(None, 2)[:2]
            if "w" in perms:
                start, end = span.split("-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def probe_writable(pid: int, address: int, length: int) -> None:
    """Raise ``OSError`` (EFAULT) unless the whole range is mapped writable in ``pid`` (as the
    kernel pins an MR with write access: a read-only mapping is EFAULT at registration, not a
    write lost later). Read from ``/proc/<pid>/maps``: nothing of the client's memory is touched."""
    at, end = address, address + length
    for start, stop in sorted(writable_ranges(pid)):
        if start <= at < stop:
            at = stop
        if at >= end:
            return
    if at < end:
        raise OSError(errno.EFAULT, f"process {pid} does not map 0x{at:x} writable ({os.strerror(errno.EFAULT)})")


def allow_tracer(pid: int) -> bool:
    """For a client: let process ``pid`` (the shared NIC) read and write this process's memory
    under Yama's ptrace_scope 1 (``prctl(PR_SET_PTRACER, pid)``; rdma needs no more). False
    where the kernel has no Yama (nothing to allow: plain ptrace rules apply); ``OSError``
    otherwise."""
    if _prctl(PR_SET_PTRACER, pid, 0, 0, 0) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.EINVAL:
        return False
    raise OSError(code, f"prctl(PR_SET_PTRACER, {pid}): {os.strerror(code)}")


BULK_BYTES = 16 << 10  # a transfer at least this long takes process_vm_readv/writev (ProcessAccess)


def _address_of(view: memoryview) -> int:
    """Where a writable view's first byte is in this process (alive as long as the view is)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


class ProcessAccess:
    """How the NIC reaches one program's memory: a transfer under ``BULK_BYTES`` is one
    ``preadv``/``pwritev`` of the file ``/proc/<pid>/mem`` at the program's address (about 3 µs
    here, where ``process_vm_readv`` through ctypes costs 4: most of a small transfer is the call,
    and a 2-byte SEND between two C programs spent a quarter of the NIC's time in it); a larger one
    is ``process_vm_readv``/``writev``, which copies once where the file copies twice through a
    kernel page (64 KiB: 10.5 against 14.9 µs). The file is opened at first use (after
    registration's probe, so Yama's ``allow_tracer`` has been given), one descriptor per program
    shared by all its regions (a program may register thousands), closed when nothing uses it;
    it stays the process it was opened for, so a pid reused after the program's end reaches
    nothing through it.

    The kernel checks each access against the program's page tables: an address it does not map
    is EFAULT, never a signal. A page the program made read-only after registering it is
    written by the file (a debugger's access, as a NIC's DMA into a pinned page is) and refused
    by ``process_vm_writev`` (EFAULT)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = -1
        self._opening = threading.Lock()
        self._iovecs = self._remote_iovecs = bytearray()  # ``write_ranges``', made at its first use

    def fileno(self) -> int:
        fd = self._fd
        return fd if fd >= 0 else self._open()

    def _open(self) -> int:
        with self._opening:
            if self._fd < 0:
                try:
                    self._fd = os.open(f"/proc/{self.pid}/mem", os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    raise OSError(errno.ESRCH, f"process {self.pid} is gone") from None
                weakref.finalize(self, os.close, self._fd)
            return self._fd

    def read_into(self, view: memoryview, address: int) -> None:
        """Fill ``view`` with the program's bytes at ``address``, all or ``OSError`` (EFAULT: a
        page not mapped; the bytes before it have arrived)."""
        self._transfer(view, address, os.preadv, _process_vm_readv, "read")

    def write_from(self, view: memoryview, address: int) -> None:
        """Write ``view`` into the program at ``address``, all or ``OSError`` (as ``read_into``;
        the bytes before a fault have been written)."""
        self._transfer(view, address, os.pwritev, _process_vm_writev, "write")

    def write_ranges(self, local: int, remote: int, ranges: list[tuple[int, int]]) -> int:
        """One ``process_vm_writev`` of each (offset, length) of ``ranges`` from ``local + offset``
        here to ``remote + offset`` in the program, at most ``IOV_MAX``; the bytes written, which
        stop at the first range that faults (0 if the call failed). Its iovecs packed into two
        reused buffers, one ``pack_into`` a range (ctypes' fields cost several times that)."""
        count = len(ranges)
        if len(self._iovecs) < count * IOVEC.size:
            self._iovecs = bytearray(IOV_MAX * IOVEC.size)
            self._remote_iovecs = bytearray(IOV_MAX * IOVEC.size)
        local_iov, remote_iov, pack = self._iovecs, self._remote_iovecs, IOVEC.pack_into
        at = 0
        for offset, length in ranges:
            pack(local_iov, at, local + offset, length)
            pack(remote_iov, at, remote + offset, length)
            at += IOVEC.size
        moved = _process_vm_writev(self.pid, _address_of(memoryview(local_iov)), count,
                                   _address_of(memoryview(remote_iov)), count, 0)  # fmt: skip
        return max(0, moved)

    def _transfer(self, view: memoryview, address: int, by_file: Callable[[int, list[memoryview], int], int],
                  bulk: Callable[..., int], verb: str) -> None:  # fmt: skip
        length = len(view)
        if length >= BULK_BYTES and not view.readonly:
            _copy(bulk, f"process_vm_{verb}v", self.pid, _address_of(view), address, length)
            return
        fd, done = self.fileno(), 0
        while done < length:  # a partial transfer: the rest again, which faults if its page does
            try:
                moved = by_file(fd, [view[done:] if done else view], address + done)
            except OSError as exc:
                raise self._fault(verb, address + done, exc) from None
            if moved <= 0:
                raise self._fault(verb, address + done, None)
            done += moved

    def _fault(self, verb: str, address: int, exc: OSError | None) -> OSError:
        """EFAULT for an address the program does not map (the file says EIO, or moves nothing
        once the program is gone); any other errno as it came."""
        code = errno.EFAULT if exc is None or exc.errno in (None, errno.EIO) else exc.errno
        return OSError(code, f"process {self.pid} cannot {verb} 0x{address:x} ({os.strerror(code)})")


class ForeignMemory(MirroredMemory):
    """``length`` bytes at ``address`` in process ``pid``, as an MR of the shared NIC sees
    them: ``MR(pd, length, access, address=ForeignMemory(pid, address, length))`` probes the
    range and registers the mirror (an anonymous mapping of the same length, whose pages are
    only touched as operations use them), which ``MrTable`` pulls into and pushes from. The MR
    owns it from then on: deregistration drops the mirror."""

    def __init__(self, pid: int, address: int, length: int, process: ProcessAccess | None = None) -> None:
        if length < 0 or address < 0:
            raise ValueError(f"no memory of {length} bytes at {address:#x}")
        self.pid = pid
        self.address = address
        self.length = length
        self.mirror = mmap.mmap(-1, max(length, 1))
        self._view = memoryview(self.mirror)  # released on close: its slices alone then hold the mirror
        self._process = process if process is not None else ProcessAccess(pid)  # shared by the program's regions

    def __repr__(self) -> str:
        return f"ForeignMemory(pid={self.pid}, address={self.address:#x}, length={self.length})"

    def probe(self, offset: int, length: int, writable: bool) -> None:
        probe(self.pid, self.address + offset, length)
        if writable and length:
            probe_writable(self.pid, self.address + offset, length)

    def _mirror(self, offset: int, length: int) -> memoryview:
        """The mirror's bytes at ``offset`` (never once the MR is deregistered)."""
        try:
            return self._view[offset : offset + length]
        except ValueError:  # released
            raise OSError(errno.EBADF, "the mirror of a deregistered MR") from None

    def pull(self, offset: int, length: int) -> None:
        self._process.read_into(self._mirror(offset, length), self.address + offset)

    def push(self, offset: int, length: int) -> None:
        self._process.write_from(self._mirror(offset, length), self.address + offset)

    def push_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        """Several ranges of the mirror back in one ``process_vm_writev`` (``IOV_MAX`` a call),
        where each ``push`` is a system call of its own (the 2-byte WRITEs of ``ib_write_bw``
        between two programs on one engine: ~a third of the engine). A range the call stops at
        is pushed alone (the file writes a page the program made read-only, as a NIC's DMA into a
        pinned page does; an unmapped one fails), and the call resumes after it."""
        if len(ranges) == 1:
            return super().push_ranges(ranges)
        try:
            mirror = _address_of(self._mirror(0, self.length))
        except OSError:  # deregistered: nothing reaches the memory any more
            return list(range(len(ranges)))
        failed: list[int] = []
        at = 0
        while at < len(ranges):
            chunk = ranges[at : at + IOV_MAX]
            moved = self._process.write_ranges(mirror, self.address, chunk)
            for _, length in chunk:  # past what it wrote, to the range it stopped at, if any
                if moved < length:
                    failed += [at + index for index in super().push_ranges(ranges[at : at + 1])]
                    at += 1
                    break
                moved -= length
                at += 1
        return failed

    def close(self) -> None:
        self._view.release()
        super().close()

    def read(self, offset: int, length: int) -> bytes:
        buffer = bytearray(length)
        self._process.read_into(memoryview(buffer), self.address + offset)
        return bytes(buffer)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._process.write_from(memoryview(data).cast("B"), self.address + offset)
