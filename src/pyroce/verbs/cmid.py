"""rdma_cm for pyverbs programs (pyverbs ``cmid.pyx``): ``CMID``, ``CMEvent``, and, re-exported,
``AddrInfo``, ``CMEventChannel``, ``ConnParam``, ``UDParam`` and ``JoinMCAttrEx``.

A ``CMID`` made from an ``AddrInfo`` is synchronous (``rdma_create_ep``): each call waits for its
outcome, and ``get_request``, ``accept``, ``connect``, ``disconnect`` with the ``rdma_verbs.h``
helpers (``reg_msgs``, ``post_send``, ``post_recv``, ``post_read``, ``post_write``,
``post_ud_send``, ``get_send_comp``, ``get_recv_comp``) make a connection and move data. One made
on a ``CMEventChannel`` is asynchronous: each call starts something and its outcome is a
``CMEvent(channel)``. librdmacm's logic is ``pyroce.verbs.cma_id``'s; the NIC's connection manager
(``ctx.device.cm``) is the kernel's part. Errors are ``PyverbsRDMAError`` with librdmacm's errnos.
"""

from __future__ import annotations

import errno
import sys

from pyroce.verbs.addrinfo import AddrInfo, qp_type_of
from pyroce.verbs.ah import AH
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.cm_channel import CMEventChannel
from pyroce.verbs.cm_enums import RDMA_UDP_QKEY, rdma_cm_mc_join_flags, rdma_event_str, rdma_port_space
from pyroce.verbs.cm_params import ConnParam, JoinMCAttrEx, UDParam
from pyroce.verbs.cma_id import CmaEvent, CmaId, create_ep, get_cm_event
from pyroce.verbs.cq import WC
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_access_flags, ibv_send_flags, ibv_wr_opcode
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.qp import QP, QPAttr, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

__all__ = ["CMID", "AddrInfo", "CMEvent", "CMEventChannel", "ConnParam", "JoinMCAttrEx", "UDParam"]
_LOCAL_WRITE = ibv_access_flags.IBV_ACCESS_LOCAL_WRITE


class CMEvent(PyverbsObject):
    """``CMEvent(channel)``: the next event of ``channel`` (waiting for one); ``event_type``,
    ``private_data``, ``event_str()``, ``ack_cm_event()``. pyroce adds ``status`` (0, -errno,
    or a REJECTED event's reason) and ``ud`` (a UD id's peer, for ``UDParam``)."""

    def __init__(self, channel: CMEventChannel) -> None:
        super().__init__()
        if not isinstance(channel, CMEventChannel):
            raise PyverbsUserError(f"a CMEvent is taken from a CMEventChannel, not {type(channel).__name__}")
        channel._check_open()
        self.record: CmaEvent = get_cm_event(channel)
        self.acked = False

    @property
    def event_type(self) -> int:
        return self.record.event

    @property
    def status(self) -> int:
        return self.record.status

    @property
    def private_data(self) -> bytes:
        return self.record.private_data

    @property
    def ud(self):  # type: ignore[no-untyped-def]  # pyroce.cm.records.UdParam | None
        return self.record.ud

    def event_str(self) -> str:
        return "" if self.acked else rdma_event_str(self.event_type)

    def ack_cm_event(self) -> None:
        """``rdma_ack_cm_event``: EINVAL for an event acknowledged already."""
        if self.acked:
            raise PyverbsRDMAError("Failed to Acknowledge Event - the event was acknowledged already", errno.EINVAL)
        self.acked = True

    def _release(self) -> None:
        self.acked = True

    def __repr__(self) -> str:
        return f"CMEvent({rdma_event_str(self.event_type)}, status={self.status})"


