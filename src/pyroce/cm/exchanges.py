"""The CM's clocks: MADs resent until answered, and connections in time wait.

ib_cm resends a REQ, a REP or a DREQ until its answer comes (the response timeout, the retries
a consumer set) and keeps an ended connection's peer comm ID for a while, so a late REQ of it
is answered REJ "stale connection". Both are deadlines on the engine's time. A command has no
time of its own (it runs between passes): what it starts is timed from the next pass, not from a pass
long past, which would resend at once. ``deadline`` is an attribute, kept current, because the
engine reads it on every pass.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyroce.nic.timers import Timers

Key = TypeVar("Key", bound=Hashable)
Peer = tuple[int, bytes]  # (the peer's comm ID, its GID): a connection as the peer names it
NEVER = math.inf


@dataclass
class Exchange:
    """A sent MAD that waits for its answer: resent on timeout, given up after the retries."""

    gid: bytes
    mad: bytes
    timeout: float
    retries: int


class Exchanges(Generic[Key]):
    """One exchange at most per key (a CM id), and the time wait of ended connections."""

    def __init__(self) -> None:
        self._exchanges: dict[Key, Exchange] = {}
        self._timers: Timers[Key] = Timers()
        self._pending: list[Key] = []  # started by a command: timed from the next pass
        self._timewait: dict[Peer, float] = {}  # ended connections -> end of their time wait
        self.now = 0.0  # the engine's time at its last pass or MAD: a command's time
        self.deadline = NEVER  # when ``due`` next has work (0 while an exchange waits to be timed)

    def start(self, key: Key, exchange: Exchange) -> None:
        """``exchange`` was sent for ``key``; it is timed from the engine's next pass."""
        self._exchanges[key] = exchange
        self._pending.append(key)
        self.deadline = 0.0

    def waiting(self, key: Key) -> bool:
        return key in self._exchanges

    def extend(self, key: Key, until: float) -> None:
        """The peer asked for longer (an MRA): the next resend waits until ``until``."""
        self._timers.arm(key, until)
        self._update_deadline()

    def end(self, key: Key) -> None:
        """The answer came (or the id goes): no more resends."""
        if self._exchanges.pop(key, None) is not None:
            self._timers.cancel(key)
            self._update_deadline()

    def due(self, now: float) -> tuple[list[Exchange], list[Key]]:
        """At ``now``: the exchanges commands started are timed from now; those to resend (their
        timers rearmed, a retry spent), and the keys whose exchanges ran out of retries (ended).
        Time waits that are over end too."""
        self.now = now
        for key in self._pending:
            started = self._exchanges.get(key)
            if started is not None:
                self._timers.arm(key, now + started.timeout)
        self._pending.clear()
        resend: list[Exchange] = []
        expired: list[Key] = []
        for key in self._timers.due(now):
            exchange = self._exchanges.get(key)
            if exchange is None:
                continue
            if exchange.retries > 0:
                exchange.retries -= 1
                resend.append(exchange)
                self._timers.arm(key, now + exchange.timeout)
            else:
                del self._exchanges[key]
                expired.append(key)
        if self._timewait:
            for peer in [peer for peer, until in self._timewait.items() if until <= now]:
                del self._timewait[peer]
        self._update_deadline()
        return resend, expired

    def _update_deadline(self) -> None:
        if self._pending:
            self.deadline = 0.0
            return
        timer = self._timers.next_deadline()
        self.deadline = min(NEVER if timer is None else timer, min(self._timewait.values(), default=NEVER))

    def enter_timewait(self, peer: Peer, duration: float, now: float | None = None) -> None:
        """The connection ``peer`` ended at ``now`` (a command's: the last pass's time)."""
        until = self._timewait[peer] = (self.now if now is None else now) + duration
        self.deadline = min(self.deadline, until)

    def in_timewait(self, peer: Peer) -> bool:
        return peer in self._timewait
