"""The in-memory link's fd: readable while a datagram waits, so an engine thread can sleep on it;
a look that finds the inbox empty makes it unreadable again, and is cheap when it already is."""

from __future__ import annotations

import os
import select
import threading
import time

import pytest

from pyroce.link.memory import MemoryWire


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_the_fd_is_readable_from_a_delivery_until_a_look_finds_the_inbox_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    real_read = os.eventfd_read
    monkeypatch.setattr(os, "eventfd_read", lambda fd: reads.append(fd) or real_read(fd))
    wire = MemoryWire()
    a, b = wire.link("10.9.2.1"), wire.link("10.9.2.2")
    buf = bytearray(64)
    assert not readable(b.fileno()) and b.recv_into(buf) is None
    a.send(b"one", "10.9.2.2")
    a.send(b"two", "10.9.2.2")
    assert readable(b.fileno())
    assert b.recv_into(buf) == (3, ("10.9.2.1", b.port), 3, "10.9.2.2") and buf[:3] == b"one"
    assert b.recv_into(buf) is not None and buf[:3] == b"two"
    assert readable(b.fileno())  # not read yet: the next look that finds nothing reads it
    assert b.recv_into(buf) is None
    assert not readable(b.fileno()) and len(reads) == 1
    for _ in range(3):  # an engine's idle passes: no system call (a failed read raised each time)
        assert b.recv_into(buf) is None and not readable(b.fileno())
    assert len(reads) == 1
    a.send(b"three", "10.9.2.2")
    assert readable(b.fileno()) and b.recv_into(buf) is not None and buf[:5] == b"three"
    a.close()
    b.close()


def test_no_datagram_waits_behind_an_unreadable_fd_while_threads_deliver() -> None:
    """Deliveries from two threads while the reader drains: whenever the reader finds the inbox
    empty and the fd unreadable, no datagram is left behind it, and every one arrives."""
    wire = MemoryWire()
    receiver = wire.link("10.9.2.9")
    senders = [wire.link(f"10.9.2.{i}") for i in (10, 11)]
    per_sender = 2000
    buf = bytearray(64)

    def send(link: object) -> None:
        for _ in range(per_sender):
            link.send(b"x", "10.9.2.9")  # type: ignore[attr-defined]

    threads = [threading.Thread(target=send, args=(link,)) for link in senders]
    for thread in threads:
        thread.start()
    got = 0
    deadline = time.monotonic() + 60
    while got < per_sender * len(senders) and time.monotonic() < deadline:
        if receiver.recv_into(buf) is not None:
            got += 1
        elif not readable(receiver.fileno()):  # the reader would sleep here until a delivery
            woke = select.select([receiver.fileno()], [], [], 2)[0]
            assert woke or not receiver.waiting, "a datagram waited behind an unreadable fd"
    assert got == per_sender * len(senders)
    for thread in threads:
        thread.join()
    assert receiver.recv_into(buf) is None and not receiver.waiting
    for link in (receiver, *senders):
        link.close()
