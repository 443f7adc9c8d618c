"""The queues as the NIC sees them: a CQ's ring and consumer record, a QP's rings and state
(an SRQ's are in ``nic.srq``)."""

from __future__ import annotations

from builtins import memoryview  # mypyc finds a dataclass field's type among the module's globals
from dataclasses import dataclass

from pyroce.nic.cqe import ERROR_OPCODES
from pyroce.nic.events import AsyncEvent, EventQueue, Poller
from pyroce.nic.rings import CQ_COUNTER_MASK, CqRing, DoorbellRecord, RecvRing, SendRing
from pyroce.nic.srq import HwSrq
from pyroce.transport.rc import RcQp
from pyroce.transport.ud import UdQp
from pyroce.wire.framing import RocePath


@dataclass(eq=False)
class HwCq:
    """A completion queue: the ring the NIC writes and the consumer index record (be32) the
    driver publishes; where its async events go; its completion channel and whether it is armed
    (``ibv_req_notify_cq``)."""

    cqn: int
    ring: CqRing
    consumer_record: memoryview
    events: EventQueue[AsyncEvent]  # its context's async events (CQ_ERR)
    channel: EventQueue[int] | None = None  # where its completion events go (CQNs)
    producer: int = 0
    consumer_seen: int = 0  # the consumer record as ``push`` last read it
    overruns_injected: int = 0  # pushes still to fail as if full (a test's fault plan)
    armed: bool = False  # the next CQE (that qualifies) raises one completion event, then disarms
    solicited_only: bool = False  # armed for a solicited or failed completion only
    uar: memoryview | None = None  # the register page mlx5dv_init_obj gave its program (unread)
    poller: Poller | None = None  # a driver that sleeps while the CQ is empty (``NicDevice.wake_poller``)

    def push(self, opcode: int, qpn: int, wqe_counter: int, byte_cnt: int, imm_inval: int, flags_rqpn: int,
             s_wqe_opcode: int, syndrome: int, vendor_err: int, solicited: bool) -> bool:  # fmt: skip
        """Write a CQE of these fields (``CqRing.write``'s; the NIC's have no SRQ number and no
        timestamp); False if the CQ is full (IBA 11.4.2.1: an overrun, the CQE is lost).
        An armed CQ then raises its event: the CQE is in the ring before the channel hears of it.
        The driver's consumer record is read only when the CQ is full as last read (the
        consumer only moves on, so an old value leaves less room, never more): a read of it is
        ~1 500 instructions compiled, a completion's whole write ~6 000."""
        count = self.ring.cqe_count
        if (self.producer - self.consumer_seen) & CQ_COUNTER_MASK >= count:
            self.consumer_seen = int.from_bytes(self.consumer_record, "big")
        if (self.producer - self.consumer_seen) & CQ_COUNTER_MASK >= count or self.overruns_injected:
            self.overruns_injected -= bool(self.overruns_injected)
            return False
        self.producer = self.ring.write(self.producer, opcode, qpn, wqe_counter, byte_cnt, imm_inval, 0, flags_rqpn,
                                        s_wqe_opcode, syndrome, vendor_err, solicited)  # fmt: skip
        poller = self.poller
        if poller is not None and poller.napping[0]:
            poller.napping[0] = 0  # one wake-up however many CQEs the pass adds
            poller.wake()
        if self.armed and (not self.solicited_only or solicited or opcode in ERROR_OPCODES):
            self.armed = False
            if self.channel is not None:
                self.channel.put(self.cqn)
        return True

    def arm(self, solicited_only: bool) -> None:
        """Arm for the next completion; an arm for any completion is not narrowed by a later
        solicited-only one until it fires (rxe's ``rxe_req_notify_cq``)."""
        self.solicited_only = solicited_only and (not self.armed or self.solicited_only)
        self.armed = True


@dataclass(eq=False)
class HwQp:
    """A queue pair: its rings and doorbell record (driver memory), its CQs, where its async
    events go, its peer's address, how far the engine has read each ring, and its transport state."""

    qpn: int
    rc: RcQp | UdQp  # the QP's transport state
    sq: SendRing
    rq: RecvRing  # unused when the QP takes its receives from an SRQ
    doorbell: DoorbellRecord
    send_cq: HwCq
    recv_cq: HwCq
    events: EventQueue[AsyncEvent]  # its context's async events
    srq: HwSrq | None = None  # where its receive WQEs come from instead of ``rq``
    peer: str | None = None
    tx_path: RocePath | None = None  # the headers and ICRC seeds of packets to ``peer`` (set with it)
    sq_consumer: int = 0
    rq_consumer: int = 0
    sending: bool = False  # has send WQEs not yet completed (counted in Engine.sending)
    direct: bool = False  # its driver posts by hand (mlx5dv): the engine reads its records every pass
    uar: memoryview | None = None  # a direct QP's register page (``rings.UAR_SIZE``), which the NIC keeps
    stalled: int = -1  # the send counter where a torn WQE stopped the engine (counted once)
    local_held: bool = False  # the last fetch stopped at a BIND_MW or LOCAL_INV until the queue drains
    in_flight: int = 0  # PSNs it had in flight with ``window_peer`` when the engine last counted (nic.engine)
    window_peer: str | None = None
