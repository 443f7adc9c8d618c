"""Object lifetimes as pyverbs has them (``base.pyx``): every object is a context manager, its
``close()`` may be called twice, a child holds its parent, and a parent closes its children
first. Using a closed object raises ``PyverbsRDMAError`` with EBADF.

An object dropped without ``close()`` is closed by its ``__del__``, at once when its last
reference goes. One the garbage collector finds in a reference cycle is closed by a thread of its
own instead: a collection runs wherever an allocation sets it off, in an engine pass or a command
under the device's lock, whose holder would wait for itself in the release."""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import os
import queue
import threading
import weakref
from typing import TYPE_CHECKING, Any

from pyroce.verbs.pyverbs_error import PyverbsRDMAError

if TYPE_CHECKING:
    from pyroce.nic.device import NicDevice


class PyverbsObject:
    """Base of every verbs object: children in a WeakSet, closed before the parent."""

    def __init__(self) -> None:
        self.closed = False
        self._closer_thread = 0  # the thread in ``close()``, 0 when none
        # made on the first child: most objects (a million MRs, say) have none, and a WeakSet
        # is several objects the garbage collector would walk on every full pass
        self._children: weakref.WeakSet[PyverbsObject] | None = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_ref(self, child: PyverbsObject) -> None:
        if self._children is None:
            self._children = weakref.WeakSet()
        self._children.add(child)

    def close(self) -> None:
        """Release the object and its children; safe to call again, and from two threads at
        once (the closer thread and the program, say): the second waits for the first."""
        if self.closed or not self._claim():
            return
        try:
            for child in sorted(self._children or (), key=lambda c: c.CLOSE_ORDER):
                child.close()
            self._release()
            self.closed = True
        finally:
            with _closing:
                self._closer_thread = 0
                _closing.notify_all()

    def _claim(self) -> bool:
        """Whether this thread is to close the object: not when another thread has closed it
        meanwhile (waited for), nor when this one is closing it already (a release that
        reaches its own object again)."""
        me = threading.get_ident()
        with _closing:
            while self._closer_thread not in (0, me):
                _closing.wait()
            if self.closed or self._closer_thread == me:
                return False
            self._closer_thread = me
            return True

    CLOSE_ORDER = 0  # children close in this order: QPs (0) before CQs and MRs (1) before PDs (2)

    def __del__(self) -> None:
        """Like pyverbs' ``__dealloc__``: an object dropped without ``close()`` still lets go
        of what it holds on the device (an MR's registration above all)."""
        if _collecting and not getattr(self, "closed", True):
            _orphans.put(self)  # kept alive until the closer thread has closed it
            return
        with contextlib.suppress(Exception):  # interpreter shutdown, or a half-built object
            self.close()

    def _release(self) -> None:
        """Undo what the constructor did on the device (override)."""

    def _check_open(self) -> None:
        if self.closed:
            raise self._closed_error()

    def _closed_error(self) -> PyverbsRDMAError:
        """EBADF for a closed object (the fast path, a post, a poll or a key read, tests
        ``closed`` itself and calls this only when it is set)."""
        return PyverbsRDMAError(f"{type(self).__name__} is closed", errno.EBADF)


def check_injected(device: NicDevice, verb: str, action: str) -> None:
    """Fail ``verb`` (libibverbs' name: ``post_send``, ``reg_mr``, ...) with the errno a test's
    fault plan chose for this call, as the provider's verb would fail (``pyroce.testing.faults``)."""
    plan = device.verb_faults
    if plan is not None:
        code = plan(verb)
        if code:
            raise PyverbsRDMAError(f"Failed to {action}: injected by a fault plan", code)


_closing = threading.Condition()  # an object's ``_closer_thread`` is set and cleared under it


# --- objects the garbage collector finalizes ----------------------------------------------------

_collecting = False  # a cyclic collection is running (in whatever thread set it off)
_orphans: queue.SimpleQueue[PyverbsObject | None] = queue.SimpleQueue()  # a put is safe in ``__del__``
_closer: threading.Thread | None = None
CLOSER_EXIT_WAIT_S = 5.0  # at exit, for the closer to finish what collections left it


def _note_collection(phase: str, info: dict[str, int]) -> None:
    global _collecting
    _collecting = phase == "start"


def _close_orphans() -> None:
    """The closer thread: close each object a collection found, waiting for the locks it
    takes as any command does (the collecting thread held them, or not)."""
    while (orphan := _orphans.get()) is not None:
        with contextlib.suppress(Exception):
            orphan.close()
        del orphan


def _start_closer() -> None:
    """Started with the module, and again in a forked child (which has no threads but its own)."""
    global _closer
    _closer = threading.Thread(target=_close_orphans, name="pyroce-verbs-closer", daemon=True)
    _closer.start()


def _stop_closer() -> None:
    """At exit, before the interpreter's finalization: the closer finishes its queue and ends.
    A daemon thread still running then is frozen where it stands, a lock it held with it, and
    every later ``close()`` that takes that lock would wait forever. What a collection finds
    after this stays in the queue, unclosed, as the process ends."""
    if _closer is not None:
        _orphans.put(None)
        _closer.join(CLOSER_EXIT_WAIT_S)


gc.callbacks.append(_note_collection)
_start_closer()
os.register_at_fork(after_in_child=_start_closer)
atexit.register(_stop_closer)
