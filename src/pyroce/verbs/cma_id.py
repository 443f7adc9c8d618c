"""librdmacm's user-space half of an rdma_cm id (``cma.c``'s ``cma_id_private``), over the NIC's
connection manager (the kernel's half: ``ctx.device.cm``).

What librdmacm does around each command lives here: the QP an id creates and moves (INIT at
creation; RTR and RTS with ``init_qp_attr`` before an accept, or on CONNECT_RESPONSE before the
RTU, which is then reported as ESTABLISHED; ERROR on disconnect and on REJECTED), the new id of
a CONNECT_REQUEST, the id's multicast joins (its QP attached to a group on MULTICAST_JOIN unless
it joined send-only, detached before it leaves), and the synchronous ids (``rdma_create_ep``: no channel of the caller's),
whose every command waits for its event on a private channel (``ucma_complete``).
``get_cm_event`` is ``rdma_get_cm_event``'s processing of the NIC's raw event.
"""

from __future__ import annotations

import copy
import errno
import itertools
import weakref
from typing import NamedTuple

from pyroce.cm.errors import CmError
from pyroce.cm.ids import CmId
from pyroce.cm.records import Address, UdParam
from pyroce.cm.records import ConnParam as NicConnParam
from pyroce.ib.cm import McJoinFlag, PortSpace
from pyroce.verbs.addr import GID
from pyroce.verbs.addrinfo import AddrInfo
from pyroce.verbs.cm_channel import CMEventChannel, cm_failed
from pyroce.verbs.cm_enums import RDMA_MAX_INIT_DEPTH, RDMA_MAX_RESP_RES, rdma_cm_event_type, rdma_event_str
from pyroce.verbs.cm_params import ConnParam, ah_attr_of
from pyroce.verbs.cq import CQ, CompChannel
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_qp_attr_mask, ibv_qp_state, ibv_qp_type
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPAttr, QPInitAttr

E = rdma_cm_event_type
RESOLVE_TIMEOUT_MS = 2000  # rdma_create_ep's address and route timeouts
_uids = itertools.count(1)
_by_uid: weakref.WeakValueDictionary[int, CmaId] = weakref.WeakValueDictionary()  # a CONNECT_REQUEST's listener


class CmaEvent(NamedTuple):
    """An event as ``rdma_get_cm_event`` hands it out: processed, for ``id`` (a CONNECT_REQUEST's
    new id, whose listener is ``listen_id``)."""

    event: int
    status: int
    id: CmaId
    listen_id: CmaId | None
    conn: NicConnParam | None
    ud: UdParam | None

    @property
    def private_data(self) -> bytes:
        param = self.conn if self.conn is not None else self.ud
        return param.private_data if param is not None else b""


class CmaMulticast:
    """librdmacm's ``cma_multicast``: one join of an id, the NIC's group it made, and the
    group's GID once MULTICAST_JOIN told it."""

    def __init__(self, address: Address, join_flags: int, context: int, group: object) -> None:
        self.address = address
        self.join_flags = join_flags
        self.context = context
        self.group = group
        self.mgid: bytes | None = None

    @property
    def attaches(self) -> bool:
        """Whether the id's QP is attached to the group (not for a send-only join)."""
        return self.join_flags != McJoinFlag.SENDONLY_FULLMEMBER


def _invalid(action: str, why: str) -> PyverbsRDMAError:
    return PyverbsRDMAError(f"Failed to {action}: {why}", errno.EINVAL)


