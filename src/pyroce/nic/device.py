"""The NIC as its drivers see it: a device's commands, its doorbell register, its counters.

The verbs layer (and any other driver) reaches a ``NicDevice`` only by commands
(``alloc_pd``, ``reg_mr``, ``create_cq``, ``create_srq``, ``create_qp``, ``modify_qp``,
``destroy_*``, ``attach_mcast``/``detach_mcast``) and through memory: WQE rings and doorbell
records it writes, CQE rings it reads.
``ring_doorbell(qpn)`` and ``note_receives(qpn)`` are the doorbell register: hints that a QP's
doorbell record moved, handed to the engine through the host's ``Doorbells``.

The device is its engine (``nic.engine``: the passes, with ``nic.port`` and ``nic.timers``) and
the commands around it. What needs threads, fds or a clock is the host's and is given to it
(``pyroce.host.assembly`` puts a process's device together): the lock that serializes the
engine, the ``Doorbells`` that carry doorbells across threads, the ``Runner`` that decides who
runs the engine and when, and the event queues (``nic.events``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from pyroce.cm.manager import RdmaCm
from pyroce.ib.counters import Counters
from pyroce.ib.enums import CQ_EVENTS, QP_EVENTS, SRQ_EVENTS, Access
from pyroce.ib.limits import MAX_MSG_SZ
from pyroce.ib.reasons import Reason
from pyroce.nic.capture import DEFAULT_KEEP, Capture, FrameSink
from pyroce.nic.engine import PORT_ACTIVE, PORT_ERR, Engine
from pyroce.nic.events import AsyncEvent, EventQueue, Poller
from pyroce.nic.memory import MemoryRegion, MemoryWindow, MrTable
from pyroce.nic.mirrored import MirroredMemory
from pyroce.nic.queues import HwCq, HwQp
from pyroce.nic.rings import CqRing, DoorbellRecord, RecvRing, SendRing
from pyroce.nic.srq import HwSrq
from pyroce.transport.rc import QpConfig, QpState, RcQp
from pyroce.transport.ud import UdQp
from pyroce.wire.opcodes import Transport

FIRST_QPN = 0x11  # rxe's first QP number; 0 and 1 are the special QPs


class Doorbells(Protocol):
    """The doorbell register as the host carries it from any thread to the engine
    (``pyroce.host.handoff``): rung send queues and new receive WQEs, taken by the engine."""

    @property
    def doorbell_fd(self) -> int:
        """Where a driver holding no GIL writes doorbell records."""
        ...

    def ring(self, qpn: int) -> None:
        """The QP's send doorbell record moved."""
        ...

    def post_receives(self, qpn: int) -> None:
        """The QP's receive doorbell record moved."""
        ...

    def drain(self) -> None:
        """Take in the records written to ``doorbell_fd`` so far."""
        ...

    def take(self) -> list[int]:
        """The doorbell records queued since the last take (``Engine.doorbells`` reads them)."""
        ...

    def close(self) -> None: ...


class Runner(Protocol):
    """Who runs the engine, and when (``pyroce.host.progress``): in ``mode`` ``inline``,
    ``thread`` or ``host``. The device tells it what its drivers did; it runs engine passes
    under the device's lock."""

    mode: str

    def doorbell(self, qpn: int) -> None:
        """The QP's send doorbell was rung: hand it over (``Doorbells.ring``), then run or wake
        the engine as the mode says."""
        ...

    def wake(self) -> None:
        """A command changed what the engine has to do."""
        ...

    def poll_empty(self) -> None:
        """A driver's poll found its CQ empty."""
        ...

    def poll_found(self) -> None:
        """A driver's poll found completions."""
        ...

    def waiting(self) -> None:
        """A driver is about to block for an event: whoever runs the engine must now."""
        ...

    def run_inline(self) -> None:
        """Run the engine in the calling thread now."""
        ...

    def step(self, now: float) -> None:
        """One engine pass at the host's time ``now`` (host mode)."""
        ...

    def halt(self) -> None:
        """Stop the engine thread (the program is ending); inline and host passes still run."""
        ...

    def stop(self) -> None:
        """No more passes: the engine thread, if any, has ended when this returns."""
        ...


