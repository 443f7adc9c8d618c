"""The model side of the bridge, serving pyroce's own engine: what an RTL simulation's harness
implements instead (docs/architecture.md, "The simulator bridge").

``ModelServer`` serves one driver over a ``Stream``: a ``NicDevice`` in host mode whose rings,
records and MRs are mirrors of the driver's regions (``bridge.dma``), kept by DMA only; whose
port is an ``EthernetLink`` whose frames travel as FRAME messages; and whose engine runs only
when a TIME message says, at the simulated time it names. Commands are the shared NIC's
(``nicd.commands.DeviceCommands``), with memory named by region instead of arena offset; a
doorbell is posted, and its WQEs are pulled when the next COMMAND or TIME is served (the
driver is then listening for DMA). Every message the model cannot use is answered with an
error REPLY; a version mismatch is one, and the end of the connection.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from collections.abc import Callable
from typing import Any

from pyroce.bridge.dma import DmaMemory, RingMirror
from pyroce.bridge.messages import (
    ARM_CQ,
    RECV,
    SEND,
    VERSION,
    BadMessage,
    Command,
    DmaData,
    DmaRead,
    DmaWrite,
    Doorbell,
    Event,
    Frame,
    Hello,
    Message,
    Reply,
    Stream,
    Time,
    encode,
)
from pyroce.host.assembly import build_device
from pyroce.host.notify import EventFdQueue
from pyroce.ib.enums import QpState
from pyroce.link.ethernet import EthernetLink
from pyroce.nic.device import NicDevice
from pyroce.nic.events import AsyncEvent
from pyroce.nic.queues import HwCq
from pyroce.nic.rings import COUNTER_MASK, DoorbellRecord
from pyroce.nic.srq import HwSrq
from pyroce.nic.wqe import WQEBB
from pyroce.nicd.commands import DEVICE_COMMANDS, DeviceCommands, Piece
from pyroce.nicd.protocol import Handle, ProtocolError
from pyroce.nicd.refused import CommandRefused
from pyroce.nicd.session import errno_of

log = logging.getLogger(__name__)

# The shared NIC's device commands less those the bridge does otherwise: events come as EVENT
# messages (no fds to pass, nothing to take), the engine runs on TIME (no kick), no rdma_cm.
BRIDGE_COMMANDS = frozenset(name for name in DEVICE_COMMANDS
                            if not name.startswith("cm_") and name not in ("open_device", "take_event", "kick"))  # fmt: skip


class ModelMemory:
    """The mirrors of the driver's rings and records, by region (``Pieces`` for the commands)."""

    def __init__(self, port: ModelServer) -> None:
        self.port = port
        self.rings: dict[int, RingMirror] = {}
        self._by_mirror: dict[int, RingMirror] = {}  # id of a mirror's mapping -> its ring

    def view(self, region: int, length: int) -> memoryview:
        """Region ``region`` (pulled whole when first named); ValueError if named again with another length."""
        ring = self.rings.get(region)
        if ring is None:
            if not 0 <= length <= 1 << 30:
                raise ValueError(f"a ring of {length} bytes")
            ring = self.rings[region] = RingMirror(self.port, region, length)
            self._by_mirror[id(ring.mirror)] = ring
        elif ring.length != length:
            raise ValueError(f"region {region} has {ring.length} bytes, not {length}")
        return memoryview(ring.mirror)[:length]

    def ring_of(self, view: memoryview) -> RingMirror:
        """The mirror a ring's view (the engine's ``buf``) is of."""
        return self._by_mirror[id(view.obj)]

    def sync(self) -> None:
        for ring in self.rings.values():
            ring.sync()

    def prune(self) -> None:
        """Drop the mirrors no queue uses any more (a destroyed or resized one's): a mapping
        closes only when no view of it is left."""
        for region, ring in list(self.rings.items()):
            ring.close()
            if ring.mirror.closed:
                del self.rings[region]
                del self._by_mirror[id(ring.mirror)]


