"""The control verbs the C library calls, chosen once per program by ``PYROCE_NIC``:

- ``shared`` (the default): commands to the shared NIC (``pyroce.nicd``), started when none
  runs. The program holds no NIC of its own and no thread: several programs share one address,
  a ``fork()``ed child opens the device anew, and a peer's access to memory the program has
  unmapped is the peer's remote access error, never the program's signal.
- ``embedded``: the NIC in the program's own process, its engine thread included
  (``driver.calls`` on pyroce's verbs objects), for a private address or a host without the
  shared NIC. A forked child cannot use it.

Either way the C library gets the same values, checks and errnos: the shared NIC runs the very
same ``driver.calls`` for its connections.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import Any

from pyroce.driver.build import sources_digest

MODES = ("shared", "embedded")
MODE = os.environ.get("PYROCE_NIC") or "shared"
if MODE not in MODES:
    raise OSError(errno.EINVAL, f"PYROCE_NIC={MODE!r} is not one of {', '.join(MODES)}")
FORK_SAFE = MODE == "shared"  # the C library lets a forked child use Python (it has no threads here)


def handshake(library_digest: str) -> None:
    """The C library's first call: it must be built from this pyroce's sources."""
    if library_digest != sources_digest():
        raise OSError(errno.ENOSYS, f"this libibverbs.so.1 was built from other sources than the pyroce at "
                                    f"{os.path.dirname(os.path.dirname(__file__))}: run the program with "
                                    "`pyroce run` again (or export `pyroce run --print-env` anew)")  # fmt: skip

if MODE == "embedded":
    from pyroce.driver import calls as _calls

    def __getattr__(name: str) -> Callable[..., Any]:
        return getattr(_calls, name)

else:
    from pyroce.nicd.client import NicError, RemoteObject, connection

    _event_fds: dict[int, int] = {}  # id of a channel or context -> its event fd in this process
    _own_fds: dict[int, tuple[int, ...]] = {}  # id of an object -> descriptors received with it

    def __getattr__(name: str) -> Callable[..., Any]:
        def command(*args: Any) -> Any:
            return connection().call(name, *args)

        return command

    def open_context(name: str) -> tuple[RemoteObject, int, int]:
        ctx, doorbell_fd, async_fd = connection().call("open_context", name)
        _event_fds[id(ctx)] = async_fd
        _own_fds[id(ctx)] = (doorbell_fd, async_fd)
        return ctx, doorbell_fd, async_fd

    def close_context(ctx: RemoteObject) -> None:
        if os.environ.get("PYROCE_PRINT_STATS") == "1":  # the shared device outlives the program
            print(connection().call("summary", ctx), file=sys.stderr, flush=True)
        connection().call("close_context", ctx)
        _close_own(ctx)

    def create_comp_channel(ctx: RemoteObject) -> tuple[RemoteObject, int]:
        channel, fd = connection().call("create_comp_channel", ctx)
        _event_fds[id(channel)] = fd
        _own_fds[id(channel)] = (fd,)
        return channel, fd

    def destroy_comp_channel(channel: RemoteObject) -> None:
        connection().call("destroy_comp_channel", channel)
        _close_own(channel)

    def get_cq_event(channel: RemoteObject) -> int:
        return _next_event("get_cq_event", channel)

    def get_async_event(ctx: RemoteObject) -> tuple[int, int]:
        return _next_event("get_async_event", ctx)  # type: ignore[no-any-return]

    def _next_event(command: str, obj: RemoteObject) -> Any:
        """Wait on the object's event fd here (unless non-blocking), then take the event; a
        reader that lost the race to another thread waits again."""
        conn = connection()
        fd = _event_fds[id(obj)]
        while True:
            conn.wait(fd)
            try:
                return conn.call(command, obj)
            except NicError as exc:
                if exc.errno != errno.EAGAIN or not os.get_blocking(fd):
                    raise

    def _close_own(obj: RemoteObject) -> None:
        _event_fds.pop(id(obj), None)
        for fd in _own_fds.pop(id(obj), ()):
            os.close(fd)