class CmCommands:
    """``device.cm``: the connection manager's commands (``cm.manager.RdmaCm``), each run
    under the device's lock, the engine woken after it (a command may have queued a MAD)."""

    def __init__(self, cm: RdmaCm, lock: AbstractContextManager[object], runner: Runner) -> None:
        self._cm = cm
        self._lock = lock
        self._runner = runner

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._cm, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        lock, runner = self._lock, self._runner

        def command(*args: object, **kwargs: object) -> object:
            with lock:
                result = attribute(*args, **kwargs)
            runner.wake()
            return result

        command.__name__ = name
        command.__doc__ = attribute.__doc__
        return command

    def __setattr__(self, name: str, value: object) -> None:
        """Settings (``path_mtu``, ``response_timeout``, ``max_retries``) are the manager's."""
        target = self if name.startswith("_") else self._cm
        object.__setattr__(target, name, value)


class NicDevice:
    """One pyroce device: ``engine`` and the commands on it, run by ``runner`` under ``lock``.
    It owns the engine's link and closes it, with ``doorbells`` and the event queues."""

    def __init__(self, name: str, engine: Engine, *, lock: AbstractContextManager[object], doorbells: Doorbells,
                 runner: Runner, new_channel: Callable[[], EventQueue[int]]) -> None:  # fmt: skip
        self.name = name
        self.engine = engine
        self.address = engine.port.address
        self._lock = lock  # engine state: held by whoever runs the engine or a command
        self._doorbells = doorbells
        self._progress = runner
        # What a driver's post and poll (and a host's step) tell the device, straight to the hand-off and the runner
        # (no call of the device's own between: these are every message's)
        self.ring_doorbell: Callable[[int], None] = runner.doorbell  # the doorbell register: new send WQEs
        # New receive WQEs: the engine reads them before it next reads packets (as a NIC reads
        # its receive queue on arrival), so posting receives costs no engine pass
        self.note_receives: Callable[[int], None] = doorbells.post_receives
        self.poll_empty: Callable[[], None] = runner.poll_empty  # a CQ found empty (inline: an engine pass)
        self.poll_found: Callable[[], None] = runner.poll_found  # a CQ found with completions waiting
        self.waiting: Callable[[], None] = runner.waiting  # a driver blocks for an event (inline: hand over)
        self.step: Callable[[float], None] = runner.step  # host mode: one engine pass at the host's time
        self._new_channel = new_channel  # a completion channel's queue
        self._closed = False
        self._retired: Counter[str] = Counters()  # counters of destroyed QPs
        self._next_pdn = 1
        self._next_cqn = 1
        self._next_qpn = FIRST_QPN
        self.qp_owners: dict[int, int] = {}  # QPN -> pid of the program whose QP it is (a shared NIC's)
        self._next_srqn = 1
        self.verb_faults: Callable[[str], int] | None = None  # a fault plan: the errno a verb fails with, or 0
        connection_manager = RdmaCm(self.address, new_channel, engine.counters)  # type: ignore[arg-type]
        engine.attach_cm(connection_manager)
        self.cm = CmCommands(connection_manager, lock, runner)

    @property
    def progress_mode(self) -> str:
        return self._progress.mode

    @property
    def mrs(self) -> MrTable:
        return self.engine.mrs

    @property
    def counters(self) -> Counter[str]:
        """Where the device's parts count their events by name; ``stats()`` reads every count."""
        return self.engine.counters

    @property
    def qps(self) -> dict[int, HwQp]:
        return self.engine.qps

    @property
    def last_error(self) -> str:
        """The traceback of the engine's last failure ("" if none; ``engine_errors`` counts them)."""
        return self.engine.last_error

    # --- commands -----------------------------------------------------------------------

    def alloc_pd(self) -> int:
        with self._lock:
            pdn, self._next_pdn = self._next_pdn, self._next_pdn + 1
            return pdn

    def reg_mr(self, pdn: int, view: memoryview, addr: int, access: Access,
               mirrored: MirroredMemory | None = None) -> MemoryRegion:  # fmt: skip
        """Register ``view`` at ``addr``; with ``mirrored`` (another process's memory), ``view``
        is its mirror (``nic.memory``)."""
        with self._lock:
            return self.engine.mrs.register(pdn, view, addr, access, mirrored)

    def dereg_mr(self, region: MemoryRegion | MemoryWindow) -> None:
        with self._lock:
            self.engine.mrs.deregister(region)

    def rereg_mr(self, region: MemoryRegion, pdn: int, access: Access) -> None:
        """Change an MR's PD and access in place (its key stays, as rxe keeps it)."""
        with self._lock:
            region.pdn, region.access = pdn, int(access)

    def retranslate_mr(self, region: MemoryRegion, view: memoryview, addr: int,
                       mirrored: MirroredMemory | None = None) -> None:  # fmt: skip
        """Point an MR at other memory, its key kept (``BusyError`` while a window is bound to it)."""
        with self._lock:
            self.engine.mrs.retranslate(region, view, addr, mirrored)

    def alloc_mw(self, pdn: int, mw_type: int) -> MemoryWindow:
        with self._lock:
            return self.engine.mrs.alloc_window(pdn, mw_type)

    def bind_mw(self, window: MemoryWindow, region: MemoryRegion | None, addr: int, length: int, access: Access,
                key_byte: int, qpn: int) -> None:  # fmt: skip
        """Bind a type 1 window (``BindError`` names a refused bind)."""
        with self._lock:
            self.engine.mrs.bind(window, region, addr, length, access, key_byte, qpn)

    def open_async_events(self) -> EventQueue[AsyncEvent]:
        """An async event queue for a new context (its ``async_fd``): the events of the objects
        created with it, and every port and device event."""
        return self.engine.event_queues.open()

    def close_async_events(self, queue: EventQueue[AsyncEvent]) -> None:
        self.engine.event_queues.close(queue)

    def _events(self, events: EventQueue[AsyncEvent] | None) -> EventQueue[AsyncEvent]:
        return events if events is not None else self.engine.events

    def create_comp_channel(self) -> EventQueue[int]:
        """A completion channel: the CQNs of the completion events of the CQs created on it."""
        return self._new_channel()

    def destroy_comp_channel(self, channel: EventQueue[int]) -> None:
        channel.close()

    def create_cq(self, buf: memoryview, cqe_count: int, consumer_record: memoryview,
                  channel: EventQueue[int] | None = None, events: EventQueue[AsyncEvent] | None = None) -> HwCq:  # fmt: skip
        """A CQ; ``events``: where its async events go (default: the device's own queue)."""
        with self._lock:
            cq = HwCq(self._next_cqn, CqRing(buf, cqe_count), consumer_record, self._events(events), channel)
            self._next_cqn += 1
            self.engine.cqs[cq.cqn] = cq
            return cq

    def resize_cq(self, cq: HwCq, buf: memoryview, cqe_count: int, consumer: int) -> None:
        """Move the CQ to a new ring; the CQEs not yet polled (from ``consumer`` on) move with
        it, in order, to the start of the new ring, and the consumer index restarts at 0."""
        with self._lock:
            pending = []
            for index in range(consumer, cq.producer):
                cqe = cq.ring.poll(index)
                if cqe is not None:
                    pending.append(cqe)
            if len(pending) > cqe_count:
                raise ValueError(f"{len(pending)} completions do not fit {cqe_count} entries")
            cq.ring = CqRing(buf, cqe_count)
            cq.producer = cq.consumer_seen = 0
            cq.consumer_record[:] = bytes(4)
            for cqe in pending:
                cq.producer = cq.ring.produce(cq.producer, cqe)

    def arm_cq(self, cq: HwCq, solicited_only: bool) -> None:
        """``ibv_req_notify_cq``: the next completion written to the CQ raises an event on its
        channel (with ``solicited_only``, the next solicited or failed one). A command under the
        engine lock, so a CQE written after this returns is one the arm sees."""
        with self._lock:
            cq.arm(solicited_only)

    def wake_poller(self, cq: HwCq, poller: Poller) -> None:
        """Wake ``poller`` with the CQ's next CQE whenever it sleeps (the C driver's
        ``ibv_poll_cq`` after a while of empty polls): it sets ``poller.napping[0]``, looks at
        the CQ once more and sleeps; the engine, writing a CQE, finds the flag set, clears it
        and wakes it. So a program that polls leaves the engine its CPU and still wakes when its
        completion is written, not at the end of a timed nap. A wake-up can be missed (nothing
        fences the engine's store of the CQE and its read of the flag against the poller's), so
        the poller sleeps no longer than the nap this replaces."""
        with self._lock:
            cq.poller = poller

    def destroy_cq(self, cq: HwCq) -> None:
        """Remove the CQ, and its events not yet read from its channel and its async event
        queue (as ib_uverbs does)."""
        with self._lock:
            self.engine.cqs.pop(cq.cqn, None)
            cq.armed = False
            cq.poller = None
        if cq.channel is not None:
            cq.channel.discard(lambda cqn: cqn == cq.cqn)
        _discard_events(cq.events, CQ_EVENTS, cq.cqn)

    def create_srq(self, buf: memoryview, count: int, stride: int, doorbell: memoryview,
                   events: EventQueue[AsyncEvent] | None = None) -> HwSrq:  # fmt: skip
        """A shared receive queue of ``count`` WQEs of ``stride`` bytes in ``buf``, its producer
        counter in the receive word of ``doorbell`` (``nic.srq``); its async events go to
        ``events`` (default: the device's own queue)."""
        with self._lock:
            srq = HwSrq(self._next_srqn, RecvRing(buf, count, stride), DoorbellRecord(doorbell),
                        self._events(events))  # fmt: skip
            self._next_srqn += 1
            return srq

    def arm_srq(self, srq: HwSrq, limit: int) -> None:
        """``ibv_modify_srq`` with IBV_SRQ_LIMIT: raise SRQ_LIMIT_REACHED once when fewer than
        ``limit`` WQEs are left posted (0 disarms)."""
        with self._lock:
            srq.limit = limit

    def srq_limit(self, srq: HwSrq) -> int:
        """The SRQ's armed limit (0 once the event fired, or never armed)."""
        with self._lock:
            return srq.limit

    def resize_srq(self, srq: HwSrq, ring: RecvRing) -> None:
        """Read the SRQ from ``ring`` from now on; the driver has copied the WQEs not yet taken
        into it, at the same counters."""
        with self._lock:
            srq.ring = ring

    def destroy_srq(self, srq: HwSrq) -> None:
        """ValueError while a QP takes its receives from it (the verbs answer EBUSY)."""
        with self._lock:
            if srq.qps:
                raise ValueError(f"SRQ {srq.srqn} is in use by {srq.qps} QPs")
            srq.limit = 0
        _discard_events(srq.events, SRQ_EVENTS, srq.srqn)

    def create_qp(self, pdn: int, send_cq: HwCq, recv_cq: HwCq, sq_buf: memoryview, sq_wqebbs: int,
                  rq_buf: memoryview, rq_count: int, rq_stride: int, doorbell: memoryview,
                  transport: Transport = Transport.RC, srq: HwSrq | None = None,
                  events: EventQueue[AsyncEvent] | None = None) -> int:  # fmt: skip
        """A QP; with ``srq`` its receive WQEs come from that SRQ, not its own ring; its async
        events go to ``events`` (default: the device's own queue)."""
        with self._lock:
            qps = self.engine.qps
            qpn = self._next_qpn
            steering = self.engine.port.steering  # one engine of several: a QPN the kernel steers here
            while qpn in qps or qpn < FIRST_QPN or steering is not None and not steering.owns(qpn):
                qpn = (qpn + 1) & 0xFFFFFF
            self._next_qpn = (qpn + 1) & 0xFFFFFF
            config = QpConfig(qpn=qpn, pdn=pdn, transport=transport, max_msg_sz=MAX_MSG_SZ)
            datagram = transport is Transport.UD
            rc = (UdQp if datagram else RcQp)(config, self.engine.mrs, srq)
            self.engine.add_qp(HwQp(qpn, rc, SendRing(sq_buf, sq_wqebbs, datagram),
                                    RecvRing(rq_buf, rq_count, rq_stride), DoorbellRecord(doorbell), send_cq,
                                    recv_cq, self._events(events), srq))  # fmt: skip
            if srq is not None:
                srq.qps += 1
            return qpn

    def modify_qp(self, qpn: int, state: QpState, changes: dict[str, object], peer: str | None = None) -> None:
        """Apply attribute ``changes`` (``QpConfig`` fields) and move to ``state``."""
        with self._lock:
            engine = self.engine
            qp = engine.qps[qpn]
            for name, value in changes.items():
                setattr(qp.rc.config, name, value)
            if peer is not None:
                qp.peer = engine.demux.peers[qpn] = peer
                qp.tx_path = engine.port.link.tx_path(peer)
            # Doorbells handed over but not yet taken belong to the queues as they are now.
            engine.doorbells(self._doorbells.take())
            if state is QpState.RESET:
                # IBA 10.3.1: a reset QP starts with empty queues; what it had not reported is gone
                qp.rc.completions.clear()
                qp.sq_consumer = qp.rq_consumer = 0
                engine.rung.discard(qp)
                engine.receives.discard(qp)
            elif qp in engine.receives or state is QpState.RTS:
                engine.receives.discard(qp)
                # to ERROR: its posted receives must be there to be flushed; to RTS (from SQD):
                # a BIND_MW or LOCAL_INV the drain held back runs now
                engine.rung.add(qp)
            qp.rc.modify(state)
            engine.active.add(qp)
        self._progress.wake()

    def destroy_qp(self, qpn: int) -> None:
        """Remove the QP, and its async events not yet read (as ib_uverbs does). What its
        doorbell announced is sent first (``Engine.send_posted``), the records of a driver
        without the GIL included."""
        with self._lock:
            engine = self.engine
            self._doorbells.drain()
            engine.doorbells(self._doorbells.take())
            engine.send_posted(qpn)
            qp = engine.remove_qp(qpn)
            self.qp_owners.pop(qpn, None)
            if qp is not None:
                self._retired.update(qp.rc.counts())
                if qp.srq is not None:
                    qp.srq.qps -= 1
        if qp is not None:
            _discard_events(qp.events, QP_EVENTS, qpn)
        if engine.has_work:
            self._progress.wake()  # the other QPs' doorbells the drain took

    def attach_mcast(self, qpn: int, gid: bytes) -> None:
        """``ibv_attach_mcast``: the UD QP receives what is sent to multicast group ``gid``
        (``nic.multicast``: ValueError names a refusal, KeyError an unknown QP)."""
        with self._lock:
            self.engine.multicast.attach(self.engine.qps[qpn], bytes(gid))

    def detach_mcast(self, qpn: int, gid: bytes) -> None:
        """``ibv_detach_mcast`` (ValueError if the QP is not attached to ``gid``)."""
        with self._lock:
            self.engine.multicast.detach(qpn, bytes(gid))

    def direct_qp(self, qpn: int, uar: memoryview) -> None:
        """The QP's program posts by hand (mlx5dv_init_obj): its doorbell records are read on
        every pass from now on, a doorbell rung or not; ``uar`` is the register page its
        program may store doorbells to, kept as long as the QP."""
        with self._lock:
            qp = self.engine.qps[qpn]
            qp.uar = uar
            self.engine.make_direct(qp)
        self._progress.wake()

    @property
    def doorbell_fd(self) -> int:
        """The doorbell register for a driver holding no GIL: a pipe taking 4-byte records
        (``nic.engine``'s ``SEND_DOORBELL | qpn``, ``RECV_DOORBELL | qpn``)."""
        return self._doorbells.doorbell_fd

    def kick(self) -> None:
        """Run the engine in the calling thread now, whatever the mode (tests, tools, a CQ
        resize), with every doorbell rung so far: a C driver's records in the wake-up pipe too."""
        self._doorbells.drain()
        self._progress.run_inline()

    # --- what the device reports ------------------------------------------------------

    def start_capture(self, keep: int = DEFAULT_KEEP, sink: FrameSink | None = None) -> Capture:
        """Record every datagram this device sends and receives from now on (``nic.capture``),
        into ``sink`` if given; replaces the capture running before."""
        capture = Capture(keep, sink)
        with self._lock:
            self.engine.port.capture = capture
        return capture

    def stop_capture(self) -> None:
        with self._lock:
            self.engine.port.capture = None

    # --- fault injection (pyroce.testing.faults drives these) ---------------------------

    def inject_qp_error(self, qpn: int, detail: str) -> None:
        """Move the QP to the error state as a NIC does on a fatal error: its oldest work
        request fails with GENERAL_ERR (reason ``INJECTED``), the rest flush, QP_FATAL is raised."""
        with self._lock:
            engine = self.engine
            qp = engine.qps[qpn]
            engine.doorbells(self._doorbells.take())
            if qp in engine.rung or qp in engine.receives:
                engine.fetch(qp)  # the work posted before the error is the work it fails
            engine.fail_qp(qp, detail, Reason.INJECTED)
        self._progress.wake()

    def inject_rnr(self, qpn: int, count: int) -> None:
        """The QP answers the next ``count`` messages that need a receive WQE with an RNR NAK,
        as if none were posted (connected QPs: UD has no RNR NAK)."""
        with self._lock:
            rc = self.engine.qps[qpn].rc
            if isinstance(rc, UdQp):
                raise TypeError(f"QP 0x{qpn:x} is UD: it has no RNR NAK to force")
            rc.responder.forced_rnr += count

    def inject_cq_overrun(self, cq: HwCq, count: int = 1) -> None:
        """The next ``count`` completions for the CQ are lost as in an overrun (CQ_ERR)."""
        with self._lock:
            cq.overruns_injected += count

    def set_port_state(self, active: bool) -> None:
        """Take the port down (nothing sent or received; IBV_EVENT_PORT_ERR) or up again
        (IBV_EVENT_PORT_ACTIVE)."""
        with self._lock:
            port = self.engine.port
            if port.active != active:
                port.active = active
                event = PORT_ACTIVE if active else PORT_ERR
                self.engine.event_queues.broadcast(AsyncEvent(event, 1, f"port 1 {'active' if active else 'down'}"))

    @property
    def port_active(self) -> bool:
        return self.engine.port.active

    def route(self, gid: bytes) -> str | None:
        """The link's address for a GID, None if the link cannot reach it (``Port.route``)."""
        return self.engine.port.route(gid)

    def stats(self) -> dict[str, int]:
        """Device counters and the sum of every QP's (rxe hw_counters names where rxe has one)."""
        with self._lock:
            return self._stats()

    def _stats(self, per_qp: dict[int, dict[str, int]] | None = None) -> dict[str, int]:
        """``stats()``; each QP's counts go into ``per_qp`` on the way when it is given (one
        pass: the counters file of 10 000 QPs is made under the lock, which the engine waits for)."""
        engine = self.engine
        total = engine.counts()
        total.update(self._retired)
        for qpn, qp in engine.qps.items():
            counts = qp.rc.counts()
            if per_qp is not None:
                per_qp[qpn] = counts
            for name, count in counts.items():
                total[name] += count
        faults = engine.port.faults
        if faults is not None:
            total.update({f"injected_{name}": n for name, n in faults.counters.items()})
        return dict(sorted(total.items()))

    def async_events(self) -> list[AsyncEvent]:
        """The device's own queue's events not yet read, oldest first: those of objects created
        with no queue of their own, and every port and device event."""
        return self.engine.events.take_all()

    @property
    def events(self) -> EventQueue[AsyncEvent]:
        """The device's own async event queue as it fills: ``fileno()`` to wait on, ``get()``
        to read one (a context reads its own: ``open_async_events``)."""
        return self.engine.events

    def qp_error_detail(self, qpn: int) -> str:
        """One line on why the QP's last failed work request failed ("" if none has)."""
        with self._lock:
            qp = self.engine.qps.get(qpn)
            return qp.rc.error_detail if qp is not None else ""

    def qp_state(self, qpn: int) -> QpState:
        """The QP's state, which the NIC changes by itself to ERR (a failed request, a NAK)."""
        with self._lock:
            return self.engine.qps[qpn].rc.state

    def qp_sq_draining(self, qpn: int) -> bool:
        """Whether the QP is in SQD with started WQEs not yet complete (``ibv_qp_attr.sq_draining``)."""
        with self._lock:
            return self.engine.qps[qpn].rc.sq_draining

    def qp_stats(self, qpn: int) -> dict[str, int]:
        """One QP's counters (``KeyError`` if there is no such QP)."""
        with self._lock:
            return dict(sorted(self.engine.qps[qpn].rc.counts().items()))

    def stats_snapshot(self) -> tuple[dict[str, int], dict[int, dict[str, int]]]:
        """``stats()`` and every QP's counters by QPN (``qp_stats``'s, unsorted), read at one
        moment (the counters file)."""
        per_qp: dict[int, dict[str, int]] = {}
        with self._lock:
            return self._stats(per_qp), per_qp

    def end_connections(self) -> None:
        """The device's users are gone or going (``close``, or the program's end with the device
        open): their rdma_cm ids go as the kernel's do for an ending process, and one engine
        pass sends what that and their last commands queued (a REJ, a DREQ), since no engine
        pass follows."""
        if self._closed:
            return
        self.cm.close_all_channels()
        self._progress.run_inline(receive=False)

    def end_program(self) -> None:
        """The program ends with the device open: its connections end (``end_connections``) and
        the engine thread stops, so that no thread holds the device's locks while the
        interpreter's finalization runs the verbs objects' ``__del__``."""
        self.end_connections()
        self._progress.halt()

    def close(self) -> None:
        """Stop the runner (the engine thread) and release the link, the doorbells and the
        event queues; a second call does nothing. The CM's last MADs go first."""
        self.end_connections()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._progress.stop()
        self.engine.port.link.close()
        self._doorbells.close()
        self.engine.event_queues.close_all()


def _discard_events(queue: EventQueue[AsyncEvent], kinds: frozenset[int], element: int) -> None:
    """Drop the unread events of one destroyed object (``kinds`` name its type of element)."""
    queue.discard(lambda event: event.event_type in kinds and event.element == element)
