"""The NIC's port spaces: which id holds which port, and who listens where.

rdma_cm ports are per port space (TCP, UDP, IB, IPoIB), like a host's TCP and UDP ports, and
per address; one NIC has one address, so a port space's port is held by one id (or by several
that all asked for ``RDMA_OPTION_ID_REUSEADDR`` and none listens). A listener's children
share its port and hold none.
"""

from __future__ import annotations

import errno
import ipaddress
import random

from pyroce.cm.errors import CmError
from pyroce.cm.ids import CmId, IdState
from pyroce.ib.cm import PortSpace

EPHEMERAL_PORTS = (32768, 60999)  # Linux's ip_local_port_range


class PortTable:
    """The ids bound to each (port space, port)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._users: dict[tuple[PortSpace, int], list[CmId]] = {}

    def take(self, cm_id: CmId, host: str, port: int) -> None:
        """Bind ``cm_id`` to ``port`` of its space (0: a free ephemeral one) at ``host``."""
        space = cm_id.port_space
        if port == 0:
            port = self._free_port(space)
        users = self._users.get((space, port), [])
        shared = cm_id.reuse_address and all(user.reuse_address and user.state is not IdState.LISTEN for user in users)
        if users and not shared:
            raise CmError(errno.EADDRINUSE, f"{space.name} port {port} is in use")
        self._users.setdefault((space, port), []).append(cm_id)
        cm_id.local = (str(ipaddress.ip_address(host)), port)
        cm_id.bound = True

    def release(self, cm_id: CmId) -> None:
        assert cm_id.local is not None
        key = (cm_id.port_space, cm_id.local[1])
        users = self._users.get(key, [])
        if cm_id in users:
            users.remove(cm_id)
        if not users:
            self._users.pop(key, None)
        cm_id.bound = False

    def listener(self, space: PortSpace, port: int) -> CmId | None:
        """The id listening on ``port`` of ``space``, if any."""
        for cm_id in self._users.get((space, port), ()):
            if cm_id.state is IdState.LISTEN:
                return cm_id
        return None

    def _free_port(self, space: PortSpace) -> int:
        low, high = EPHEMERAL_PORTS
        for _ in range(high - low + 1):
            candidate = self._rng.randint(low, high)
            if (space, candidate) not in self._users:
                return candidate
        raise CmError(errno.EADDRNOTAVAIL, f"no free {space.name} port")
