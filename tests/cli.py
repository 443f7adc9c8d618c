"""Running ``python -m pyroce`` as a user does, from this tree's sources, with a time limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
SHARED_NIC_ADDRESS = f"127.202.{os.getpid() >> 8 & 0xFF}.{os.getpid() & 0xFF or 1}"
"""The address of this test run's C programs' shared NIC: its own, so that runs side by side (or a
user's NIC on 127.0.0.1) never meet. A Python tool beside them takes its own address."""


def cli_env(env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with this tree's ``src`` first on PYTHONPATH, ``env`` over it
    and the variables in ``drop`` removed."""
    path = os.pathsep.join(filter(None, (str(SRC), os.environ.get("PYTHONPATH"))))
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return {name: value for name, value in full.items() if name not in drop}


def command(*args: str, netns: str | None = None) -> list[str]:
    line = [sys.executable, "-m", "pyroce", *args]
    return line if netns is None else ["ip", "netns", "exec", netns, *line]


def pyroce(*args: str, netns: str | None = None, env: dict[str, str] | None = None, timeout: float = 300,
           stdin: bytes | None = None, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run the command to its end, ``stdin`` as its input (``TimeoutExpired`` after ``timeout``
    s: a hang fails the test); its output as text. ``drop`` names variables it does not get."""
    done = subprocess.run(command(*args, netns=netns), env=cli_env(env, drop), capture_output=True, timeout=timeout,
                          check=False, input=stdin or b"")  # fmt: skip
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def background(*args: str, netns: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the command with its stdout and stderr piped."""
    return subprocess.Popen(command(*args, netns=netns), env=cli_env(env), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


def _ephemeral_low() -> int:
    """The first port the kernel hands out to unbound sockets (a client's connect)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


PORTS_FROM = 10000
PORTS_PER_RUN = 64
PORT_BLOCKS = (_ephemeral_low() - PORTS_FROM) // PORTS_PER_RUN
"""Test ports lie below the ephemeral range: a port in it may be taken at any moment by some
connection's local end (the kernel's choice), and a server's bind then fails."""


def free_port(offset: int) -> int:
    """TCP port ``offset`` (0..63) of this test process's block (several test runs may share the host)."""
    assert 0 <= offset < PORTS_PER_RUN, offset
    return PORTS_FROM + os.getpid() % PORT_BLOCKS * PORTS_PER_RUN + offset


def listening(port: int) -> bool:
    """Whether some socket listens on TCP ``port`` (state 0A in /proc/net/tcp*), without
    connecting to it: a server would take a probe for its client."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "0A":
                return True
    return False


NIC_STARTED = "pyroce: started the shared NIC "  # nicd.launch's notice on the stderr of the program that started it


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """A bad input's answer: one line on stderr naming ``words``, a non-zero exit, no traceback
    (the shared NIC's notice that the program started it, under ``PYROCE_NIC=shared``, is the
    NIC's line, not the program's)."""
    assert result.returncode != 0, result
    stderr = "".join(line for line in result.stderr.splitlines(keepends=True) if not line.startswith(NIC_STARTED))
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, result.stderr
    assert stderr.startswith("pyroce"), result.stderr
    for word in words:
        assert word in stderr, result.stderr
