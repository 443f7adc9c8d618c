"""Memory regions (pyverbs ``mr.pyx``): ``MR(pd, length, access, address=None)``.

An MR either allocates its own page-aligned memory (where the Context's ``driver_memory`` says:
on the shared NIC, the connection's shared memory, which the NIC reaches in place) or wraps
memory the caller owns: any object
with a writable buffer (bytearray, mmap, numpy array), as in pyverbs an integer address, or
another process's memory (a ``pyroce.nic.memory.MirroredMemory``: the shared NIC's clients).
``buf`` is the integer address that SGEs and RETHs name; the NIC reaches the bytes only through
the view registered here, so every access is bounds-checked.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
from typing import Any

from pyroce.ib.enums import Access
from pyroce.nic.memory import BusyError, MemoryRegion
from pyroce.nic.mirrored import MirroredMemory
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.driver_memory import address_of
from pyroce.verbs.enums import ibv_access_flags, ibv_rereg_mr_flags
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

SUPPORTED_ACCESS = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
                    | ibv_access_flags.IBV_ACCESS_REMOTE_READ | ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC
                    | ibv_access_flags.IBV_ACCESS_MW_BIND | ibv_access_flags.IBV_ACCESS_RELAXED_ORDERING
                    | ibv_access_flags.IBV_ACCESS_ON_DEMAND)  # fmt: skip  # every MR pages on demand (ODPCaps)
NEEDS_LOCAL_WRITE = ibv_access_flags.IBV_ACCESS_REMOTE_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC


def check_access(access: int, what: str) -> None:
    """The errnos rxe and ib_check_mr_access give for access flags an MR cannot have."""
    if access & ~SUPPORTED_ACCESS:
        raise PyverbsRDMAError(f"Failed to {what}: access flags 0x{access:x} not supported", errno.EOPNOTSUPP)
    if access & NEEDS_LOCAL_WRITE and not access & ibv_access_flags.IBV_ACCESS_LOCAL_WRITE:
        # IBA 10.6.3.1 (and ib_check_mr_access): remote write/atomic need local write
        raise PyverbsRDMAError(f"Failed to {what}: remote write or atomic access needs local write", errno.EINVAL)


def nic_access(access: int) -> Access:
    """The bits the NIC checks: local write, remote access and MW bind."""
    return Access(access & 0x1F)


def memory_at(address: Any, length: int, what: str,
              writable: bool = False) -> tuple[MirroredMemory | None, memoryview, int]:  # fmt: skip
    """The bytes an MR registers that the caller owns: ``length`` bytes at an integer address, a
    writable buffer, or another process's memory (its first ``length`` bytes, every page
    probed: EFAULT if one cannot be read, or, ``writable``, written); with the memory the MR
    holds, the view and the address SGEs name."""
    if isinstance(address, MirroredMemory):
        if length > address.length:
            raise PyverbsRDMAError(f"Failed to {what}: {address!r} has {address.length} bytes, not {length}",
                                   errno.EFAULT)  # fmt: skip
        try:
            address.probe(0, length, writable)
        except OSError as exc:
            raise PyverbsRDMAError(f"Failed to {what}: {exc.strerror or exc}", exc.errno or errno.EFAULT) from None
        return address, memoryview(address.mirror)[:length], address.address
    if isinstance(address, int):
        return None, memoryview((ctypes.c_char * length).from_address(address)).cast("B"), address
    try:
        view = memoryview(address).cast("B")
    except TypeError:
        raise PyverbsUserError(f"{type(address).__name__} has no buffer to register") from None
    if view.readonly:
        raise PyverbsRDMAError(f"Failed to {what}: the buffer is read-only", errno.EFAULT)
    if len(view) < length:
        raise PyverbsRDMAError(f"Failed to {what}: the buffer has {len(view)} bytes, not {length}", errno.EFAULT)
    view = view[:length]
    return None, view, address_of(view) if length else 0


class MR(PyverbsObject):
    CLOSE_ORDER = 1

    def __init__(self, creator: PD, length: int, access: int, address: Any = None, **kwargs: object) -> None:
        super().__init__()
        creator._check_open()
        check_injected(creator.ctx.device, "reg_mr", "register a MR")
        if length < 0:
            raise PyverbsUserError(f"MR length must not be negative, got {length}")
        check_access(access, "register a MR")
        if kwargs.get("implicit"):  # pyverbs' MR(..., implicit=True): ibv_reg_mr(pd, NULL, SIZE_MAX, ...)
            raise PyverbsRDMAError("Failed to register a MR: implicit ODP is not offered (ODPCaps)", errno.EINVAL)
        self.pd = creator
        writable = bool(access & ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
        self._memory: mmap.mmap | MirroredMemory | None
        if address is None:
            self._memory, self._view = creator.ctx.driver_memory.mr_memory(length)
            self.buf = address_of(self._view) if length else 0
        else:
            self._memory, self._view, self.buf = memory_at(address, length, "register a MR", writable)
        self.length = length
        self.access = access
        mirrored = self._memory if isinstance(self._memory, MirroredMemory) else None
        self.region: MemoryRegion = creator.ctx.device.reg_mr(creator.pdn, self._view, self.buf, nic_access(access),
                                                              mirrored)  # fmt: skip
        creator.add_ref(self)

    @property
    def lkey(self) -> int:
        if self.closed:
            raise self._closed_error()
        return self.region.key

    @property
    def rkey(self) -> int:
        if self.closed:
            raise self._closed_error()
        return self.region.key

    def rereg(self, flags: int, pd: PD | None = None, addr: Any = 0, length: int = 0, access: int = 0) -> None:
        """``ibv_rereg_mr``: a new PD, access or translation (``length`` bytes at ``addr``, an
        address or a buffer as ``MR`` takes) in place, the key kept, so work already posted
        with it reaches the new memory (rxe refuses a new translation; mlx5 does it)."""
        self._check_open()
        if flags & ~int(ibv_rereg_mr_flags.IBV_REREG_MR_FLAGS_SUPPORTED):
            raise PyverbsRDMAError(f"Failed to rereg MR: flags 0x{flags:x} are not rereg flags", errno.EINVAL)
        translate = flags & ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_TRANSLATION
        if translate and (not addr or length <= 0):  # libibverbs' IBV_REREG_MR_ERR_INPUT
            raise PyverbsRDMAError("Failed to rereg MR: a new translation needs an address and a length", errno.EINVAL)
        new_pd = self.pd
        if flags & ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_PD:
            if pd is None:
                raise PyverbsRDMAError("Failed to rereg MR: IBV_REREG_MR_CHANGE_PD needs a PD", errno.EINVAL)
            pd._check_open()
            new_pd = pd
        new_access = self.access
        if flags & ibv_rereg_mr_flags.IBV_REREG_MR_CHANGE_ACCESS:
            check_access(access, "rereg MR")
            new_access = access
        if translate:
            self._retranslate(addr, length, bool(new_access & ibv_access_flags.IBV_ACCESS_LOCAL_WRITE))
        self.pd.ctx.device.rereg_mr(self.region, new_pd.pdn, nic_access(new_access))
        if new_pd is not self.pd:
            self.pd._children.discard(self)  # type: ignore[union-attr]
            new_pd.add_ref(self)
            self.pd = new_pd
        self.access = new_access

    def _retranslate(self, addr: Any, length: int, writable: bool) -> None:
        memory, view, buf = memory_at(addr, length, "rereg MR", writable)
        mirrored = memory if isinstance(memory, MirroredMemory) else None
        try:
            self.pd.ctx.device.retranslate_mr(self.region, view, buf, mirrored)
        except BusyError as exc:
            raise PyverbsRDMAError(f"Failed to rereg MR: {exc}", errno.EINVAL) from None
        self._release_memory()
        self._memory, self._view, self.buf, self.length = memory, view, buf, length

    def write(self, data: bytes | bytearray | memoryview | str, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the MR at ``offset``."""
        self._check_open()
        raw = data.encode() if isinstance(data, str) else data
        if offset < 0 or length < 0 or offset + length > self.length or length > len(raw):
            raise PyverbsUserError(f"cannot write {length} bytes at offset {offset} of a {self.length}-byte MR")
        if self.region.mirrored is None:
            self._view[offset : offset + length] = memoryview(raw)[:length]
            return
        try:
            self.region.write(offset, memoryview(raw)[:length])
        except OSError as exc:
            raise PyverbsRDMAError(f"Failed to write the MR: {exc.strerror or exc}",
                                   exc.errno or errno.EFAULT) from None  # fmt: skip

    def read(self, length: int, offset: int) -> bytes:
        self._check_open()
        if offset < 0 or length < 0 or offset + length > self.length:
            raise PyverbsUserError(f"cannot read {length} bytes at offset {offset} of a {self.length}-byte MR")
        if self.region.mirrored is None:
            return bytes(self._view[offset : offset + length])
        try:
            return self.region.read(offset, length)
        except OSError as exc:
            raise PyverbsRDMAError(f"Failed to read the MR: {exc.strerror or exc}", exc.errno or errno.EFAULT) from None

    def _release(self) -> None:
        self.pd.ctx.device.dereg_mr(self.region)
        self._release_memory()

    def _release_memory(self) -> None:
        try:
            self._view.release()
            if self._memory is not None:
                self._memory.close()
        except BufferError:
            pass  # a view of the memory is still held elsewhere; it goes when that does
