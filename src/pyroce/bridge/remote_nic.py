"""The driver side of the bridge: ``RemoteNic``, the device the verbs drive
(``Context(device=RemoteNic(...))``) when the NIC is a model at the other end of a stream.

The verbs objects and their checks stay here, as on the shared NIC (``nicd.remote_device``,
whose command calls this reuses); what differs is the memory and the clock. Every ring,
record and MR the verbs hand the device is a *region* of this process, named to the model by
a number and a length and never by an address; the model reaches it only by DMA_READ and
DMA_WRITE messages, answered here while a COMMAND or TIME waits for its REPLY. A doorbell is a
DOORBELL message with the producer counter, an arm a DOORBELL too; events come as EVENT
messages into local event queues (their fds readable as the kernel's are). The model runs only
when told: ``Fabric`` keeps the simulated time and carries the models' Ethernet frames, and a
poll that finds its CQ empty runs one round of it.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from pyroce.bridge.messages import (
    ARM_CQ,
    RECV,
    SEND,
    VERSION,
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
)
from pyroce.host.notify import EventFdQueue
from pyroce.host.simulated_time import next_time
from pyroce.nic.events import AsyncEvent
from pyroce.nic.rings import DoorbellRecord
from pyroce.nicd.client import NicError
from pyroce.nicd.remote_device import RemoteCq, RemoteDevice, RemoteRegion
from pyroce.verbs.driver_memory import LOCAL, address_of
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

MAX_EVENTS = 4096  # items an event queue holds (as the host's queues)


class BridgeQueue(EventFdQueue[Any]):
    """A local event queue the model fills with EVENT messages; ``handle``: the model's name for it."""

    def __init__(self, handle: int) -> None:
        super().__init__(MAX_EVENTS)
        self.handle = handle


