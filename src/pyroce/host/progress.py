"""Who runs the engine, and when (docs/architecture.md, "Progress model").

Every device has an engine thread that alone is enough: it waits in ``select`` on the link's
socket and the hand-off's wake-up pipe (holding no GIL) with the next deadline as timeout,
and runs engine passes for every doorbell, packet and timer. Drivers with no Python thread
to lend (a C program, a shared NIC process, GPU-posted work) rely on it alone. While a direct
QP exists (its program posts WQEs by hand and rings nothing the NIC hears: mlx5dv), the thread
sleeps at most ``DIRECT_POLL_S`` after a pass that found a direct QP's record moved, backing off to
``DIRECT_IDLE_S`` while none does, and each pass reads the direct QPs' doorbell records.

Modes (``PYROCE_PROGRESS``):

- ``inline`` (default): a Python caller that rings a doorbell or polls an empty CQ also runs
  the engine itself, which is faster in Python than handing over to another thread. While it
  does (it is running the engine, or polled in the last ``INLINE_GRACE_S``), the engine thread
  stands back, so it does not take the GIL from the polling thread: it sleeps on a timer the
  polls keep pushing back (``QuietTimer``) and looks when it fires: a doorbell rung meanwhile
  waits at most ``INLINE_GRACE_S`` if the caller stops polling, and a caller that goes to wait
  for an event (``waiting``) has it look at once.
- ``thread``: only the engine thread runs the engine; every doorbell wakes it. An empty poll
  yields the GIL to it while it has something to do (as a C program's poll holds no GIL).
- ``host``: no thread; the host (a simulator, a test) calls ``NicDevice.step(now)``.

Engine failures never reach a caller: ``Engine`` contains a QP's to the QP, and anything
else is counted and reported as IBV_EVENT_DEVICE_FATAL here.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable
from typing import Final, Protocol

from pyroce.host.handoff import Handoff
from pyroce.host.quiet_timer import QuietTimer
from pyroce.nic.engine import Engine
from pyroce.nic.port import Clock

MODES: Final = ("inline", "thread", "host")
INLINE_GRACE_S: Final = 0.002  # the engine thread stands back while the application drove progress this recently
REARM_S: Final = INLINE_GRACE_S / 2  # a poll pushes the quiet timer back when it was armed this long ago
BUSY_LOOK_S: Final = 0.25  # standing back, the engine thread still does its idle work this often (capture requests)
IDLE_WAIT_S: Final = 0.5  # longest engine sleep with no deadline
YIELD_WAIT_S: Final = 0.001  # thread mode: the longest an empty poll waits for the engine thread's pass
SPIN_S: Final = 0.0001  # thread mode: how long the engine thread polls before it sleeps (measured: see architecture.md)
# While a direct QP exists the engine thread sleeps at most DIRECT_POLL_S after a pass that found
# its records moved, twice as long after each that did not, up to DIRECT_IDLE_S (architecture.md)
DIRECT_POLL_S: Final = 0.00005
DIRECT_IDLE_S: Final = 0.001


class IdleWork(Protocol):
    """What the engine thread does between its waits, besides passes (``assembly.StatsFolder``:
    publishing counters, serving capture requests)."""

    def __call__(self, now: float) -> None: ...

    def close(self) -> None:
        """The engine thread has stopped: release what the work holds."""
        ...


class Progress:
    """Runs ``engine`` under ``lock`` from the callers and the engine thread, per ``mode``: a
    ``nic.device.Runner``. The engine thread runs from ``start`` to ``stop``."""

    def __init__(self, engine: Engine, handoff: Handoff, lock: threading.Lock, mode: str, clock: Clock,
                 name: str) -> None:  # fmt: skip
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r} is not one of {', '.join(MODES)}")
        self.engine = engine
        self.mode = mode
        self.inline = mode == "inline"
        self._handoff = handoff
        self._lock = lock
        # Bound once: compiled, ``self._lock.acquire()`` looks the method up on every call (a
        # pass takes the lock twice; an inline program's every empty poll is a pass)
        self._acquire: Callable[[], bool] = lock.acquire
        self._release: Callable[[], None] = lock.release
        self._clock = clock
        self._name = name
        self._idle: IdleWork | None = None
        self._inline_at = 0.0  # when a caller last ran the engine or found completions (inline)
        self._inline_running = False  # a caller is running the engine now (inline)
        self._quiet: QuietTimer | None = None  # inline: fires when the program stops polling (``start``)
        self._armed_at = 0.0  # when a caller last pushed the quiet timer back
        self._stopping = False
        self._busy = False  # the engine thread is between its wait and the end of its passes
        self._selecting = False  # the engine thread is in (or entering) its wait
        self._direct_wait = DIRECT_POLL_S  # the engine thread's next sleep bound while a direct QP exists
        self._direct_seen = 0  # Engine.direct_found when that bound was set
        self._passes = 0  # engine-thread runs so far (what a yielding poll waits to see change)
        self._passed = threading.Condition(threading.Lock())
        self._ready = select.epoll()
        self._engine_thread: threading.Thread | None = None

    def start(self, idle: IdleWork | None = None) -> None:
        """Start the engine thread (none in host mode); it runs ``idle`` after each wait, also
        while an inline application keeps it standing back, and ``stop`` closes it."""
        self._idle = idle
        if self.inline:
            self._quiet = QuietTimer()
        if self.mode != "host":
            for fd in (self.engine.port.link.fileno(), self._handoff.fileno()):
                self._ready.register(fd, select.EPOLLIN)
            self._engine_thread = threading.Thread(target=self._run, name=f"{self._name}-engine", daemon=True)
            self._engine_thread.start()

    # --- from the drivers ----------------------------------------------------------------

    def doorbell(self, qpn: int) -> None:
        """The QP's send doorbell, handed over. Inline: a lone request (no send work in flight
        on the device) runs the engine now, without reading the socket (the answer cannot be
        there yet); other doorbells wait for the application's next poll, which reaps what is
        in flight, so that poll sends them all in GSO batches. Otherwise the engine thread."""
        self._handoff.ring(qpn)
        if self.inline:
            if not self.engine.sending:
                self.run_inline(receive=False)
                return
            if self._clock() - self._inline_at < INLINE_GRACE_S and not self._selecting:
                # The application is polling, and the engine thread stands back: it looks
                # again after the grace. One already waiting in select is woken (below).
                return
        if self._engine_thread is not None:
            self._handoff.wake()

    def wake(self) -> None:
        """Something other than a doorbell changed (a command): the engine thread looks."""
        if self._engine_thread is not None:
            self._handoff.wake()

    def run_inline(self, receive: bool = True) -> None:
        """Run the engine in the calling thread (inline mode). If the engine thread holds the
        lock, wait for it in ``acquire``, which releases the GIL: spinning instead would keep
        the GIL from the engine thread for a whole switch interval. (``acquire`` and
        ``release``, not ``with``: compiled, a ``with`` looks up and calls the lock's
        ``__enter__`` and ``__exit__`` generically, ~1 100 instructions, twice the two calls.)"""
        self._acquire()
        self._inline_running = True
        try:
            self._pass(receive)
            if receive:
                self._drove()
        finally:
            self._inline_running = False
            self._release()

    def poll_empty(self) -> None:
        """A driver found its CQ empty: inline, run the engine; thread, yield to its thread."""
        if self.inline:
            self.run_inline()
        elif self._engine_thread is not None:
            self._yield()

    def waiting(self) -> None:
        """A driver may block for an event (a completion channel's, an async event's): inline,
        the program stops driving the engine now, so the engine thread, standing back within the
        grace of its last poll, looks at once. (It stood back for the rest of the grace: an
        event-driven ping-pong's half round trip was ~1.1 ms instead of ~170 µs. An event already
        waiting costs the engine thread a look: the program's next poll sends it back.)"""
        if self.inline and self._inline_at:
            self._inline_at = 0.0
            self._look_now()

    def poll_found(self) -> None:
        """A driver found completions waiting: it is still polling, so its next empty poll
        runs the engine, and the engine thread stays back (inline)."""
        if self.inline:
            self._drove()

    def step(self, now: float) -> None:
        """Host mode: one engine pass at the host's time ``now`` (the lock taken as ``run_inline`` takes it)."""
        self._acquire()
        try:
            if self._handoff.pending:
                self.engine.doorbells(self._handoff.take())
            try:
                self.engine.step(now)
            except Exception as exc:  # noqa: BLE001 - never into the host
                self.engine.fail_device(exc)
        finally:
            self._release()

    def halt(self) -> None:
        """Stop the engine thread, and wait for it: from now on only inline and host passes
        run. At a program's end: the thread is a daemon, which the interpreter's finalization
        freezes where it stands, so a lock it held then would hang every later ``__del__``
        that takes it (an MR deregistered, a QP destroyed)."""
        self._stopping = True
        self._look_now()
        thread, self._engine_thread = self._engine_thread, None
        if thread is not None:
            self._handoff.wake()
            thread.join()

    def stop(self) -> None:
        self.halt()
        self._ready.close()
        if self._quiet is not None:
            self._quiet.close()
        if self._idle is not None:
            self._idle.close()

    def _drove(self) -> None:
        """Inline: the program polled now; the engine thread's quiet timer is pushed back a
        grace when it was armed half a grace ago (a system call a millisecond, not a poll)."""
        now = self._clock()
        self._inline_at = now
        if now - self._armed_at >= REARM_S and self._quiet is not None:
            self._armed_at = now
            self._quiet.arm(INLINE_GRACE_S)

    def _look_now(self) -> None:
        """The engine thread, standing back, looks at once."""
        if self._quiet is not None:
            self._armed_at = 0.0
            self._quiet.fire()

    # --- the engine thread -----------------------------------------------------------------

    def _pass(self, receive: bool = True) -> None:
        engine = self.engine
        if self._handoff.pending:
            engine.doorbells(self._handoff.take())
        try:
            engine.run(self._clock, receive)
        except Exception as exc:  # noqa: BLE001 - never into the caller; the engine goes on
            engine.fail_device(exc)

    def _yield(self) -> None:
        """Thread mode's empty poll: while the engine thread has something to do (input
        waiting, doorbells, or its passes under way), wait for its next pass to end, which
        lets it have the GIL; otherwise return at once."""
        if self._stopping:
            return  # the device is closed: nothing to yield to
        with self._passed:
            passes = self._passes
            if self._busy or self._handoff.pending or self._ready.poll(0):
                self._passed.wait_for(lambda: self._passes != passes, YIELD_WAIT_S)

    def _run(self) -> None:
        sources = [self.engine.port.link.fileno(), self._handoff.fileno()]
        clock = self._clock
        quiet_timer = self._quiet
        while not self._stopping:
            if quiet_timer is not None:
                quiet = clock() - self._inline_at
                if self._program_drives(quiet):
                    # The application is polling and runs the engine itself. Waking for its
                    # packets or doorbells would only make this thread take the GIL from it (and
                    # make it wait for the lock): sleep until the application may have gone quiet,
                    # which its polls keep pushing back. A run of its own longer than the grace (a
                    # stream's passes while work keeps coming) is not quiet: had this thread queued
                    # for the lock then, it took the engine over and the program's polls waited
                    # for its passes (64 KiB SEND rows at half speed, architecture.md "Progress model").
                    self._armed_at = 0.0  # a poll from here on re-arms what this wait is for
                    quiet_timer.arm(INLINE_GRACE_S - quiet if quiet < INLINE_GRACE_S else INLINE_GRACE_S)
                    quiet_timer.wait(BUSY_LOOK_S)
                    if self._idle is not None:
                        self._idle(clock())  # a busy application still has its counters published
                    continue
            self._handoff.drain(self._wait(sources))
            if self.inline and self._program_drives(clock() - self._inline_at):
                continue  # the application took over while this thread slept
            self._busy = True
            with self._lock:
                self._pass()
            with self._passed:
                self._busy = False
                self._passes += 1
                self._passed.notify_all()
            if self._idle is not None:
                self._idle(clock())

    def _program_drives(self, quiet: float) -> bool:
        """Inline: whether the program runs the engine itself, now or ``quiet`` seconds ago at
        most a grace ago, so the engine thread stands back."""
        return quiet < INLINE_GRACE_S or self._inline_running

    def _wait(self, sources: list[int]) -> bool | None:
        """Until input, a wake-up or the next deadline (at once if work is waiting); whether
        the hand-off's pipe was readable then, None when not looked at (``Handoff.drain``).
        ``_selecting`` is set before the hand-off is looked at: a doorbell that finds it
        clear was rung before that look and is seen by it."""
        engine = self.engine
        self._selecting = True
        try:
            if engine.has_work or self._handoff.pending:
                return None
            return self._sleep(sources)
        finally:
            self._selecting = False

    def _sleep(self, sources: list[int]) -> bool | None:
        """Thread mode polls ``SPIN_S`` first; then ``select`` until input or the deadline."""
        engine = self.engine
        if SPIN_S and not self.inline:
            until = self._clock() + SPIN_S
            while self._clock() < until:
                if self._ready.poll(0):
                    return None
        deadline = engine.next_deadline()
        timeout = IDLE_WAIT_S if deadline is None else min(IDLE_WAIT_S, max(0.0, deadline - self._clock()))
        if engine.direct:  # nobody rings for a direct QP: look at its doorbell records again soon
            found, self._direct_seen = engine.direct_found != self._direct_seen, engine.direct_found
            wait = DIRECT_POLL_S if found else min(2 * self._direct_wait, DIRECT_IDLE_S)
            self._direct_wait = wait
            timeout = min(timeout, wait)
        readable, _, _ = select.select(sources, [], [], timeout)
        return self._handoff.fileno() in readable
