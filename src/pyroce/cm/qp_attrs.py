"""What moves a consumer's QP through INIT, RTR and RTS for its connection (``rdma_init_qp_attr``).

The CM never touches a QP: librdmacm (and pyroce's Python CMID) asks for these values and
modifies the QP itself, as ib_cm's ``ib_cm_init_qp_attr`` answers the kernel's rdma_cm. Both
sides derive them from the same REQ and REP, so one side's RTR names what the other's RTS sends.
"""

from __future__ import annotations

import errno

from pyroce.cm.errors import CmError
from pyroce.cm.ids import CONNECTED, CmId, IdState
from pyroce.cm.records import AhValues
from pyroce.cm.timing import ack_timeout
from pyroce.ib.cm import QPT_RC, QPT_UD
from pyroce.ib.enums import ibv_access_flags, ibv_qp_attr_mask, ibv_qp_state


def qp_attributes(cm_id: CmId, qp_state: int) -> tuple[dict[str, object], int]:
    """The ``ibv_qp_attr`` values (by field name) and mask that move the id's QP to
    ``qp_state`` for this connection (``rdma_init_qp_attr``)."""
    M = ibv_qp_attr_mask
    attrs: dict[str, object] = {"qp_state": qp_state, "pkey_index": 0, "port_num": 1}
    if qp_state == ibv_qp_state.IBV_QPS_INIT:
        if cm_id.qp_type == QPT_UD:
            attrs["qkey"] = cm_id.qkey
            return attrs, M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY
        access = 0
        if cm_id.req is not None:
            access = ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
            if cm_id.responder_resources:
                access |= ibv_access_flags.IBV_ACCESS_REMOTE_READ | ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC
        attrs["qp_access_flags"] = access
        return attrs, M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS
    del attrs["pkey_index"], attrs["port_num"]
    if cm_id.qp_type == QPT_UD:
        if qp_state == ibv_qp_state.IBV_QPS_RTR:
            return attrs, M.IBV_QP_STATE
        if qp_state == ibv_qp_state.IBV_QPS_RTS:
            attrs["sq_psn"] = cm_id.seq_num
            return attrs, M.IBV_QP_STATE | M.IBV_QP_SQ_PSN
        raise CmError(errno.EINVAL, f"no attributes for QP state {qp_state}")
    req, rep = cm_id.req, cm_id.rep
    active = cm_id.listener is None
    if req is None or (active and (rep is None or cm_id.state not in (IdState.REP_RCVD, *CONNECTED))):
        raise CmError(errno.EINVAL, f"the connection has not got that far: the id is {cm_id.state.value}")
    if qp_state == ibv_qp_state.IBV_QPS_RTR:
        path = cm_id.path
        assert path is not None
        attrs.update(ah_attr=AhValues(path.dgid, hop_limit=path.hop_limit, traffic_class=path.traffic_class,
                                      flow_label=path.flow_label),
                     path_mtu=req.path_mtu, dest_qp_num=cm_id.peer_qpn,
                     rq_psn=cm_id.seq_num)  # fmt: skip
        mask = M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
        if cm_id.qp_type == QPT_RC:
            attrs.update(max_dest_rd_atomic=cm_id.responder_resources, min_rnr_timer=0)
            mask |= M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER
        return attrs, mask
    if qp_state == ibv_qp_state.IBV_QPS_RTS:
        attrs["sq_psn"] = rep.starting_psn if active else req.starting_psn  # type: ignore[union-attr]
        mask = M.IBV_QP_STATE | M.IBV_QP_SQ_PSN
        if cm_id.qp_type == QPT_RC:
            timeout = req.primary_local_ack_timeout
            if active and rep is not None:
                timeout = ack_timeout(rep.target_ack_delay, timeout - 1)
            if cm_id.ack_timeout is not None:
                timeout = cm_id.ack_timeout
            attrs.update(timeout=timeout, retry_cnt=req.retry_count,
                         rnr_retry=(rep.rnr_retry_count if active else req.rnr_retry_count),  # type: ignore[union-attr]
                         max_rd_atomic=cm_id.initiator_depth)  # fmt: skip
            mask |= M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_MAX_QP_RD_ATOMIC
        return attrs, mask
    raise CmError(errno.EINVAL, f"no attributes for QP state {qp_state}")