class ModelCommands(DeviceCommands):
    """The device commands of the driver at the other end of the bridge."""

    def __init__(self, device: NicDevice, memory: ModelMemory) -> None:
        super().__init__(os.getpid(), memory)
        self.device = device
        self.memory = memory

    def run(self, name: str, arguments: tuple[Any, ...]) -> Any:
        if name not in BRIDGE_COMMANDS:
            raise CommandRefused(errno.EOPNOTSUPP, f"no bridge command {name!r}")
        try:
            return super().run(name, arguments)
        finally:
            if name.startswith(("destroy_", "resize_", "dereg_")):
                self.memory.prune()

    def _memory(self, piece: Piece | None, addr: int, length: int, access: int) -> tuple[memoryview, Any]:
        """An MR is always a region of the driver's, reached by DMA."""
        if piece is None or piece[1] != length:
            raise CommandRefused(errno.EINVAL, "an MR over the bridge is a region of its length")
        memory = DmaMemory(self.memory.port, piece[0], addr, length)
        return memoryview(memory.mirror)[:length], memory

    def modify_qp(self, qpn: int, state: int, changes: dict[str, Any], peer: str | None) -> None:
        """A reset QP's queues start empty: its doorbell record is zero on both sides (the
        driver zeroes its own, as the verbs do), not the producers the mirror last heard."""
        super().modify_qp(qpn, state, changes, peer)
        if state == QpState.RESET:
            record = self.device.qps[qpn].doorbell
            record.buf[:] = bytes(DoorbellRecord.SIZE)
            self.memory.ring_of(record.buf).accept(0, DoorbellRecord.SIZE)

    def open_async_events(self) -> Handle:  # type: ignore[override]
        return self._handle(self._device().open_async_events())

    def create_comp_channel(self) -> Handle:  # type: ignore[override]
        return self._handle(self._device().create_comp_channel())

    def queues(self) -> list[tuple[int, EventFdQueue[Any]]]:
        """The event queues the driver holds, by handle."""
        return [(number, obj) for number, obj in self.objects.items() if isinstance(obj, EventFdQueue)]

    def owned(self, kind: type) -> list[Any]:
        return [obj for obj in self.objects.values() if isinstance(obj, kind)]


