"""The NIC's command layer: the ``NicDevice`` commands a Python driver in another process may
send (``nicd.remote_device`` is that driver's side), run on the shared NIC's real device.

A Python program's verbs objects (``pyroce.verbs``) live in the program and reach their NIC only
through the device's commands and memory: so the NIC serves them at this level, below the verbs,
where the C driver is served above them (``driver.calls``). ``DEVICE_COMMANDS`` is the one
allow-list of what a client may call; each command checks that the objects it names are the
connection's own (a handle of this connection, a QPN it created), turns the arena pieces it names
(offset, length) into views of the NIC's mapping, and answers with handles and the few values the
verbs read of what it made (a CQN, a key). A client's own MR memory outside the arena is reached
as the C driver's is (``process_memory.ForeignMemory`` of the connection's pid). What the
connection leaves is destroyed when it closes, QPs first, as for a C program.
"""

from __future__ import annotations

import errno
from typing import Any, Protocol

from pyroce.host.notify import EventFdQueue, PollerWakeup
from pyroce.host.registry import open_device, release_device
from pyroce.ib.enums import Access, QpState
from pyroce.nic.events import AsyncEvent, EventQueue
from pyroce.nic.memory import BindError, BusyError, MemoryRegion, MemoryWindow
from pyroce.nic.queues import HwCq
from pyroce.nic.rings import RecvRing
from pyroce.nic.srq import HwSrq
from pyroce.nicd.cm_commands import ConnectionManagerCommands
from pyroce.nicd.process_memory import ForeignMemory, ProcessAccess
from pyroce.nicd.protocol import Handle, PassFd
from pyroce.nicd.refused import CommandRefused
from pyroce.verbs.mr import memory_at
from pyroce.wire.opcodes import Transport

DEVICE_PREFIX = "device."  # a device command's name on the wire: "device.create_qp"
PROGRESS = "thread"  # the client lends the engine no thread: the NIC's engine thread does everything
# the QP attributes (``transport.rc.QpConfig`` fields) a modify may change
MODIFIABLE = frozenset({"dqpn", "pmtu", "sq_psn", "rq_psn", "access", "max_rd_atomic", "max_dest_rd_atomic", "timeout",
                        "retry_cnt", "rnr_retry", "min_rnr_timer", "pkey", "qkey", "sqd_notify"})  # fmt: skip


# errnos of the device model's refusals; the client raises the same exception types again
REFUSALS: tuple[tuple[type[Exception], int], ...] = (
    (BusyError, errno.EBUSY), (BindError, errno.EPERM), (KeyError, errno.ENOENT), (ValueError, errno.EINVAL),
)  # fmt: skip

Piece = tuple[int, int]  # (arena offset, length)


class Pieces(Protocol):
    """Where the pieces a connection names are (``nicd.arena.Arena``; the simulator bridge's
    mirrors of a driver's regions, ``bridge.model``)."""

    def view(self, offset: int, length: int) -> memoryview: ...


