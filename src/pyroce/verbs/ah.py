"""Address handles (pyverbs ``addr.pyx``'s ``AH``): where a UD send goes.

``AH(pd, attr=AHAttr(...))`` is ``ibv_create_ah``; ``AH(pd, wc=wc, grh=address, port_num=1)``
is ``ibv_create_ah_from_wc``: the answer to a received datagram, from the network header in
the first 40 bytes of its receive buffer (``init_ah_from_wc``). On RoCE an AH needs a GRH
(the GID is the IP address); the destination must be a GID this device's link can reach.
"""

from __future__ import annotations

import errno
import ipaddress
import struct

from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.base import PyverbsObject, check_injected
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_gid_type, ibv_wc_flags
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.wire.framing import GRH_LEN, ipv4_checksum

_IPV4_AT = GRH_LEN - 20  # RoCEv2/IPv4: the IPv4 header is the last 20 of the 40 bytes
_IPV6 = struct.Struct(">IHBB16s16s")  # version/class/flow, payload length, next header, hop limit, sgid, dgid


class AH(PyverbsObject):
    """``AH(pd, attr=...)`` or ``AH(pd, wc=..., grh=..., port_num=...)``."""

    CLOSE_ORDER = 1

    def __init__(self, pd: PD, **kwargs: object) -> None:
        super().__init__()
        if not isinstance(pd, PD):
            raise PyverbsUserError(f"an AH is created on a PD, not {type(pd).__name__}")
        pd._check_open()
        check_injected(pd.ctx.device, "create_ah", "create AH")
        if "attr" in kwargs:
            attr = kwargs["attr"]
            if not isinstance(attr, AHAttr):
                raise PyverbsUserError(f"attr must be an AHAttr, not {type(attr).__name__}")
        else:
            attr = init_ah_from_wc(pd, kwargs.get("wc"), kwargs.get("grh"), kwargs.get("port_num", 1))  # type: ignore[arg-type]
        ctx = pd.ctx
        if attr.port_num != 1:
            raise PyverbsRDMAError(f"Failed to create AH: port {attr.port_num} does not exist", errno.EINVAL)
        if attr.is_global and not ctx.gids.valid(attr.gr.sgid_index):
            raise PyverbsRDMAError(f"Failed to create AH: sgid_index {attr.gr.sgid_index} names no GID (indices "
                                   f"0..{len(ctx.gids.entries) - 1} hold one)", errno.EINVAL)  # fmt: skip
        try:
            attr.peer_address(ctx.device.route)  # a GRH, and a GID the link can reach
        except PyverbsRDMAError as exc:
            raise PyverbsRDMAError(f"Failed to create AH: {exc}", exc.error_code) from None
        self.pd = pd
        self.attr = attr
        pd.add_ref(self)

    @property
    def dgid(self) -> GID:
        return self.attr.gr.dgid

    def _release(self) -> None:
        self.pd = None  # type: ignore[assignment]


def init_ah_from_wc(pd: PD, wc: object, grh: object, port_num: object) -> AHAttr:
    """``ibv_init_ah_from_wc``: an AHAttr that answers the datagram ``wc`` reports, read from
    the 40 bytes at address ``grh`` (its receive buffer's start, in an MR of ``pd``). An IPv4
    header in the last 20 bytes (version 4, checksum right) is RoCEv2 over IPv4, as libibverbs
    tells them apart; else it is a GRH / IPv6 header."""
    if wc is None or not isinstance(grh, int) or not isinstance(port_num, int):
        raise PyverbsUserError("AH from a WC needs wc=, grh= (the receive buffer's address) and port_num=")
    if not getattr(wc, "wc_flags", 0) & ibv_wc_flags.IBV_WC_GRH:
        raise PyverbsRDMAError("Failed to create AH: the WC has no GRH (RoCE needs one)", errno.EINVAL)
    header = pd.read_registered(grh, GRH_LEN, "create AH")
    return AHAttr(sl=getattr(wc, "sl", 0), is_global=1, port_num=port_num, gr=route_from_header(pd.ctx, header))


def route_from_header(ctx: Context, header: bytes) -> GlobalRoute:
    """The route back to the sender of a datagram whose 40-byte network header is ``header``:
    its source as the destination GID, and the index of its destination in ``ctx``'s GID table."""
    ipv4 = header[_IPV4_AT : _IPV4_AT + 20]
    if ipv4[0] == 0x45 and ipv4_checksum(ipv4) == 0:
        route = GlobalRoute(dgid=GID(ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ipv4[12:16]).packed),
                            hop_limit=ipv4[8], traffic_class=ipv4[1])  # fmt: skip
        local = GID(ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ipv4[16:20]).packed)
    else:
        word, _, _, hop_limit, sgid, dgid = _IPV6.unpack(header)
        if word >> 28 != 6:
            raise PyverbsRDMAError("Failed to create AH: the buffer holds no IPv4 or IPv6 header", errno.EINVAL)
        route = GlobalRoute(dgid=GID(sgid), flow_label=word & 0xFFFFF, hop_limit=hop_limit,
                            traffic_class=word >> 20 & 0xFF)  # fmt: skip
        local = GID(dgid)
    gids = ctx.gids
    for index in range(len(gids.entries)):
        if gids.row(index) == (local, ibv_gid_type.IBV_GID_TYPE_ROCE_V2):  # the header is RoCE v2's
            route.sgid_index = index
            return route
    raise PyverbsRDMAError(f"Failed to create AH: {local} (the datagram's destination) is not in the GID table",
                           errno.EINVAL)  # fmt: skip
