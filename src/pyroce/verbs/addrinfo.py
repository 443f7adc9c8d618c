"""``AddrInfo`` (pyverbs ``cmid.pyx``): ``rdma_getaddrinfo`` as pyverbs calls it.

A passive ``AddrInfo`` (``RAI_PASSIVE``) names where to listen: ``src`` and ``src_service``, or
the wildcard address when ``src`` is None. An active one names the peer (``dst``,
``dst_service``) and, with ``src``, the local address to resolve from (pyverbs resolves ``src``
passively first and passes it as the hint's source, as here). Hosts and services go through the
system's ``getaddrinfo`` as librdmacm's do (``RAI_NUMERICHOST`` is ``AI_NUMERICHOST``); the port
space picks TCP or UDP for the service lookup and the QP type (RC for TCP and IB, UD for UDP and
IPoIB), as ``ucma_convert_to_ai`` does.
"""

from __future__ import annotations

import errno
import socket

from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.cm_enums import RAI_NUMERICHOST, RAI_PASSIVE, rdma_port_space
from pyroce.verbs.enums import ibv_qp_type
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

Address = tuple[str, int]
DATAGRAM_SPACES = (rdma_port_space.RDMA_PS_UDP, rdma_port_space.RDMA_PS_IPOIB)


def qp_type_of(port_space: int) -> int:
    """The QP type of a port space's ids (``rdma_create_id``: UD for UDP and IPoIB, else RC)."""
    return ibv_qp_type.IBV_QPT_UD if port_space in DATAGRAM_SPACES else ibv_qp_type.IBV_QPT_RC


def _text(value: str | bytes | int | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def resolve(node: str | None, service: str | None, port_space: int, flags: int) -> Address:
    """The first address ``getaddrinfo`` gives for ``node`` and ``service`` (``ucma_getaddrinfo``)."""
    datagram = port_space in DATAGRAM_SPACES
    ai_flags = (socket.AI_PASSIVE if flags & RAI_PASSIVE else 0) | (socket.AI_NUMERICHOST if flags & RAI_NUMERICHOST
                                                                     else 0)  # fmt: skip
    try:
        found = socket.getaddrinfo(node, service, 0, socket.SOCK_DGRAM if datagram else socket.SOCK_STREAM,
                                   socket.IPPROTO_UDP if datagram else socket.IPPROTO_TCP, ai_flags)  # fmt: skip
    except socket.gaierror as exc:
        raise PyverbsRDMAError(f"Failed to get Address Info: {node or ''}:{service or ''}: {exc.strerror}",
                               errno.EADDRNOTAVAIL) from None  # fmt: skip
    sockaddr = found[0][4]
    return str(sockaddr[0]), int(sockaddr[1])


class AddrInfo(PyverbsObject):
    """``AddrInfo(src=None, dst=None, src_service=None, dst_service=None, port_space=0, flags=0)``:
    ``src_addr``, ``dst_addr`` (``(address, port)`` or None), ``port_space``, ``qp_type``, ``flags``."""

    def __init__(self, src: str | bytes | None = None, dst: str | bytes | None = None,
                 src_service: str | bytes | int | None = None, dst_service: str | bytes | int | None = None,
                 port_space: int = 0, flags: int = 0) -> None:  # fmt: skip
        super().__init__()
        self.src_addr: Address | None = None
        self.dst_addr: Address | None = None
        self.port_space = port_space or rdma_port_space.RDMA_PS_TCP
        self.qp_type = qp_type_of(self.port_space)
        self.flags = flags
        if src or dst or src_service or dst_service:
            self.get_addrinfo(src, dst, src_service, dst_service, port_space, flags)

    def get_addrinfo(self, src: str | bytes | None = None, dst: str | bytes | None = None,
                     src_service: str | bytes | int | None = None, dst_service: str | bytes | int | None = None,
                     port_space: int = 0, flags: int = 0) -> None:  # fmt: skip
        """Resolve the addresses (pyverbs' ``get_addrinfo``); EINVAL with nothing to resolve."""
        if port_space and port_space not in rdma_port_space._value2member_map_:
            raise PyverbsUserError(f"port_space 0x{port_space:x} is not an rdma_port_space")
        self.port_space = port_space or rdma_port_space.RDMA_PS_TCP
        self.qp_type = qp_type_of(self.port_space)
        self.flags = flags
        src, dst = _text(src), _text(dst)
        src_service, dst_service = _text(src_service), _text(dst_service)
        if flags & RAI_PASSIVE:
            if src is None and src_service is None:
                raise PyverbsRDMAError("Failed to get Address Info: nothing to resolve", errno.EINVAL)
            self.src_addr, self.dst_addr = resolve(src, src_service, self.port_space, flags), None
            return
        if dst is None and dst_service is None and src is None:
            raise PyverbsRDMAError("Failed to get Address Info: an active AddrInfo needs dst", errno.EINVAL)
        self.src_addr = resolve(src, src_service, self.port_space, flags | RAI_PASSIVE) if src else None
        # a source alone is the hints' address (a multicast group's AddrInfo(src=group))
        self.dst_addr = resolve(dst, dst_service, self.port_space, flags) if dst or dst_service else None

    @property
    def passive(self) -> bool:
        return bool(self.flags & RAI_PASSIVE)

    def __repr__(self) -> str:
        return f"AddrInfo(src={self.src_addr}, dst={self.dst_addr}, port_space=0x{self.port_space:x})"