class DeviceCommands(ConnectionManagerCommands):
    """One connection's commands on the device: its handles, its QPNs, its arena."""

    def __init__(self, pid: int, arena: Pieces) -> None:
        self.pid = pid
        self.process = ProcessAccess(pid)  # what its MRs' memory outside the arena is reached through
        self.arena = arena
        self.device: Any = None
        self.objects: dict[int, object] = {}
        self.next_handle = 1
        self.qpns: set[int] = set()
        self.poller: PollerWakeup | None = None  # what its empty polls sleep on, one for all its CQs

    def run(self, name: str, arguments: tuple[Any, ...]) -> Any:
        """Run one command of ``DEVICE_COMMANDS``; the device model's refusals become errnos."""
        if name not in DEVICE_COMMANDS:
            raise CommandRefused(errno.EOPNOTSUPP, f"no device command {name!r}")
        try:
            return getattr(self, name)(*arguments)
        except CommandRefused:
            raise
        except tuple(kind for kind, _ in REFUSALS) as exc:
            code = next(code for kind, code in REFUSALS if isinstance(exc, kind))
            raise CommandRefused(code, str(exc)) from None

    # --- names ---------------------------------------------------------------------

    def _handle(self, obj: object) -> Handle:
        number = self.next_handle
        self.next_handle += 1
        self.objects[number] = obj
        return Handle(number)

    def _object(self, handle: Any, kind: type | tuple[type, ...]) -> Any:
        obj = self.objects.get(int(handle)) if isinstance(handle, int) else None
        if not isinstance(obj, kind):
            raise CommandRefused(errno.EBADF, f"no such object {handle!r} on this connection")
        return obj

    def _forget(self, handle: Any) -> None:
        self.objects.pop(int(handle), None)

    def _qpn(self, qpn: Any) -> int:
        if qpn not in self.qpns:
            raise CommandRefused(errno.EINVAL, f"QP {qpn!r} is not one of this connection's")
        return int(qpn)

    def _view(self, piece: Piece) -> memoryview:
        offset, length = piece
        return self.arena.view(offset, length)

    def _events(self, handle: Any) -> EventQueue[Any] | None:
        return None if handle is None else self._object(handle, _QUEUE_TYPES)

    def _device(self) -> Any:
        if self.device is None:
            raise CommandRefused(errno.EPROTO, "open the device first")
        return self.device

    # --- the device ---------------------------------------------------------------------

    def open_device(self, name: str) -> tuple[str, PassFd]:
        """The device's address and its doorbell register (the engine's hand-off pipe)."""
        if self.device is None:
            self.device = open_device(name, PROGRESS)
        return self.device.address, PassFd(self.device.doorbell_fd)

    def port_active(self) -> bool:
        return bool(self._device().port_active)

    def route(self, gid: bytes) -> str | None:
        return self._device().route(bytes(gid))

    def stats(self) -> dict[str, int]:
        return self._device().stats()

    def kick(self) -> None:
        self._device().kick()

    # --- event queues --------------------------------------------------------------------

    def open_async_events(self) -> tuple[Handle, PassFd]:
        queue = self._device().open_async_events()
        return self._handle(queue), PassFd(queue.fileno())

    def close_async_events(self, handle: Any) -> None:
        self._device().close_async_events(self._object(handle, _QUEUE_TYPES))
        self._forget(handle)

    def create_comp_channel(self) -> tuple[Handle, PassFd]:
        channel = self._device().create_comp_channel()
        return self._handle(channel), PassFd(channel.fileno())

    def destroy_comp_channel(self, handle: Any) -> None:
        self._device().destroy_comp_channel(self._object(handle, _QUEUE_TYPES))
        self._forget(handle)

    def take_event(self, handle: Any) -> Any:
        """The next item of a queue (a CQN, or an async event as (type, element, reason)),
        EAGAIN if none waits: the client waits on the queue's fd, never the NIC."""
        item = self._object(handle, _QUEUE_TYPES).take()
        if item is None:
            raise CommandRefused(errno.EAGAIN, "no event waits")
        return tuple(item) if isinstance(item, AsyncEvent) else item

    # --- memory ---------------------------------------------------------------------------

    def alloc_pd(self) -> int:
        return self._device().alloc_pd()

    def _memory(self, piece: Piece | None, addr: int, length: int, access: int) -> tuple[memoryview, Any]:
        """The bytes an MR names: an arena piece, or the client's memory at ``addr`` (mirrored)."""
        if piece is not None:
            return self._view(piece), None
        if addr == 0 and length:
            raise CommandRefused(errno.EFAULT, "no memory at address 0")
        memory, view, _ = memory_at(ForeignMemory(self.pid, addr, length, self.process), length, "register a MR",
                                    bool(access & Access.LOCAL_WRITE))  # fmt: skip
        return view, memory

    def reg_mr(self, pdn: int, piece: Piece | None, addr: int, length: int, access: int) -> tuple[Handle, int]:
        view, mirrored = self._memory(piece, addr, length, access)
        region = self._device().reg_mr(pdn, view, addr, Access(access), mirrored)
        return self._handle(region), region.key

    def dereg_mr(self, handle: Any) -> None:
        self._device().dereg_mr(self._object(handle, (MemoryRegion, MemoryWindow)))
        self._forget(handle)

    def rereg_mr(self, handle: Any, pdn: int, access: int) -> None:
        self._device().rereg_mr(self._object(handle, MemoryRegion), pdn, Access(access))

    def retranslate_mr(self, handle: Any, piece: Piece | None, addr: int, length: int) -> None:
        region = self._object(handle, MemoryRegion)
        view, mirrored = self._memory(piece, addr, length, int(region.access))
        self._device().retranslate_mr(region, view, addr, mirrored)

    def alloc_mw(self, pdn: int, mw_type: int) -> tuple[Handle, int]:
        window = self._device().alloc_mw(pdn, mw_type)
        return self._handle(window), window.key

    def bind_mw(self, handle: Any, region: Any, addr: int, length: int, access: int, key_byte: int,
                qpn: int) -> int:  # fmt: skip
        """Bind a type 1 window; its key afterwards."""
        window = self._object(handle, MemoryWindow)
        mr = None if region is None else self._object(region, MemoryRegion)
        self._device().bind_mw(window, mr, addr, length, Access(access), key_byte, self._qpn(qpn))
        return window.key

    def mw_key(self, handle: Any) -> int:
        """A window's key now (a type 2 window's changes with each BIND_MW WQE)."""
        return self._object(handle, MemoryWindow).key

    # --- completion queues ------------------------------------------------------------------

    def create_cq(self, ring: Piece, count: int, consumer: Piece, channel: Any, events: Any) -> tuple[Handle, int]:
        cq = self._device().create_cq(self._view(ring), count, self._view(consumer), self._events(channel),
                                      self._events(events))  # fmt: skip
        if self.poller is not None:
            self.device.wake_poller(cq, self.poller)
        return self._handle(cq), cq.cqn

    def poller_wakeup(self, flag: Piece) -> PassFd:
        """What the Python driver's polls sleep on once they keep finding nothing
        (``RemoteDevice.poll_empty``): an eventfd the NIC writes with a CQE on any of the
        connection's CQs while the byte ``flag`` (in the arena) is set (``NicDevice.wake_poller``).
        One for the connection, made at the first call: the driver's poll does not say which CQ
        it waits on, and a wake-up for another CQ costs a look at the ring."""
        if self.poller is None:
            device = self._device()
            self.poller = PollerWakeup(self._view(flag)[:1], device.counters)
            for obj in self.objects.values():
                if isinstance(obj, HwCq):
                    device.wake_poller(obj, self.poller)
        return PassFd(self.poller.fileno())

    def cq_producer(self, handle: Any) -> int:
        return self._object(handle, HwCq).producer

    def resize_cq(self, handle: Any, ring: Piece, count: int, consumer: int) -> None:
        self._device().resize_cq(self._object(handle, HwCq), self._view(ring), count, consumer)

    def arm_cq(self, handle: Any, solicited_only: bool) -> None:
        self._device().arm_cq(self._object(handle, HwCq), bool(solicited_only))

    def destroy_cq(self, handle: Any) -> None:
        self._device().destroy_cq(self._object(handle, HwCq))
        self._forget(handle)

    # --- shared receive queues -------------------------------------------------------------

    def create_srq(self, ring: Piece, count: int, stride: int, doorbell: Piece, events: Any) -> tuple[Handle, int]:
        srq = self._device().create_srq(self._view(ring), count, stride, self._view(doorbell), self._events(events))
        return self._handle(srq), srq.srqn

    def arm_srq(self, handle: Any, limit: int) -> None:
        self._device().arm_srq(self._object(handle, HwSrq), limit)

    def srq_limit(self, handle: Any) -> int:
        return self._device().srq_limit(self._object(handle, HwSrq))

    def resize_srq(self, handle: Any, ring: Piece, count: int, stride: int) -> None:
        self._device().resize_srq(self._object(handle, HwSrq), RecvRing(self._view(ring), count, stride))

    def destroy_srq(self, handle: Any) -> None:
        self._device().destroy_srq(self._object(handle, HwSrq))
        self._forget(handle)

    # --- queue pairs ---------------------------------------------------------------------------

    def create_qp(self, pdn: int, send_cq: Any, recv_cq: Any, sq: Piece, sq_wqebbs: int, rq: Piece | None,
                  rq_count: int, rq_stride: int, doorbell: Piece, transport: int, srq: Any,
                  events: Any) -> int:  # fmt: skip
        """A QP; ``rq`` None for a QP on an SRQ (the NIC never reads its own receive ring)."""
        rq_view = self._view(rq) if rq is not None else memoryview(bytearray(rq_count * rq_stride))
        device = self._device()
        qpn = device.create_qp(pdn, self._object(send_cq, HwCq), self._object(recv_cq, HwCq), self._view(sq),
                               sq_wqebbs, rq_view, rq_count, rq_stride, self._view(doorbell), Transport(transport),
                               None if srq is None else self._object(srq, HwSrq), self._events(events))  # fmt: skip
        self.qpns.add(qpn)
        device.qp_owners[qpn] = self.pid  # `pyroce stats --qp` says whose it is
        return qpn

    def modify_qp(self, qpn: int, state: int, changes: dict[str, Any], peer: str | None) -> None:
        unknown = set(changes) - MODIFIABLE
        if unknown:
            raise CommandRefused(errno.EINVAL, f"no QP attribute {sorted(unknown)}")
        if "access" in changes:
            changes = {**changes, "access": Access(changes["access"])}
        self._device().modify_qp(self._qpn(qpn), QpState(state), changes, peer)

    def destroy_qp(self, qpn: int) -> None:
        self._device().destroy_qp(self._qpn(qpn))
        self.qpns.discard(qpn)

    def attach_mcast(self, qpn: int, gid: bytes) -> None:
        self._device().attach_mcast(self._qpn(qpn), _gid(gid))

    def detach_mcast(self, qpn: int, gid: bytes) -> None:
        self._device().detach_mcast(self._qpn(qpn), _gid(gid))

    def qp_state(self, qpn: int) -> int:
        return int(self._device().qp_state(self._qpn(qpn)))

    def qp_sq_draining(self, qpn: int) -> bool:
        return self._device().qp_sq_draining(self._qpn(qpn))

    def qp_error_detail(self, qpn: int) -> str:
        return self._device().qp_error_detail(self._qpn(qpn))

    def qp_stats(self, qpn: int) -> dict[str, int]:
        return self._device().qp_stats(self._qpn(qpn))

    # --- fault injection (pyroce.testing.faults) ------------------------------------------------

    def inject_qp_error(self, qpn: int, detail: str) -> None:
        self._device().inject_qp_error(self._qpn(qpn), detail)

    def inject_rnr(self, qpn: int, count: int) -> None:
        self._device().inject_rnr(self._qpn(qpn), count)

    def inject_cq_overrun(self, handle: Any, count: int) -> None:
        self._device().inject_cq_overrun(self._object(handle, HwCq), count)

    def set_port_state(self, active: bool) -> None:
        """The port down or up: every program on the NIC sees it, as a pulled cable."""
        self._device().set_port_state(bool(active))

    # --- the end -----------------------------------------------------------------------------

    def close(self) -> dict[str, int]:
        """The connection is gone: destroy what it left (QPs, then SRQs, MRs and windows, CQs,
        event queues), as the kernel does for a dead process; how many of each went."""
        left: dict[str, int] = {}
        device = self.device
        if device is None:
            return left
        ids = self.cm_close()  # the rdma_cm file first: connected ids send their DREQ
        if ids:
            left["CM id"] = ids
        for qpn in sorted(self.qpns):
            device.destroy_qp(qpn)
            left["QP"] = left.get("QP", 0) + 1
        self.qpns.clear()
        order = ((HwSrq, device.destroy_srq, "SRQ"), ((MemoryWindow, MemoryRegion), device.dereg_mr, "MR"),
                 (HwCq, device.destroy_cq, "CQ"))  # fmt: skip
        for kind, destroy, name in order:
            for number, obj in list(self.objects.items()):
                if isinstance(obj, kind):
                    if isinstance(obj, HwSrq):
                        obj.qps = 0  # its QPs went above
                    destroy(obj)
                    del self.objects[number]
                    left[name] = left.get(name, 0) + 1
        for queue in self.objects.values():
            device.close_async_events(queue)  # a channel or a context's queue: closed either way
        self.objects.clear()
        if self.poller is not None:  # its CQs went above
            self.poller.close()
            self.poller = None
        self.device = None
        release_device(device)
        return left


def _gid(gid: Any) -> bytes:
    if not isinstance(gid, bytes) or len(gid) != 16:
        raise CommandRefused(errno.EINVAL, f"a GID is 16 bytes, not {gid!r}")
    return gid


DEVICE_COMMANDS = frozenset(name for kind in DeviceCommands.__mro__[:-1] for name in vars(kind)
                            if not name.startswith("_") and name not in ("run", "close", "cm_close"))  # fmt: skip
"""The NIC's command layer: every command a Python driver may send, and nothing else."""

_QUEUE_TYPES = (EventFdQueue,)  # a completion channel or a context's async events, as the host makes them