class ModelServer:
    """Serves one driver over ``stream`` with ``device`` (host mode) on ``link``; ``now`` is
    the simulated time of the last TIME, the device's clock."""

    def __init__(self, stream: Stream, device: NicDevice, link: EthernetLink) -> None:
        self.stream = stream
        self.device = device
        self.link = link
        self.now = 0.0
        self.memory = ModelMemory(self)
        self.commands = ModelCommands(device, self.memory)
        self._doorbells: list[Doorbell] = []  # posted, applied when the driver next listens
        self._tag = 0

    # --- DMA (the driver answers while it waits for a REPLY) ----------------------------

    def dma_read(self, region: int, offset: int, length: int) -> bytes:
        self._tag = (self._tag + 1) & 0xFFFFFFFF
        self.stream.send(DmaRead(self._tag, region, offset, length))
        answer = self.stream.receive()
        if not isinstance(answer, DmaData) or answer.tag != self._tag:
            raise OSError(errno.EPROTO, f"DMA_READ {self._tag} answered by {type(answer).__name__}")
        if answer.status:
            raise OSError(answer.status, f"DMA_READ of region {region}: {os.strerror(answer.status)}")
        if len(answer.data) != length:
            raise OSError(errno.EIO, f"DMA_READ of {length} bytes answered with {len(answer.data)}")
        return answer.data

    def dma_write(self, region: int, offset: int, data: bytes) -> None:
        self.stream.send(DmaWrite(region, offset, bytes(data)))

    # --- serving -----------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer the driver until it hangs up (or says HELLO in another version)."""
        if not self._greet():
            return
        while True:
            try:
                message = self.stream.receive()
            except BadMessage as exc:
                self._refuse(exc.seq, errno.EPROTO, str(exc))
                continue
            except (ProtocolError, OSError) as exc:
                self._refuse(0, errno.EPROTO, f"{exc}: closing the bridge")
                return
            if message is None:
                return
            self._serve(message)

    def _greet(self) -> bool:
        try:
            hello = self.stream.receive()
        except (ProtocolError, OSError) as exc:
            return self._refuse(0, errno.EPROTO, f"no HELLO: {exc}")
        if not isinstance(hello, Hello):
            return hello is not None and self._refuse(0, errno.EPROTO, "the first message must be HELLO")
        if hello.version != VERSION:
            return self._refuse(0, errno.EPROTONOSUPPORT,
                                f"the driver speaks bridge version {hello.version}, this model {VERSION}")  # fmt: skip
        self.stream.send(Hello(VERSION, {"name": self.device.name, "address": self.device.address}))
        return True

    def _refuse(self, seq: int, code: int, text: str) -> bool:
        """An error REPLY (False: what the caller returns when the bridge ends with it)."""
        try:
            self.stream.send(Reply(seq, ("err", code, text)))
        except OSError:
            pass
        return False

    def _serve(self, message: Message) -> None:
        if isinstance(message, Doorbell):
            self._doorbells.append(message)
        elif isinstance(message, Frame):
            self.link.receive_frame(message.data)
        elif isinstance(message, Command):
            self._answer(message.seq, lambda: self.commands.run(message.name, message.arguments))
        elif isinstance(message, Time):
            self._answer(message.seq, lambda: self._step(message.now))
        else:
            self._refuse(0, errno.EPROTO, f"{type(message).__name__} is not a driver's message here")

    def _answer(self, seq: int, work: Callable[[], Any]) -> None:
        """Doorbells posted so far, then ``work``; what it changed goes back (memory, then
        events, then frames) before its REPLY."""
        try:
            self._ring_posted()
            answer: tuple[Any, ...] = ("ok", work())
        except CommandRefused as exc:
            answer = ("err", exc.error_code, str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure is the driver's errno, never the model's end
            answer = ("err", *errno_of("bridge", exc))
        try:
            self.memory.sync()
        except OSError as exc:
            self.device.counters["dma_errors"] += 1
            log.warning("a ring could not be written back: %s", exc)
        for number, queue in self.commands.queues():
            for item in queue.take_all():
                self.stream.send(Event(number, tuple(item) if isinstance(item, AsyncEvent) else item))
        while self.link.frames:
            self.stream.send(Frame(self.link.frames.popleft()))
        try:
            reply = encode(Reply(seq, answer))
        except ProtocolError as exc:  # an answer the codec cannot carry: a bug, told as one
            reply = encode(Reply(seq, ("err", errno.EIO, f"an answer the bridge cannot carry: {exc}")))
        self.stream.sock.sendall(reply)

    def _step(self, now_ns: int) -> tuple[bool, int | None]:
        """The engine at simulated time ``now_ns``: the records the driver writes without a
        doorbell are pulled first (SRQ producers, CQ consumers). (busy, next deadline in ns)."""
        self.now = max(self.now, now_ns / 1e9)  # time does not run backwards
        for srq in self.commands.owned(HwSrq):
            record = self.memory.ring_of(srq.doorbell.buf)
            old = srq.doorbell.read(DoorbellRecord.RECV)
            record.pull(0, DoorbellRecord.SIZE)
            fresh = (srq.doorbell.read(DoorbellRecord.RECV) - old) & COUNTER_MASK
            self.memory.ring_of(srq.ring.buf).pull_slots(old, fresh, srq.ring.stride, srq.ring.count)
        for cq in self.commands.owned(HwCq):
            self.memory.ring_of(cq.consumer_record).pull(0, len(cq.consumer_record))
        self.device.step(self.now)
        engine = self.device.engine
        deadline = engine.next_deadline()
        return engine.has_work, None if deadline is None else math.ceil(deadline * 1e9)

    def _ring_posted(self) -> None:
        """Apply the doorbells posted since the last COMMAND or TIME, in order: a producer's
        new WQEs are pulled, then its record holds the value, then the engine hears of it."""
        bells, self._doorbells = self._doorbells, []
        for bell in bells:
            try:
                self._ring(bell)
            except CommandRefused as exc:  # a register write has no answer: the complaint is seq 0's
                self._refuse(0, exc.error_code, f"{bell}: {exc}")
            except OSError as exc:
                self._refuse(0, exc.errno or errno.EIO, f"{bell}: {exc}")

    def _ring(self, bell: Doorbell) -> None:
        if bell.kind == ARM_CQ:
            cq = self.device.engine.cqs.get(bell.number)
            if cq is None or cq not in self.commands.owned(HwCq):
                raise CommandRefused(errno.EINVAL, f"no CQ {bell.number} to arm")
            self.device.arm_cq(cq, bool(bell.value))
            return
        qp = self.device.qps.get(bell.number)
        if bell.kind not in (SEND, RECV) or qp is None or bell.number not in self.commands.qpns:
            raise CommandRefused(errno.EINVAL, f"no doorbell {bell.kind} of QP {bell.number}")
        which = DoorbellRecord.SEND if bell.kind == SEND else DoorbellRecord.RECV
        old = qp.doorbell.read(which)
        fresh = (bell.value - old) & COUNTER_MASK
        if bell.kind == SEND:
            self.memory.ring_of(qp.sq.buf).pull_slots(old, fresh, WQEBB, qp.sq.wqebb_count)
        elif qp.srq is None:
            self.memory.ring_of(qp.rq.buf).pull_slots(old, fresh, qp.rq.stride, qp.rq.count)
        qp.doorbell.publish(which, bell.value)
        self.memory.ring_of(qp.doorbell.buf).accept(which, 4)  # the driver's value: none of the NIC's
        if bell.kind == SEND:
            self.device.ring_doorbell(bell.number)
        else:
            self.device.note_receives(bell.number)


def serve_model(sock: socket.socket, name: str, address: str) -> None:
    """Serve pyroce's engine as device ``name`` at ``address`` to the driver on ``sock``, until
    it hangs up; the device and the socket are closed then."""
    link = EthernetLink(address)
    stream = Stream(sock)
    server: ModelServer | None = None
    device = build_device(name, link, progress="host", clock=lambda: server.now if server else 0.0)
    try:
        server = ModelServer(stream, device, link)
        server.serve()
    finally:
        device.close()
        stream.close()
