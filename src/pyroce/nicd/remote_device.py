"""A Python program's device on the shared NIC: ``RemoteDevice`` offers the ``NicDevice``
commands the verbs use, each sent to the NIC (``nicd.commands``, the NIC's command layer),
which runs it on its real device.

The verbs objects stay in the program, with every check and errno of theirs; what they hand
the device crosses as the C driver's does: rings and doorbell records are pieces of the
connection's shared memory (``SharedRings``: allocated here, named by offset and length, the
same bytes in the NIC), an MR's memory in that arena is registered in place, any other memory
of the program is reached by the NIC from outside (``process_memory``). The doorbell is a
record written to the engine's hand-off pipe (``host.handoff``), whose write end came across at
open; event queues are the NIC's eventfds, sent across, waited on here and taken by a command
(no command waits). Polling needs no command: the NIC's engine thread runs everything; a poll
that keeps finding nothing sleeps on an eventfd the NIC writes with the next CQE (one command,
once: ``poller_wakeup``).
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import select
import struct
import time
from typing import Any

from pyroce.ib.enums import QpState
from pyroce.nic.engine import RECV_DOORBELL, SEND_DOORBELL
from pyroce.nic.events import AsyncEvent
from pyroce.nic.memory import BindError, BusyError
from pyroce.nic.rings import CqRing, RecvRing
from pyroce.nicd.arena import ArenaFull
from pyroce.nicd.client import Connection, NicError, connection
from pyroce.nicd.commands import DEVICE_PREFIX
from pyroce.nicd.remote_cm import RemoteCm
from pyroce.verbs.driver_memory import LOCAL
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

_RECORD = struct.Struct("=I")  # a doorbell record, native byte order (host.handoff)
# Empty CQ polls in a row before each further one naps: about 15 µs of polling here (0.9 µs a
# poll), as the C driver's 256 take ~20 µs (driver/c/datapath.c). 256 here spun ~230 µs, longer
# than a round trip: two programs spinning and the NIC's engine on two cores, and a 2-byte SEND's
# p50 on the shared NIC went from 370-460 µs to 96-156 µs with 16 (alternating runs).
SPIN_POLLS = 16
NAP_S = 1e-6  # a nap's longest: the kernel's timer slack makes it about 50 µs (as the C driver's)
# the device model's refusals, raised again as the verbs expect them (nicd.commands.REFUSALS)
_REFUSALS: dict[int, type[Exception]] = {errno.EBUSY: BusyError, errno.EPERM: BindError, errno.ENOENT: KeyError,
                                         errno.EINVAL: ValueError}  # fmt: skip


class SharedRings:
    """The ``DriverMemory`` of a Context on the shared NIC: rings in the connection's arena."""

    def __init__(self, conn: Connection) -> None:
        self.alloc = conn.memory.alloc
        self.address = conn.memory.address

    def export_fd(self, fd: int) -> int:
        return fd

    def program_memory(self, addr: int, length: int) -> Any:
        return addr

    def mr_memory(self, length: int) -> tuple[mmap.mmap | None, memoryview]:
        """In the arena, so the NIC registers it in place (no ``process_vm_readv``, nothing a
        ptrace policy can refuse); private memory when the arena has no room left for it."""
        try:
            return None, self.alloc(length)
        except ArenaFull:
            return LOCAL.mr_memory(length)


class RemoteQueue:
    """An event queue of the NIC (a completion channel, a Context's async events): its eventfd
    is readable while items wait; ``take`` is a command."""

    def __init__(self, device: RemoteDevice, handle: Any, fd: int, events: bool) -> None:
        self._device = device
        self.handle = handle
        self._fd = fd
        self._events = events  # items are async events, not CQNs

    def fileno(self) -> int:
        return self._fd

    def take(self) -> Any:
        try:
            item = self._device.call("take_event", self.handle)
        except BlockingIOError:
            return None
        return AsyncEvent(*item) if self._events else item

    def get(self) -> Any:
        """The next item, waiting on the fd for one (BlockingIOError if it is non-blocking)."""
        while (item := self.take()) is None:
            if not os.get_blocking(self._fd):
                raise BlockingIOError(errno.EAGAIN, "no event waits")
            select.select([self._fd], [], [])
        return item

    def take_all(self) -> list[Any]:
        items = []
        while (item := self.take()) is not None:
            items.append(item)
        return items

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RemoteRegion:
    """An MR as the verbs see the NIC's: its key and range; its bytes are this process's."""

    mirrored = None  # the memory is the program's own: the verbs read and write it in place

    def __init__(self, handle: Any, key: int, view: memoryview, addr: int) -> None:
        self.handle, self.key = handle, key
        self.retranslated(view, addr)

    def retranslated(self, view: memoryview, addr: int) -> None:
        self.view, self.addr, self.length = view, addr, len(view)

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.view[offset : offset + length])


