"""Memory the NIC cannot address itself, as ``nic.memory.MrTable`` reaches it through a local
mirror. Its own module, never compiled with mypyc, because other packages implement it
(``pyroce.nicd.process_memory.ForeignMemory``, the tests' fakes): an interpreted class cannot
subclass a compiled one."""

from __future__ import annotations

import abc
from typing import Protocol


class Mirror(Protocol):
    """The local buffer that stands for mirrored memory: writable, of the memory's length, and
    closed when the memory is deregistered (``BufferError`` while views of it live). Its maker
    allocates it (``pyroce.nicd.process_memory``: an anonymous ``mmap``, whose pages are only
    touched as they are used)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

    def __len__(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


class MirroredMemory(abc.ABC):
    """Memory the NIC cannot address itself: another process's (the shared NIC's clients,
    ``pyroce.nicd.process_memory.ForeignMemory``). The NIC works on ``mirror``, a local buffer
    of ``length`` bytes standing for the memory at ``address`` (what SGEs and RETHs name):
    ``pull`` copies a range of the memory into the mirror, ``push`` the mirror's range back;
    ``read`` and ``write`` reach the memory directly (the verbs' control path: inline data, a
    GRH, ``MR.read``). Each raises ``OSError`` when the memory cannot be reached (EFAULT: not
    mapped, or not writable; ESRCH: the process is gone). Offsets are from ``address``."""

    address: int
    length: int
    mirror: Mirror

    @abc.abstractmethod
    def probe(self, offset: int, length: int, writable: bool) -> None:
        """Raise ``OSError`` (EFAULT) unless every page of the range can be read (and written)."""

    @abc.abstractmethod
    def pull(self, offset: int, length: int) -> None:
        """Copy ``length`` bytes at ``offset`` of the memory into the mirror."""

    @abc.abstractmethod
    def push(self, offset: int, length: int) -> None:
        """Copy ``length`` bytes at ``offset`` of the mirror back into the memory."""

    def push_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        """``push`` each (offset, length) of ``ranges``; the indices of those that could not
        be (``OSError``). One call for many, so that memory which can write several ranges
        at once (``ForeignMemory``: one system call) does."""
        failed = []
        for index, (offset, length) in enumerate(ranges):
            try:
                self.push(offset, length)
            except OSError:
                failed.append(index)
        return failed

    @abc.abstractmethod
    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of the memory itself (not the mirror)."""

    @abc.abstractmethod
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset`` of the memory itself (not the mirror)."""

    def close(self) -> None:
        """Drop the mirror; while the transport still holds views of it, it goes with the last."""
        try:
            self.mirror.close()
        except BufferError:
            pass
