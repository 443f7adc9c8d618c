"""Starting a shared NIC for a program that finds none: ``pyroce nicd --background`` in a
process of its own (a new session, its output in its log), which answers once it serves.

The NIC must outlive the program that started it and belong to none: the launched process forks
the service and exits, so the program reaps its child at once and the service is nobody's
child. Two programs starting at once both launch; binding the place's name is the lock, so one
serves and the other's launch ends quietly.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from pyroce.nicd.place import NicPlace

READY = "ready"  # the launched service's one line on stdout: ready PID, busy, or failed WHY
BUSY = "busy"
FAILED = "failed"


def python() -> str:
    """The Python that runs the NIC: ``PYROCE_PYTHON`` (``pyroce run`` sets it: a C program's
    own ``sys.executable`` is the program), else this one."""
    return os.environ.get("PYROCE_PYTHON") or sys.executable


def service_environment(place: NicPlace) -> dict[str, str]:
    """The environment of the launched NIC: this program's ``PYROCE_*`` settings and where
    pyroce is, without the C driver's library path."""
    env = {name: value for name, value in os.environ.items() if name not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["PYROCE_ADDR"] = place.address
    env["PYROCE_STATS_DIR"] = place.folder
    search = env.get("PYROCE_PYTHONPATH") or os.pathsep.join(entry for entry in sys.path if entry)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (search, env.get("PYTHONPATH"))))
    return env


def launch(place: NicPlace) -> None:
    """Start the NIC for ``place`` and wait until it serves; ``OSError`` says why it cannot. A
    NIC that another program started meanwhile is not an error."""
    command = [python(), "-m", "pyroce", "nicd", "--background", "--device", place.device]
    try:
        done = subprocess.run(command, env=service_environment(place), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(errno.EIO, f"cannot start the shared NIC ({' '.join(command)}): {exc}") from None
    status, _, detail = done.stdout.strip().partition(" ")
    if status == READY:
        print(f"pyroce: started the shared NIC {place.describe()} (pid {detail}; log {place.log_path}; "
              "`pyroce nicd --stop` stops it)", file=sys.stderr, flush=True)  # fmt: skip
    elif status != BUSY:
        why = detail or done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise OSError(errno.EIO, f"the shared NIC {place.describe()} cannot start: {''.join(why)}")