class RemoteWindow:
    def __init__(self, device: RemoteDevice, handle: Any) -> None:
        self._device = device
        self.handle = handle

    @property
    def key(self) -> int:
        """The window's key now (a BIND_MW work request changes it in the NIC)."""
        return self._device.call("mw_key", self.handle)


class RemoteCq:
    def __init__(self, device: RemoteDevice, handle: Any, cqn: int, ring: CqRing) -> None:
        self._device = device
        self.handle, self.cqn, self.ring = handle, cqn, ring

    @property
    def producer(self) -> int:
        return self._device.call("cq_producer", self.handle)


class RemoteSrq:
    def __init__(self, handle: Any, srqn: int) -> None:
        self.handle, self.srqn = handle, srqn


def _handle(obj: Any) -> Any:
    return None if obj is None else obj.handle


class RemoteDevice:
    """The device a Context on the shared NIC uses, with the ``NicDevice`` commands the verbs
    call; every object it returns is valid on this process's connection only."""

    progress_mode = "thread"  # the NIC's engine thread does everything
    verb_faults = None  # a fault plan drives an embedded device only

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        try:
            self.conn = connection()
            self.address, self.doorbell_fd = self.conn.call(DEVICE_PREFIX + "open_device", name)
        except NicError as exc:
            raise PyverbsRDMAError(f"Failed to open device {name} on the shared NIC: {exc.strerror}",
                                   exc.errno or errno.EIO) from None  # fmt: skip
        self.memory = SharedRings(self.conn)
        self._empty_polls = 0  # CQ polls in a row that found nothing (``poll_empty``)

    def call_raw(self, command: str, *args: Any) -> Any:
        """Run a device command in the NIC; a refusal is the NIC's ``NicError``."""
        if os.getpid() != self.pid:
            raise PyverbsRDMAError(f"{command}: the object belongs to the parent process's connection to the shared "
                                   "NIC (after fork()): open the device again", errno.EIO)  # fmt: skip
        return self.conn.call(DEVICE_PREFIX + command, *args)

    def call(self, command: str, *args: Any) -> Any:
        """Run a device command in the NIC; its refusal as the device model or the verbs raise it."""
        try:
            return self.call_raw(command, *args)
        except NicError as exc:
            if exc.errno == errno.EAGAIN:
                raise BlockingIOError(errno.EAGAIN, exc.strerror) from None
            kind = _REFUSALS.get(exc.errno or 0)
            if kind is not None:
                raise kind(exc.strerror) from None
            raise PyverbsRDMAError(f"{command}: {exc.strerror}", exc.errno or errno.EIO) from None

    def _piece(self, view: memoryview) -> tuple[int, int]:
        return self.memory.address(view), len(view)

    def _program_piece(self, view: memoryview) -> tuple[int, int] | None:
        """An MR's memory in the arena is named by its piece; other memory by its address."""
        return self._piece(view) if self.conn.memory.holds(view) else None

    # --- the device --------------------------------------------------------------------

    @functools.cached_property
    def cm(self) -> RemoteCm:
        """The NIC's connection manager (``pyroce.cm``), its commands sent as the device's are."""
        return RemoteCm(self)

    @property
    def port_active(self) -> bool:
        return self.call("port_active")

    def route(self, gid: bytes) -> str | None:
        return self.call("route", gid)

    def stats(self) -> dict[str, int]:
        return self.call("stats")

    def kick(self) -> None:
        self.call("kick")

    def poll_empty(self) -> None:
        """The NIC's engine thread delivers every completion, so a poll that keeps finding none
        naps instead (past ``SPIN_POLLS`` in a row, as the C driver's): two programs spinning
        in Python took the cores the NIC's engine needs (a 2-byte SEND's p99 3.8 ms)."""
        self._empty_polls += 1
        if self._empty_polls > SPIN_POLLS:
            self._nap()

    def _nap(self) -> None:
        """Sleep until the NIC writes a CQE on one of this connection's CQs, ``NAP_S`` at most:
        the flag byte set, the NIC writes the eventfd with its next CQE and clears the flag
        (``DeviceCommands.poller_wakeup``). A CQE written between the poll's look at its ring
        and the flag costs the whole nap, as a timed nap would."""
        wakeup = self.conn.poller
        if wakeup is None:
            if os.getpid() != self.pid:  # a forked child: the connection is its parent's
                time.sleep(NAP_S)
                return
            with self.conn.asking:  # one flag byte for the connection: the one the NIC watches
                wakeup = self.conn.poller
                if wakeup is None:
                    flag = self.memory.alloc(1)
                    wakeup = self.conn.poller = (flag, self.call("poller_wakeup", self._piece(flag)))
        flag, fd = wakeup
        flag[0] = 1
        if not select.select([fd], [], [], NAP_S)[0]:
            flag[0] = 0
            return
        try:  # the NIC cleared the flag
            os.eventfd_read(fd)
        except BlockingIOError:
            pass  # another thread's nap, woken by the same write, read it first

    def poll_found(self) -> None:
        self._empty_polls = 0

    def waiting(self) -> None:
        """A driver blocks for an event: nothing to hand over, the NIC's engine threads run on their own."""

    def ring_doorbell(self, qpn: int) -> None:
        self._ring(SEND_DOORBELL | qpn)

    def note_receives(self, qpn: int) -> None:
        self._ring(RECV_DOORBELL | qpn)

    def _ring(self, record: int) -> None:
        """One record into the hand-off pipe (atomic; a full pipe is waited out). Work posted:
        its completion is coming, so the polls for it spin again before they nap."""
        self._empty_polls = 0
        while True:
            try:
                os.write(self.doorbell_fd, _RECORD.pack(record))
                return
            except BlockingIOError:
                select.select([], [self.doorbell_fd], [])

    def close(self) -> None:
        """The Context is closed (its objects went before it); the connection stays the process's."""
        if self.doorbell_fd >= 0:
            os.close(self.doorbell_fd)
            self.doorbell_fd = -1

    # --- event queues --------------------------------------------------------------------

    def open_async_events(self) -> RemoteQueue:
        handle, fd = self.call("open_async_events")
        return RemoteQueue(self, handle, fd, events=True)

    def close_async_events(self, queue: RemoteQueue) -> None:
        self.call("close_async_events", queue.handle)
        queue.close()

    def create_comp_channel(self) -> RemoteQueue:
        handle, fd = self.call("create_comp_channel")
        return RemoteQueue(self, handle, fd, events=False)

    def destroy_comp_channel(self, channel: RemoteQueue) -> None:
        self.call("destroy_comp_channel", channel.handle)
        channel.close()

    # --- memory ------------------------------------------------------------------------------

    def alloc_pd(self) -> int:
        return self.call("alloc_pd")

    def reg_mr(self, pdn: int, view: memoryview, addr: int, access: int, mirrored: Any = None) -> RemoteRegion:
        if mirrored is not None:
            raise PyverbsRDMAError("Failed to register a MR: another process's memory on the shared NIC",
                                   errno.EOPNOTSUPP)  # fmt: skip
        handle, key = self.call("reg_mr", pdn, self._program_piece(view), addr, len(view), int(access))
        return RemoteRegion(handle, key, view, addr)

    def dereg_mr(self, region: RemoteRegion | RemoteWindow) -> None:
        self.call("dereg_mr", region.handle)

    def rereg_mr(self, region: RemoteRegion, pdn: int, access: int) -> None:
        self.call("rereg_mr", region.handle, pdn, int(access))

    def retranslate_mr(self, region: RemoteRegion, view: memoryview, addr: int, mirrored: Any = None) -> None:
        if mirrored is not None:
            raise PyverbsRDMAError("Failed to rereg MR: another process's memory on the shared NIC", errno.EOPNOTSUPP)
        self.call("retranslate_mr", region.handle, self._program_piece(view), addr, len(view))
        region.retranslated(view, addr)

    def alloc_mw(self, pdn: int, mw_type: int) -> RemoteWindow:
        handle, _ = self.call("alloc_mw", pdn, mw_type)
        return RemoteWindow(self, handle)

    def bind_mw(self, window: RemoteWindow, region: RemoteRegion | None, addr: int, length: int, access: int,
                key_byte: int, qpn: int) -> None:  # fmt: skip
        self.call("bind_mw", window.handle, _handle(region), addr, length, int(access), key_byte, qpn)

    # --- completion queues ----------------------------------------------------------------

    def create_cq(self, buf: memoryview, cqe_count: int, consumer_record: memoryview,
                  channel: RemoteQueue | None = None, events: RemoteQueue | None = None) -> RemoteCq:  # fmt: skip
        handle, cqn = self.call("create_cq", self._piece(buf), cqe_count, self._piece(consumer_record),
                                _handle(channel), _handle(events))  # fmt: skip
        return RemoteCq(self, handle, cqn, CqRing(buf, cqe_count))

    def resize_cq(self, cq: RemoteCq, buf: memoryview, cqe_count: int, consumer: int) -> None:
        ring = CqRing(buf, cqe_count)  # before the NIC moves the CQEs in: a new ring starts all invalid
        self.call("resize_cq", cq.handle, self._piece(buf), cqe_count, consumer)
        cq.ring = ring

    def arm_cq(self, cq: RemoteCq, solicited_only: bool) -> None:
        self.call("arm_cq", cq.handle, solicited_only)

    def destroy_cq(self, cq: RemoteCq) -> None:
        self.call("destroy_cq", cq.handle)

    # --- shared receive queues --------------------------------------------------------------

    def create_srq(self, buf: memoryview, count: int, stride: int, doorbell: memoryview,
                   events: RemoteQueue | None = None) -> RemoteSrq:  # fmt: skip
        return RemoteSrq(*self.call("create_srq", self._piece(buf), count, stride, self._piece(doorbell),
                                    _handle(events)))  # fmt: skip

    def arm_srq(self, srq: RemoteSrq, limit: int) -> None:
        self.call("arm_srq", srq.handle, limit)

    def srq_limit(self, srq: RemoteSrq) -> int:
        return self.call("srq_limit", srq.handle)

    def resize_srq(self, srq: RemoteSrq, ring: RecvRing) -> None:
        self.call("resize_srq", srq.handle, self._piece(ring.buf), ring.count, ring.stride)

    def destroy_srq(self, srq: RemoteSrq) -> None:
        self.call("destroy_srq", srq.handle)

    # --- queue pairs ----------------------------------------------------------------------------

    def create_qp(self, pdn: int, send_cq: RemoteCq, recv_cq: RemoteCq, sq_buf: memoryview, sq_wqebbs: int,
                  rq_buf: memoryview, rq_count: int, rq_stride: int, doorbell: memoryview, transport: int = 0,
                  srq: RemoteSrq | None = None, events: RemoteQueue | None = None) -> int:  # fmt: skip
        rq = None if srq is not None else self._piece(rq_buf)
        return self.call("create_qp", pdn, send_cq.handle, recv_cq.handle, self._piece(sq_buf), sq_wqebbs, rq,
                         rq_count, rq_stride, self._piece(doorbell), int(transport), _handle(srq),
                         _handle(events))  # fmt: skip

    def modify_qp(self, qpn: int, state: QpState, changes: dict[str, object], peer: str | None = None) -> None:
        self.call("modify_qp", qpn, int(state), changes, peer)

    def destroy_qp(self, qpn: int) -> None:
        self.call("destroy_qp", qpn)

    def attach_mcast(self, qpn: int, gid: bytes) -> None:
        self.call("attach_mcast", qpn, gid)

    def detach_mcast(self, qpn: int, gid: bytes) -> None:
        self.call("detach_mcast", qpn, gid)

    def qp_state(self, qpn: int) -> QpState:
        return QpState(self.call("qp_state", qpn))

    def qp_sq_draining(self, qpn: int) -> bool:
        return self.call("qp_sq_draining", qpn)

    def qp_error_detail(self, qpn: int) -> str:
        return self.call("qp_error_detail", qpn)

    def qp_stats(self, qpn: int) -> dict[str, int]:
        return self.call("qp_stats", qpn)

    # --- fault injection ------------------------------------------------------------------------

    def inject_qp_error(self, qpn: int, detail: str) -> None:
        self.call("inject_qp_error", qpn, detail)

    def inject_rnr(self, qpn: int, count: int) -> None:
        self.call("inject_rnr", qpn, count)

    def inject_cq_overrun(self, cq: RemoteCq, count: int = 1) -> None:
        self.call("inject_cq_overrun", cq.handle, count)

    def set_port_state(self, active: bool) -> None:
        self.call("set_port_state", active)