class CmaId:
    """One id: the NIC's ``CmId``, the channel its events come to, its device's Context and PD
    once it has a device, and the QP and CQs ``create_qp`` made for it."""

    def __init__(self, channel: CMEventChannel, port_space: int, qp_type: int, sync: bool,
                 cm_id: CmId | None = None) -> None:  # fmt: skip
        self.uid = next(_uids)
        self.port_space = port_space
        self.qp_type = qp_type
        self.channel = channel
        self.sync = sync  # a synchronous id: ``channel`` is its own, each command waits for its event
        if cm_id is None:
            try:
                cm_id = channel.device.cm.create_id(channel.channel, self.uid, PortSpace(port_space), qp_type)
            except CmError as exc:
                raise cm_failed("create CM ID", exc) from None
        self.cm_id = cm_id
        channel.ids[cm_id] = self
        _by_uid[self.uid] = self
        self.ctx: Context | None = None
        self.pd: PD | None = None
        self.qp: QP | None = None
        self.own_cqs: list[tuple[CQ, CompChannel]] = []  # what create_qp made, closed with the QP
        self.send_cq: tuple[CQ, CompChannel] | None = None
        self.recv_cq: tuple[CQ, CompChannel] | None = None
        self.event: CmaEvent | None = None  # a synchronous id's last event
        self.qp_init_attr: QPInitAttr | None = None  # a synchronous listener's: the QP each request gets
        self.connect_error = False  # CONNECT_RESPONSE failed here: the REJECTED and DISCONNECTED after are not news
        self.mc_list: list[CmaMulticast] = []  # its joins, the latest first
        self.responder_resources = 0
        self.initiator_depth = 0
        self.destroyed = False

    @property
    def cm(self):  # type: ignore[no-untyped-def]
        return self.channel.device.cm

    def _command(self, action: str, command, *args):  # type: ignore[no-untyped-def]
        """Run one command of the NIC's connection manager; a refusal raises its errno."""
        if self.destroyed:
            raise PyverbsRDMAError(f"Failed to {action}: the CM ID is destroyed", errno.EBADF)
        try:
            return command(self.cm_id, *args)
        except CmError as exc:
            raise cm_failed(action, exc) from None

    def attach(self) -> None:
        """The id has a device now (bound, resolved, or a request's): librdmacm's ``id->verbs``
        and ``id->pd``, the device's own PD unless the caller gave one."""
        self.ctx = self.channel.device.ctx
        if self.pd is None:
            self.pd = self.channel.device.pd

    # --- address and route ---------------------------------------------------------------

    def bind(self, address: Address | None) -> None:
        if address is None:
            raise _invalid("Bind ID", "the AddrInfo has no source address")
        self.channel.device.check_local(address[0], "Bind ID")
        self._command("Bind ID", self.cm.bind, address)
        self.attach()

    def resolve_addr(self, source: Address | None, dest: Address | None, timeout_ms: int) -> None:
        if dest is None:
            raise _invalid("Resolve Address", "the AddrInfo has no destination address")
        if source is not None:
            self.channel.device.check_local(source[0], "Resolve Address")
        self._command("Resolve Address", self.cm.resolve_addr, source, dest, timeout_ms)
        self.complete("Resolve Address")

    def resolve_route(self, timeout_ms: int) -> None:
        self._command("Resolve Route", self.cm.resolve_route, timeout_ms)
        self.complete("Resolve Route")

    def listen(self, backlog: int) -> None:
        self._command("Listen", self.cm.listen, backlog)

    def set_option(self, level: int, name: int, value: bytes) -> None:
        self._command("set option", self.cm.set_option, level, name, value)

    # --- the QP ----------------------------------------------------------------------------

    def create_qp(self, init_attr: QPInitAttr, pd: PD | None = None) -> None:
        """``rdma_create_qp``: CQs of the id's own (each on a completion channel, for
        ``get_send_comp``/``get_recv_comp``) where ``init_attr`` names none, the QP, then INIT
        from ``init_qp_attr`` (a UD QP on to RTS, as ``ucma_init_ud_qp``)."""
        if self.qp is not None:
            raise _invalid("Create QP", "the CM ID has a QP already")
        pd = pd or self.pd
        if self.ctx is None or pd is None:
            raise _invalid("Create QP", "the CM ID has no device yet (bind or resolve it first)")
        if pd.ctx is not self.ctx:
            raise _invalid("Create QP", "the PD is of another device than the CM ID's")
        attr = copy.copy(init_attr)
        if attr.send_cq is None:
            self.send_cq = self._own_cq(attr.cap.max_send_wr)
            attr.send_cq = self.send_cq[0]
        if attr.recv_cq is None:
            self.recv_cq = self._own_cq(attr.cap.max_recv_wr)
            attr.recv_cq = self.recv_cq[0]
        try:
            qp = QP(pd, attr)
            try:
                self._init_qp(qp)
            except PyverbsRDMAError:
                qp.close()
                raise
        except PyverbsRDMAError:
            self._close_cqs()
            raise
        self.qp, self.pd = qp, pd

    def _own_cq(self, size: int) -> tuple[CQ, CompChannel]:
        assert self.ctx is not None
        channel = CompChannel(self.ctx)
        cq = CQ(self.ctx, max(size, 1), self, channel)
        self.own_cqs.append((cq, channel))
        return cq, channel

    def _close_cqs(self) -> None:
        for cq, channel in self.own_cqs:
            cq.close()
            channel.close()
        self.own_cqs.clear()
        self.send_cq = self.recv_cq = None

    def _init_qp(self, qp: QP) -> None:
        qp.modify(*self.init_qp_attr(ibv_qp_state.IBV_QPS_INIT))
        if self.qp_type == ibv_qp_type.IBV_QPT_UD:
            qp.modify(QPAttr(qp_state=ibv_qp_state.IBV_QPS_RTR), ibv_qp_attr_mask.IBV_QP_STATE)
            rts = QPAttr(qp_state=ibv_qp_state.IBV_QPS_RTS)
            rts.sq_psn = 0
            qp.modify(rts, ibv_qp_attr_mask.IBV_QP_STATE | ibv_qp_attr_mask.IBV_QP_SQ_PSN)

    def destroy_qp(self) -> None:
        if self.qp is not None:
            self.qp.close()
            self.qp = None
        self._close_cqs()

    def init_qp_attr(self, qp_state: int) -> tuple[QPAttr, int]:
        """``rdma_init_qp_attr``: the attributes for ``qp_state`` and the mask of those set."""
        fields, mask = self._command("get QP attributes", self.cm.init_qp_attr, qp_state)
        attr = QPAttr(qp_state=qp_state)
        for name, value in fields.items():
            setattr(attr, name, ah_attr_of(value) if name == "ah_attr" else value)
        return attr, mask

    def _modify_qp_rtr(self, responder_resources: int) -> None:
        if self.qp is None:
            return
        self.qp.modify(*self.init_qp_attr(ibv_qp_state.IBV_QPS_INIT))
        attr, mask = self.init_qp_attr(ibv_qp_state.IBV_QPS_RTR)
        if responder_resources != RDMA_MAX_RESP_RES:
            attr.max_dest_rd_atomic = responder_resources
        self.qp.modify(attr, mask)

    def _modify_qp_rts(self, initiator_depth: int) -> None:
        if self.qp is None:
            return
        attr, mask = self.init_qp_attr(ibv_qp_state.IBV_QPS_RTS)
        if initiator_depth != RDMA_MAX_INIT_DEPTH:
            attr.max_rd_atomic = initiator_depth
        self.qp.modify(attr, mask)

    def modify_qp_err(self) -> None:
        """The QP to ERROR (``ucma_modify_qp_err``): its posted work flushes."""
        if self.qp is not None and not self.qp.closed:
            self.qp.modify(QPAttr(qp_state=ibv_qp_state.IBV_QPS_ERR), ibv_qp_attr_mask.IBV_QP_STATE)

    # --- multicast ---------------------------------------------------------------------------

    def join_multicast(self, address: Address | None, join_flags: int, context: int) -> None:
        """``rdma_join_multicast_ex``: the NIC joins (MULTICAST_JOIN follows, with ``context``);
        a synchronous id waits for it."""
        if address is None:
            raise _invalid("Join multicast", "the AddrInfo has no source address (the group's)")
        group = self._command("Join multicast", self.cm.join_multicast, address[0], join_flags, context)
        self.mc_list.insert(0, CmaMulticast(address, join_flags, context, group))
        self.complete("Join multicast")

    def process_join(self, mc: CmaMulticast, ud: UdParam) -> None:
        """``ucma_process_join``: the group's GID noted, the id's QP attached to it."""
        mc.mgid = ud.ah.dgid
        if self.qp is not None and mc.attaches:
            self.qp.attach_mcast(GID(mc.mgid), ud.ah.dlid)

    def leave_multicast(self, address: Address | None) -> None:
        """``rdma_leave_multicast``: the latest join of ``address`` (EADDRNOTAVAIL if none),
        its QP detached, then the NIC leaves. Its events left unacknowledged are not waited for."""
        mc = next((mc for mc in self.mc_list if mc.address == address), None)
        if mc is None:
            raise PyverbsRDMAError(f"Failed to leave multicast: {address} was not joined", errno.EADDRNOTAVAIL)
        self.mc_list.remove(mc)
        if self.qp is not None and mc.attaches and mc.mgid is not None:
            try:
                self.qp.detach_mcast(GID(mc.mgid), 0)
            except PyverbsRDMAError:
                pass  # librdmacm leaves all the same
        try:
            self.cm.leave_multicast(mc.group)
        except CmError as exc:
            raise cm_failed("leave multicast", exc) from None

    # --- connecting --------------------------------------------------------------------------

    def _device_limits(self, action: str) -> tuple[int, int]:
        """(most responder resources, most initiator depth) of the id's device."""
        if self.ctx is None:
            raise _invalid(action, "the CM ID has no device yet (resolve its address and route first)")
        attr = self.ctx.query_device()
        return attr.max_qp_rd_atom, attr.max_qp_init_rd_atom

    def _valid_param(self, param: ConnParam | None, action: str) -> tuple[int, int]:
        """``ucma_valid_param``: a connected id needs a QP or parameters, and depths the device has."""
        limits = self._device_limits(action)
        if self.port_space != PortSpace.TCP:
            return limits
        if self.qp is None and param is None:
            raise _invalid(action, "a CM ID without a QP needs a ConnParam")
        if param is not None:
            if param.responder_resources != RDMA_MAX_RESP_RES and param.responder_resources > limits[0]:
                raise _invalid(action, f"responder resources {param.responder_resources} exceed {limits[0]}")
            if param.initiator_depth != RDMA_MAX_INIT_DEPTH and param.initiator_depth > limits[1]:
                raise _invalid(action, f"initiator depth {param.initiator_depth} exceeds {limits[1]}")
        return limits

    def _conn_values(self, param: ConnParam | None) -> NicConnParam:
        """``ucma_copy_conn_param_to_kern``: the id's QP (or the parameters') number and SRQ."""
        if self.qp is not None:
            qp_num, srq = self.qp.qp_num, int(self.qp.srq is not None)
        else:
            qp_num, srq = (param.qp_num, param.srq) if param is not None else (0, 0)
        if param is None:
            return NicConnParam(responder_resources=self.responder_resources, initiator_depth=self.initiator_depth,
                                retry_count=7, rnr_retry_count=7, srq=srq, qp_num=qp_num)  # fmt: skip
        return param.values(qp_num, srq, self.responder_resources, self.initiator_depth)

    def connect(self, param: ConnParam | None) -> None:
        """``rdma_connect``: a REQ (SIDR_REQ for a UD id) with this side's depths; a synchronous
        id waits for ESTABLISHED (ECONNREFUSED if rejected)."""
        max_resp, max_init = self._valid_param(param, "Connect")
        self.initiator_depth, self.responder_resources = max_init, max_resp
        if param is not None and param.initiator_depth != RDMA_MAX_INIT_DEPTH:
            self.initiator_depth = param.initiator_depth
        if param is not None and param.responder_resources != RDMA_MAX_RESP_RES:
            self.responder_resources = param.responder_resources
        self._command("Connect", self.cm.connect, self._conn_values(param))
        self.complete("Connect")

    def accept(self, param: ConnParam | None) -> None:
        """``rdma_accept``: a connected id's QP to RTR and RTS first, then the REP (SIDR_REP for
        a UD id); the QP to ERROR if the NIC refuses. A synchronous id waits for ESTABLISHED."""
        if self.qp is None and param is None:
            raise _invalid("Accept Connection", "a CM ID without a QP needs a ConnParam")
        max_resp, max_init = self._valid_param(param, "Accept Connection")
        if param is None or param.initiator_depth == RDMA_MAX_INIT_DEPTH:
            self.initiator_depth = min(self.initiator_depth, max_init)
        else:
            self.initiator_depth = param.initiator_depth
        if param is None or param.responder_resources == RDMA_MAX_RESP_RES:
            self.responder_resources = min(self.responder_resources, max_resp)
        else:
            self.responder_resources = param.responder_resources
        datagram = self.qp_type == ibv_qp_type.IBV_QPT_UD
        if not datagram:
            self._modify_qp_rtr(self.responder_resources)
            self._modify_qp_rts(self.initiator_depth)
        try:
            self._command("Accept Connection", self.cm.accept, self._conn_values(param), self.uid)
        except PyverbsRDMAError:
            self.modify_qp_err()
            raise
        if not datagram:
            self.complete("Accept Connection")

    def process_conn_resp(self) -> None:
        """``ucma_process_conn_resp``: on the REP, the QP to RTR and RTS, then the RTU (the
        NIC's accept on an active id); the QP to ERROR if any step fails."""
        try:
            self._modify_qp_rtr(RDMA_MAX_RESP_RES)
            self._modify_qp_rts(RDMA_MAX_INIT_DEPTH)
            self._command("Complete an active connection request", self.cm.accept, None, self.uid)
        except PyverbsRDMAError:
            self.modify_qp_err()
            raise

    def establish(self) -> None:
        """``rdma_establish``: the RTU of an id without a QP (the caller moved its own)."""
        if self.qp is not None:
            raise _invalid("Complete an active connection request", "the CM ID has a QP: its CONNECT_RESPONSE "
                           "already completed the connection")  # fmt: skip
        self.process_conn_resp()

    def reject(self, private_data: bytes) -> None:
        self._command("Reject Connection", self.cm.reject, private_data, None)

    def disconnect(self) -> None:
        """``rdma_disconnect``: the QP to ERROR (``ucma_shutdown`` on an IB transport), then the
        DREQ (or the DREP to one received); a synchronous id waits for DISCONNECTED."""
        self.modify_qp_err()
        self._command("Disconnect", self.cm.disconnect)
        self.complete("Disconnect")

    # --- events ----------------------------------------------------------------------------------

    def complete(self, action: str) -> None:
        """``ucma_complete``: a synchronous id waits for its command's event; a failed one is
        the command's error (ECONNREFUSED for REJECTED, else the status's errno)."""
        if not self.sync:
            return
        self.event = None
        event = self.event = get_cm_event(self.channel)
        if event.status:
            if event.event == E.RDMA_CM_EVENT_REJECTED:
                code = errno.ECONNREFUSED
            else:
                code = -event.status if event.status < 0 else event.status
            raise PyverbsRDMAError(f"Failed to {action}: {rdma_event_str(event.event)}", code)

    def get_request(self) -> CmaId:
        """``rdma_get_request``: a synchronous listener's next CONNECT_REQUEST, its new id given
        a QP as the listener's ``qp_init_attr`` asks."""
        if not self.sync:
            raise _invalid("get request", "get_request is for synchronous CMIDs (made from an AddrInfo)")
        self.event = None
        event = get_cm_event(self.channel)
        if event.event == E.RDMA_CM_EVENT_REJECTED:
            self.event = event
            raise PyverbsRDMAError("Failed to get request, no connection established", errno.ECONNREFUSED)
        if event.status or event.event != E.RDMA_CM_EVENT_CONNECT_REQUEST:
            self.event = event
            code = -event.status if event.status < 0 else errno.EINVAL
            raise PyverbsRDMAError(f"Failed to get request: {rdma_event_str(event.event)}", code)
        child = event.id
        if self.qp_init_attr is not None:
            child.create_qp(self.qp_init_attr, self.pd)
        child.event = event
        return child

    def conn_request(self, cm_id: CmId, conn: NicConnParam | None) -> CmaId:
        """``ucma_process_conn_req``: the new id of a request to this listener, on its channel
        (or, for a synchronous listener, on a private channel of its own)."""
        child = CmaId(self.channel, self.port_space, self.qp_type, sync=False, cm_id=cm_id)
        child.attach()
        if self.pd is not None:
            child.pd = self.pd
        if conn is not None:
            child.initiator_depth, child.responder_resources = conn.initiator_depth, conn.responder_resources
        if self.sync:
            child.migrate(CMEventChannel(), sync=True)
        return child

    def migrate(self, channel: CMEventChannel, sync: bool) -> None:
        """``rdma_migrate_id``: the id's events go to ``channel`` from now on."""
        self._command("migrate CM ID", self.cm.migrate_id, channel.channel)
        old, old_sync = self.channel, self.sync
        del old.ids[self.cm_id]
        channel.ids[self.cm_id] = self
        self.channel, self.sync = channel, sync
        if old_sync:
            old.close()

    def forget(self) -> None:
        """Its channel closed: the NIC destroyed the id; its QP and CQs go too."""
        self.destroy_qp()
        self.destroyed = True

    def destroy(self) -> None:
        """``rdma_destroy_id`` (``rdma_destroy_ep`` for a synchronous id: its channel too). Events
        it left unacknowledged are not waited for: nothing holds them in the NIC."""
        if self.destroyed:
            return
        self.destroy_qp()
        self.destroyed = True
        self.channel.ids.pop(self.cm_id, None)
        try:
            self.cm.destroy_id(self.cm_id)
        except CmError as exc:
            raise cm_failed("close CMID", exc) from None
        finally:
            if self.sync:
                self.channel.close()