class Fabric:
    """The world the driver side keeps for its models: simulated time (``now``, seconds, by
    ``host.simulated_time``'s rule), and the Ethernet between their ports (a hub: each frame
    to every other port; a port drops what is not its own)."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.nics: list[RemoteNic] = []

    def carry(self, sender: RemoteNic, frame: bytes) -> None:
        for nic in self.nics:
            if nic is not sender:
                nic.outbox.append(frame)

    def run(self) -> None:
        """One round: every model steps to ``now``, then time moves on."""
        steps = [nic.step(self.now) for nic in list(self.nics)]
        busy = any(working for working, _ in steps) or any(nic.outbox for nic in self.nics)
        self.now = next_time(self.now, busy, (deadline for _, deadline in steps))


class RemoteNic(RemoteDevice):
    """A model's NIC over ``sock`` (HELLO is said here, a version mismatch is ``EPROTONOSUPPORT``),
    on ``fabric``'s wire and clock."""

    progress_mode = "host"  # the model runs when the fabric steps it

    def __init__(self, sock: socket.socket, fabric: Fabric) -> None:
        self.stream = Stream(sock)
        self.fabric = fabric
        self.memory = LOCAL
        self.regions: dict[int, memoryview] = {}  # region number -> the bytes the model reaches
        self.queues: dict[int, BridgeQueue] = {}  # the model's handle -> the local queue
        self.outbox: list[bytes] = []  # frames the wire brought, for the model's port
        self.dma_errors = 0  # DMA_WRITEs to no region, or past its end
        self._records: dict[int, DoorbellRecord] = {}  # QPN -> its doorbell record
        self._channels: dict[Any, BridgeQueue] = {}  # a CQ's handle -> its completion channel
        self._seq = 0
        self._next_region = 1
        self.doorbell_fd = -1
        self.stream.send(Hello(VERSION, {}))
        answer = self._next()
        if isinstance(answer, Reply):
            raise PyverbsRDMAError(f"The bridge's model refused: {answer.answer[-1]}", _errno(answer.answer))
        if not isinstance(answer, Hello) or answer.version != VERSION:
            raise PyverbsRDMAError(f"The bridge's model answered {answer!r}, not HELLO version {VERSION}",
                                   errno.EPROTONOSUPPORT)  # fmt: skip
        self.name, self.address = str(answer.details["name"]), str(answer.details["address"])
        fabric.nics.append(self)

    # --- the stream ---------------------------------------------------------------------

    def _next(self) -> Message:
        message = self.stream.receive()
        if message is None:
            raise PyverbsRDMAError("The bridge's model hung up", errno.ECONNRESET)
        return message

    def _exchange(self, request: Command | Time) -> Any:
        """Send ``request`` and serve the model's DMA, events and frames until its REPLY."""
        for frame in self.outbox:
            self.stream.send(Frame(frame))
        self.outbox.clear()
        self.stream.send(request)
        complaint: Reply | None = None  # about a message with no answer of its own (a doorbell)
        while True:
            message = self._next()
            if isinstance(message, Reply) and message.seq == request.seq:
                break
            if isinstance(message, Reply) and message.seq == 0:
                complaint = message
            else:
                self._serve(message)
        if complaint is not None:
            raise PyverbsRDMAError(f"The bridge's model: {complaint.answer[-1]}", _errno(complaint.answer))
        if message.answer[0] == "err":
            raise NicError(_errno(message.answer), str(message.answer[-1]))
        return message.answer[1] if len(message.answer) > 1 else None

    def _serve(self, message: Message) -> None:
        if isinstance(message, DmaRead):
            view = self.regions.get(message.region)
            end = message.offset + message.length
            if view is None or end > len(view):
                self.stream.send(DmaData(message.tag, errno.EFAULT, b""))
            else:
                self.stream.send(DmaData(message.tag, 0, bytes(view[message.offset : end])))
        elif isinstance(message, DmaWrite):
            view = self.regions.get(message.region)
            end = message.offset + len(message.data)
            if view is None or end > len(view):
                self.dma_errors += 1
            else:
                view[message.offset : end] = message.data
        elif isinstance(message, Event):
            queue = self.queues.get(message.queue)
            if queue is not None:
                item = message.item
                queue.put(AsyncEvent(*item) if isinstance(item, tuple) else item)
        elif isinstance(message, Frame):
            self.fabric.carry(self, message.data)
        else:
            raise PyverbsRDMAError(f"The bridge's model sent {type(message).__name__} out of turn", errno.EPROTO)

    def _sequence(self) -> int:
        self._seq = self._seq % 0xFFFFFFFF + 1
        return self._seq

    def call_raw(self, command: str, *args: Any) -> Any:
        """Run a device command in the model; a refusal is ``NicError`` (``call`` maps it)."""
        return self._exchange(Command(self._sequence(), command, args))

    def step(self, now: float) -> tuple[bool, float | None]:
        """The model runs to simulated time ``now`` (seconds, as host mode's ``step``): whether
        it has work left, and when its next timer is due."""
        busy, deadline = self._exchange(Time(self._sequence(), round(now * 1e9)))
        return bool(busy), None if deadline is None else deadline / 1e9

    # --- memory: regions ---------------------------------------------------------------

    def _piece(self, view: memoryview) -> tuple[int, int]:
        """A new region for ``view``: its number and length, all the model knows of it."""
        region, self._next_region = self._next_region, self._next_region + 1
        self.regions[region] = view
        return region, len(view)

    def _program_piece(self, view: memoryview) -> tuple[int, int]:
        return self._piece(view)

    def _forget(self, view: memoryview) -> None:
        """The regions of ``view``'s bytes: the model reaches them no more."""
        at = address_of(view) if len(view) else None
        for region, held in list(self.regions.items()):
            if len(held) == len(view) and (address_of(held) if len(held) else None) == at:
                del self.regions[region]

    def dereg_mr(self, region: Any) -> None:
        super().dereg_mr(region)
        if isinstance(region, RemoteRegion):
            self._forget(region.view)

    def retranslate_mr(self, region: RemoteRegion, view: memoryview, addr: int, mirrored: Any = None) -> None:
        old = region.view
        super().retranslate_mr(region, view, addr, mirrored)
        self._forget(old)

    # --- doorbells and progress ------------------------------------------------------------

    def create_qp(self, pdn: int, send_cq: RemoteCq, recv_cq: RemoteCq, sq_buf: memoryview, sq_wqebbs: int,
                  rq_buf: memoryview, rq_count: int, rq_stride: int, doorbell: memoryview, transport: int = 0,
                  srq: Any = None, events: Any = None) -> int:  # fmt: skip
        qpn = super().create_qp(pdn, send_cq, recv_cq, sq_buf, sq_wqebbs, rq_buf, rq_count, rq_stride, doorbell,
                                transport, srq, events)  # fmt: skip
        self._records[qpn] = DoorbellRecord(doorbell)
        return qpn

    def destroy_qp(self, qpn: int) -> None:
        super().destroy_qp(qpn)
        self._records.pop(qpn, None)

    def ring_doorbell(self, qpn: int) -> None:
        self.stream.send(Doorbell(SEND, qpn, self._records[qpn].read(DoorbellRecord.SEND)))

    def note_receives(self, qpn: int) -> None:
        self.stream.send(Doorbell(RECV, qpn, self._records[qpn].read(DoorbellRecord.RECV)))

    def arm_cq(self, cq: RemoteCq, solicited_only: bool) -> None:
        self.stream.send(Doorbell(ARM_CQ, cq.cqn, int(solicited_only)))

    def poll_empty(self) -> None:
        """An empty CQ: the fabric runs a round (the models step, frames move, time goes on)."""
        self.fabric.run()

    def kick(self) -> None:
        self.fabric.run()

    def close(self) -> None:
        """The model is hung up on (it ends its device); the fabric carries no more to it."""
        if self in self.fabric.nics:
            self.fabric.nics.remove(self)
        self.stream.close()
        for queue in self.queues.values():
            queue.close()

    # --- event queues (filled by EVENT messages) ---------------------------------------------

    def _queue(self, command: str) -> BridgeQueue:
        queue = BridgeQueue(self.call(command))
        self.queues[queue.handle] = queue
        return queue

    def open_async_events(self) -> BridgeQueue:  # type: ignore[override]
        return self._queue("open_async_events")

    def close_async_events(self, queue: Any) -> None:
        self.call("close_async_events", queue.handle)
        self.queues.pop(queue.handle).close()

    def create_comp_channel(self) -> BridgeQueue:  # type: ignore[override]
        return self._queue("create_comp_channel")

    def destroy_comp_channel(self, channel: Any) -> None:
        self.call("destroy_comp_channel", channel.handle)
        self.queues.pop(channel.handle).close()

    def create_cq(self, buf: memoryview, cqe_count: int, consumer_record: memoryview, channel: Any = None,
                  events: Any = None) -> RemoteCq:  # fmt: skip
        cq = super().create_cq(buf, cqe_count, consumer_record, channel, events)
        if channel is not None:
            self._channels[cq.handle] = channel
        return cq

    def destroy_cq(self, cq: RemoteCq) -> None:
        """The CQ's events still queued here go with it (as the model's, as ib_uverbs does)."""
        super().destroy_cq(cq)
        channel = self._channels.pop(cq.handle, None)
        if channel is not None:
            channel.discard(lambda cqn: cqn == cq.cqn)


def _errno(answer: tuple[Any, ...]) -> int:
    code = answer[1] if len(answer) > 2 and isinstance(answer[1], int) else 0
    return code if code > 0 else errno.EIO
