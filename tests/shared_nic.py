"""A shared NIC of a test's own: ``pyroce nicd`` in the foreground of a child process, on an
address and a stats folder nobody else uses, stopped (by pid) at the end."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroce.nicd.client import NicError, connect
from pyroce.nicd.engines import STOP_WAIT_S
from pyroce.nicd.place import NicPlace

_numbers = itertools.count(1)


def private_address() -> str:
    """A loopback address of this test process's own (127.200.0.0/16 is nobody else's here)."""
    number = (os.getpid() * 64 + next(_numbers)) % 0xFFFE + 1
    return f"127.200.{number >> 8}.{number & 0xFF}"


def nic_environment(folder: Path, address: str) -> dict[str, str]:
    return dict(os.environ, PYROCE_STATS_DIR=str(folder), PYROCE_ADDR=address)


@contextmanager
def shared_nic(folder: Path, idle_s: float = 0,
               engines: int = 2) -> Iterator[tuple[NicPlace, dict[str, str], subprocess.Popen[str]]]:  # fmt: skip
    """A running shared NIC: its place, the environment that reaches it, its process; two
    engines at most by default, whatever the cores (the second program gets the second)."""
    folder.mkdir(parents=True, exist_ok=True)
    place = NicPlace("pyroce0", private_address(), str(folder))
    env = nic_environment(folder, place.address)
    log = open(folder / "nicd.log", "w")  # noqa: SIM115 - the NIC's log, read when a test fails
    process = subprocess.Popen([sys.executable, "-m", "pyroce", "nicd", "--idle", str(idle_s), "--engines", str(engines)], env=env,
                               stdin=subprocess.DEVNULL, stderr=log, text=True)  # fmt: skip
    try:
        wait_serving(place, process)
        yield place, env, process
    finally:
        log.close()
        stop(process, folder / "nicd.log")


def stop(process: subprocess.Popen[str], log: Path) -> None:
    """SIGTERM, as a user's Ctrl-C. A NIC that has not ended in time (it gives a stuck engine
    ``STOP_WAIT_S``, then has it print its stacks and kills it) prints its own stacks
    (SIGUSR1) and is killed; either fails the test with the NIC's log."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_WAIT_S + 10)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            process.kill()
            process.wait()
            raise AssertionError(f"pyroce nicd did not stop on SIGTERM; its log:\n{log.read_text()[-20000:]}") from None
    text = log.read_text()
    if "did not stop in" in text:
        raise AssertionError(f"an engine of pyroce nicd did not stop; the NIC's log:\n{text[-20000:]}")


def wait_serving(place: NicPlace, process: subprocess.Popen[str], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connect(place, start=False).sock.close()
            return
        except NicError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pyroce nicd did not serve (exit status {process.poll()})")
            time.sleep(0.05)