def create_ep(info: AddrInfo, pd: PD | None, qp_init_attr: QPInitAttr | None) -> CmaId:
    """``rdma_create_ep``: a synchronous id on a private channel; passive, bound to the source
    (the QP attributes kept for each request); active, its address and route resolved and its
    QP created."""
    cma = CmaId(CMEventChannel(), info.port_space, info.qp_type, sync=True)
    try:
        if pd is not None:
            cma.pd = pd
        if info.passive:
            cma.bind(info.src_addr)
            if qp_init_attr is not None:
                cma.qp_init_attr = copy.copy(qp_init_attr)
                cma.qp_init_attr.qp_type = info.qp_type
            return cma
        cma.resolve_addr(info.src_addr, info.dst_addr, RESOLVE_TIMEOUT_MS)
        cma.resolve_route(RESOLVE_TIMEOUT_MS)
        if qp_init_attr is not None:
            attr = copy.copy(qp_init_attr)
            attr.qp_type = info.qp_type
            cma.create_qp(attr, pd)
    except BaseException:
        cma.destroy()
        raise
    return cma


def get_cm_event(channel: CMEventChannel) -> CmaEvent:
    """``rdma_get_cm_event``: the next event for an id of ``channel``, processed as librdmacm
    does: a CONNECT_REQUEST gets its new id; ADDR_RESOLVED gives the id its device; a
    CONNECT_RESPONSE on an id with a QP moves the QP and sends the RTU, and is reported as
    ESTABLISHED (CONNECT_ERROR if that failed); REJECTED moves the QP to ERROR. Events of ids
    already destroyed are dropped, as are the REJECTED and DISCONNECTED after a CONNECT_ERROR."""
    while True:
        raw = channel.next_event()
        kind = raw.event
        if kind == E.RDMA_CM_EVENT_CONNECT_REQUEST:
            listener = _by_uid.get(raw.context)
            if listener is None or listener.destroyed:
                continue
            child = listener.conn_request(raw.cm_id, raw.conn)
            return CmaEvent(kind, raw.status, child, listener, raw.conn, raw.ud)
        cma = channel.ids.get(raw.cm_id)
        if cma is None:
            continue
        status = raw.status
        if kind == E.RDMA_CM_EVENT_ADDR_RESOLVED:
            cma.attach()
        elif kind == E.RDMA_CM_EVENT_CONNECT_RESPONSE and cma.qp is not None:
            try:
                cma.process_conn_resp()
                kind = E.RDMA_CM_EVENT_ESTABLISHED
            except PyverbsRDMAError as exc:
                kind, status, cma.connect_error = E.RDMA_CM_EVENT_CONNECT_ERROR, -exc.error_code, True
        elif kind in (E.RDMA_CM_EVENT_REJECTED, E.RDMA_CM_EVENT_DISCONNECTED) and cma.connect_error:
            continue
        elif kind == E.RDMA_CM_EVENT_REJECTED:
            cma.modify_qp_err()
        elif kind == E.RDMA_CM_EVENT_MULTICAST_JOIN and raw.ud is not None:
            mc = next((mc for mc in cma.mc_list if mc.group is raw.group), None)
            if mc is None:
                continue  # left before its event was taken
            try:
                cma.process_join(mc, raw.ud)
            except PyverbsRDMAError as exc:
                kind, status = E.RDMA_CM_EVENT_MULTICAST_ERROR, -exc.error_code
        return CmaEvent(kind, status, cma, None, raw.conn, raw.ud)
