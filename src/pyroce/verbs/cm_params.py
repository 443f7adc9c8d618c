"""``ConnParam``, ``UDParam`` and ``JoinMCAttrEx`` (pyverbs ``cmid.pyx``): ``rdma_conn_param``
as a connect or accept offers it, ``rdma_ud_param`` as a UD id's event reports its peer (the
AH, QPN and Q_Key SIDR or a multicast join found), and ``rdma_cm_join_mc_attr_ex``, what
``join_multicast`` joins and how."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from pyroce.cm.records import Address, AhValues
from pyroce.cm.records import ConnParam as NicConnParam
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.cm_enums import rdma_cm_join_mc_attr_mask, rdma_cm_mc_join_flags
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

if TYPE_CHECKING:
    from pyroce.verbs.addrinfo import AddrInfo
    from pyroce.verbs.cmid import CMEvent

_MASK = rdma_cm_join_mc_attr_mask


def ah_attr_of(values: AhValues) -> AHAttr:
    """The ``AHAttr`` of the NIC's ``ibv_ah_attr`` values (``ibv_copy_ah_attr_from_kern``)."""
    route = GlobalRoute(dgid=GID(values.dgid), flow_label=values.flow_label, sgid_index=values.sgid_index,
                        hop_limit=values.hop_limit, traffic_class=values.traffic_class)  # fmt: skip
    return AHAttr(dlid=values.dlid, sl=values.sl, is_global=values.is_global, port_num=values.port_num, gr=route)


class ConnParam(PyverbsObject):
    """``ConnParam(resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0, qp_num=0,
    data_len=0)``; ``set_private_data(data)`` keeps its first ``data_len`` bytes, as pyverbs does."""

    def __init__(self, resources: int = 1, depth: int = 1, flow_control: int = 0, retry: int = 5,
                 rnr_retry: int = 5, srq: int = 0, qp_num: int = 0, data_len: int = 0) -> None:  # fmt: skip
        super().__init__()
        if data_len < 0:
            raise PyverbsUserError(f"data_len must not be negative, got {data_len}")
        self.responder_resources = resources
        self.initiator_depth = depth
        self.flow_control = flow_control
        self.retry_count = retry
        self.rnr_retry_count = rnr_retry
        self.srq = srq
        self.qp_num = qp_num
        self.data_len = data_len
        self._private_data = b""

    @property
    def qpn(self) -> int:
        return self.qp_num

    @qpn.setter
    def qpn(self, value: int) -> None:
        self.qp_num = value

    @property
    def private_data(self) -> bytes:
        return self._private_data

    def set_private_data(self, data: bytes | bytearray | str) -> None:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if min(self.data_len, len(raw)):
            self._private_data = raw[: self.data_len]

    def values(self, qp_num: int, srq: int, responder_resources: int, initiator_depth: int) -> NicConnParam:
        """What ucma is given (``ucma_copy_conn_param_to_kern``): the QP's number and SRQ, the
        id's negotiated depths, this object's retries, flow control and private data."""
        return NicConnParam(private_data=self._private_data, responder_resources=responder_resources,
                            initiator_depth=initiator_depth, flow_control=self.flow_control,
                            retry_count=self.retry_count, rnr_retry_count=self.rnr_retry_count, srq=srq,
                            qp_num=qp_num)  # fmt: skip

    def __str__(self) -> str:
        rows = (("responder resources", self.responder_resources), ("initiator depth", self.initiator_depth),
                ("flow control", self.flow_control), ("retry count", self.retry_count),
                ("rnr retry count", self.rnr_retry_count), ("srq", self.srq), ("qp number", self.qp_num))  # fmt: skip
        return "Connection parameters: \n" + "".join(f"{name:<4}: {value:<4}\n" for name, value in rows)


class UDParam(PyverbsObject):
    """``UDParam(cm_event)``: the UD peer an ESTABLISHED (or CONNECT_REQUEST) event of a UD id
    names: ``qp_num``, ``qkey`` and ``ah_attr`` (an ``AHAttr`` for ``AH(pd, attr=...)``)."""

    def __init__(self, cm_event: CMEvent) -> None:
        super().__init__()
        ud = cm_event.ud
        if ud is None:
            raise PyverbsUserError(f"{cm_event.event_str()} carries no UD parameters")
        self.qp_num = ud.qp_num
        self.qkey = ud.qkey
        self.private_data = ud.private_data
        self._ah = ud.ah

    @property
    def ah_attr(self) -> AHAttr:
        return ah_attr_of(self._ah)


class JoinMCAttrEx(PyverbsObject):
    """``JoinMCAttrEx(addr, comp_mask=0, join_flags=0)``: the group ``addr.src_addr`` names and
    the ``RDMA_MC_JOIN_FLAG_*`` it is joined with, each counted only if ``comp_mask`` says so."""

    def __init__(self, addr: AddrInfo, comp_mask: int = 0, join_flags: int = 0) -> None:
        super().__init__()
        if addr is None:
            raise PyverbsUserError("a JoinMCAttrEx needs an AddrInfo")
        self.addr: Address | None = addr.src_addr
        self.comp_mask = comp_mask
        self.join_flags = join_flags

    def checked(self) -> tuple[Address | None, int]:
        """(group address, join flags) as ``rdma_join_multicast_ex`` checks them: ENOTSUP for an
        unknown mask bit, EINVAL without the address or the flags, or for unknown flags."""
        if self.comp_mask >= _MASK.RDMA_CM_JOIN_MC_ATTR_RESERVED:
            raise PyverbsRDMAError(f"Failed to Join multicast: comp_mask 0x{self.comp_mask:x} has unknown bits",
                                   errno.EOPNOTSUPP)  # fmt: skip
        if not self.comp_mask & _MASK.RDMA_CM_JOIN_MC_ATTR_ADDRESS:
            raise PyverbsRDMAError("Failed to Join multicast: comp_mask names no address", errno.EINVAL)
        if (not self.comp_mask & _MASK.RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS
                or self.join_flags >= rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_RESERVED):  # fmt: skip
            raise PyverbsRDMAError(f"Failed to Join multicast: no valid join flags ({self.join_flags})", errno.EINVAL)
        return self.addr, self.join_flags
