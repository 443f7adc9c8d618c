"""What the kernel grants a UDP link's socket on this host, for tests that expect it."""

from __future__ import annotations

from pyroce.link.udp import SOCKET_BUFFER


def granted_buffer() -> int:
    """A link's receive buffer here: pyroce's ask (``SOCKET_BUFFER``) capped by
    ``net.core.rmem_max``, doubled as the kernel doubles what ``SO_RCVBUF`` sets."""
    with open("/proc/sys/net/core/rmem_max") as limit:
        return 2 * min(SOCKET_BUFFER, int(limit.read()))