class CMID(PyverbsObject):
    """``CMID(creator=None, qp_init_attr=None, pd=None, port_space=RDMA_PS_TCP, listen_id=None)``:
    from an ``AddrInfo`` (synchronous), a ``CMEventChannel`` (asynchronous, of ``port_space``), or
    a CONNECT_REQUEST ``CMEvent`` with its ``listen_id`` (the request's new id)."""

    CLOSE_ORDER = 0

    def __init__(self, creator: object = None, qp_init_attr: QPInitAttr | None = None, pd: PD | None = None,
                 port_space: int = rdma_port_space.RDMA_PS_TCP, listen_id: CMID | None = None) -> None:  # fmt: skip
        super().__init__()
        self.id: CmaId | None = None
        self.event_channel: CMEventChannel | None = None
        if creator is None:
            return
        if isinstance(creator, AddrInfo):
            self.id = create_ep(creator, pd, qp_init_attr)
        elif isinstance(creator, CMEventChannel):
            creator._check_open()
            if port_space not in rdma_port_space._value2member_map_:
                raise PyverbsRDMAError(f"Failed to create CM ID: port space 0x{port_space:x} does not exist",
                                       errno.EINVAL)  # fmt: skip
            self.id = CmaId(creator, port_space, qp_type_of(port_space), sync=False)
            self.event_channel = creator
            creator.add_ref(self)
        elif isinstance(creator, CMEvent):
            if listen_id is None:
                raise PyverbsUserError("listen ID not provided")
            if creator.record.listen_id is None:
                raise PyverbsUserError(f"a CMID is made from a CONNECT_REQUEST event, not {creator.event_str()}")
            self.id = creator.record.id
            self.event_channel = listen_id.event_channel
            if self.event_channel is not None:
                self.event_channel.add_ref(self)
        else:
            raise PyverbsUserError(f"Cannot create CM ID from {type(creator).__name__}")

    def _cma(self) -> CmaId:
        self._check_open()
        if self.id is None:
            raise PyverbsRDMAError("the CMID has no rdma_cm id", errno.EINVAL)
        return self.id

    # --- what pyverbs exposes -------------------------------------------------------------

    @property
    def context(self) -> Context | None:
        return self.id.ctx if self.id is not None else None

    @property
    def pd(self) -> PD | None:
        return self.id.pd if self.id is not None else None

    @property
    def qp(self) -> QP | None:
        return self.id.qp if self.id is not None else None

    @property
    def qpn(self) -> int | None:
        qp = self.qp
        return qp.qp_num if qp is not None else None

    @property
    def dev_name(self) -> str:
        ctx = self._cma().ctx
        if ctx is None:
            raise PyverbsRDMAError("the CMID has no device yet", errno.ENODEV)
        return ctx.name

    @property
    def port_num(self) -> int:
        return 1

    # --- the connection ---------------------------------------------------------------------

    def get_request(self) -> CMID:
        """The next connection request of a synchronous listener, as a new CMID (with a QP if
        the listener was made with ``qp_init_attr``)."""
        to_conn = CMID()
        to_conn.id = self._cma().get_request()
        return to_conn

    def bind_addr(self, lai: AddrInfo) -> None:
        self._cma().bind(lai.src_addr)

    def resolve_addr(self, rai: AddrInfo, timeout_ms: int = 2000) -> None:
        self._cma().resolve_addr(rai.src_addr, rai.dst_addr, timeout_ms)

    def resolve_route(self, timeout_ms: int = 2000) -> None:
        self._cma().resolve_route(timeout_ms)

    def listen(self, backlog: int = 0) -> None:
        self._cma().listen(backlog)

    def connect(self, param: ConnParam | None = None) -> None:
        self._cma().connect(param)

    def accept(self, param: ConnParam | None = None) -> None:
        self._cma().accept(param)

    def establish(self) -> None:
        self._cma().establish()

    def reject(self, private_data: bytes | None = None) -> None:
        self._cma().reject(bytes(private_data or b""))

    def disconnect(self) -> None:
        self._cma().disconnect()

    def set_option(self, level: int, optname: int, optval: int | bytes, optlen: int) -> None:
        """``rdma_set_option``: an int value is passed as C holds it in ``optlen`` bytes."""
        value = optval.to_bytes(optlen, sys.byteorder) if isinstance(optval, int) else bytes(optval)[:optlen]
        self._cma().set_option(level, optname, value)

    def join_multicast(self, addr: AddrInfo | None = None, mc_attr: JoinMCAttrEx | None = None,
                       context: int = 0) -> None:  # fmt: skip
        """Join the group ``addr.src_addr`` names (``rdma_join_multicast``: a full member), or
        the one ``mc_attr`` names with its flags (``rdma_join_multicast_ex``). MULTICAST_JOIN
        follows on the channel, the id's QP attached to the group when it is taken."""
        if addr is None and mc_attr is None:
            raise PyverbsUserError("Join to multicast must have AddrInfo or JoinMCAttrEx arguments")
        if mc_attr is None:
            address, flags = addr.src_addr, rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_FULLMEMBER  # type: ignore[union-attr]
        else:
            address, flags = mc_attr.checked()
        self._cma().join_multicast(address, flags, context)

    def leave_multicast(self, addr: AddrInfo) -> None:
        """Leave the group ``addr.src_addr`` names (its QP detached first)."""
        if addr is None:
            raise PyverbsUserError("leave_multicast needs an AddrInfo")
        self._cma().leave_multicast(addr.src_addr)

    # --- the QP -------------------------------------------------------------------------------

    def create_qp(self, qp_init: QPInitAttr) -> None:
        cma = self._cma()
        cma.create_qp(qp_init, cma.pd)

    def init_qp_attr(self, qp_state: int) -> tuple[QPAttr, int]:
        return self._cma().init_qp_attr(qp_state)

    def query_qp(self, attr_mask: int) -> tuple[QPAttr, QPInitAttr]:
        return self._qp("query QP").query(attr_mask)

    def _qp(self, action: str) -> QP:
        qp = self._cma().qp
        if qp is None:
            raise PyverbsRDMAError(f"Failed to {action}: the CMID has no QP", errno.EINVAL)
        return qp

    # --- rdma_verbs.h ---------------------------------------------------------------------------

    def _reg(self, size: int, access: int) -> MR:
        pd = self._cma().pd
        if pd is None:
            raise PyverbsRDMAError("Failed to register a MR: the CMID has no device yet", errno.EINVAL)
        mr = MR(pd, size, access)
        self.add_ref(mr)
        return mr

    def reg_msgs(self, size: int) -> MR:
        """``rdma_reg_msgs``: memory for SEND and RECV (local write)."""
        return self._reg(size, _LOCAL_WRITE)

    def reg_read(self, size: int = 0) -> MR:
        """``rdma_reg_read``: memory a peer may READ."""
        return self._reg(size, _LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_READ)

    def reg_write(self, size: int = 0) -> MR:
        """``rdma_reg_write``: memory a peer may WRITE."""
        return self._reg(size, _LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE)

    def post_recv(self, mr: MR, length: int | None = None) -> None:
        qp = self._qp("Post Receive")
        wr = RecvWR(sg=[SGE(mr.buf, length or mr.length, mr.lkey)])
        if qp.srq is not None:
            qp.srq.post_recv(wr)
        else:
            qp.post_recv(wr)

    def _post(self, action: str, mr: MR, length: int, opcode: int, flags: int,
              rdma: tuple[int, int] | None = None, ud: tuple[AH, int] | None = None) -> None:  # fmt: skip
        """One WR of one SGE over ``mr`` (``rdma_post_*v``): RDMA's (rkey, address), UD's (AH, QPN)."""
        qp = self._qp(action)
        wr = SendWR(opcode=opcode, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        if rdma is not None:
            wr.set_wr_rdma(*rdma)
        if ud is not None:
            wr.set_wr_ud(ud[0], ud[1], RDMA_UDP_QKEY)
        qp.post_send(wr)

    def post_send(self, mr: MR, flags: int = ibv_send_flags.IBV_SEND_SIGNALED, length: int | None = None) -> None:
        self._post("Post Send", mr, length or mr.length, ibv_wr_opcode.IBV_WR_SEND, flags)

    def post_read(self, mr: MR, length: int, remote_addr: int, rkey: int, flags: int = 0) -> None:
        self._post("Post Read", mr, length, ibv_wr_opcode.IBV_WR_RDMA_READ, flags, rdma=(rkey, remote_addr))

    def post_write(self, mr: MR, length: int, remote_addr: int, rkey: int, flags: int = 0) -> None:
        self._post("Post Write", mr, length, ibv_wr_opcode.IBV_WR_RDMA_WRITE, flags, rdma=(rkey, remote_addr))

    def post_ud_send(self, mr: MR, ah: AH, rqpn: int = 0, flags: int = ibv_send_flags.IBV_SEND_SIGNALED,
                     length: int | None = None) -> None:  # fmt: skip
        """A datagram to QP ``rqpn`` behind ``ah``, with rdma_cm's Q_Key (``RDMA_UDP_QKEY``)."""
        self._post("Post Send", mr, length or mr.length, ibv_wr_opcode.IBV_WR_SEND, flags, ud=(ah, rqpn))

    def get_send_comp(self) -> WC:
        """``rdma_get_send_comp``: the next completion of the send CQ, waiting for it."""
        return self._get_comp(send=True)

    def get_recv_comp(self) -> WC:
        """``rdma_get_recv_comp``: the next completion of the receive CQ, waiting for it."""
        return self._get_comp(send=False)

    def _get_comp(self, send: bool) -> WC:
        """Poll; arm and poll again; wait on the CQ's channel; as ``rdma_verbs.h``. Where nothing
        is posted no completion can come: EINVAL rather than a wait for ever."""
        cma = self._cma()
        qp = self._qp("retrieve completion")
        own = cma.send_cq if send else cma.recv_cq
        if own is None:
            raise PyverbsRDMAError("Failed to retrieve completion: the QP was created with the caller's CQ: poll it",
                                   errno.EINVAL)  # fmt: skip
        cq, channel = own
        while True:
            for attempt in range(2):
                count, wcs = cq.poll(1)
                if count:
                    return wcs[0]
                if attempt == 0:
                    cq.req_notify()
            queue = qp.sq_outstanding if send else (qp.srq.rq if qp.srq is not None else qp.rq).wr_ids
            if not queue:
                raise PyverbsRDMAError(f"Failed to retrieve {'send' if send else 'receive'} completion: nothing is "
                                       "posted", errno.EINVAL)  # fmt: skip
            channel.get_cq_event(cq)
            cq.ack_events(1)

    def _release(self) -> None:
        if self.id is not None:
            self.id.destroy()
