"""The REQ and REP this NIC sends, filled as Linux's ib_cm fills them for RoCEv2.

A REQ carries the path the active side chose (its GIDs, flow label, hop limit, MTU, ACK
timeout; LIDs permissive, as RoCE has none), the QP it connects and that QP's starting PSN; a
REP answers with the passive side's. Transaction IDs follow ib_cm's ``cm_form_tid``: the MAD
agent's number over the sender's comm ID as it lies in memory, the same for every message of
an exchange, so a capture of pyroce reads like one of rxe (``tests/test_cm_wire.py`` checks one
against rping's REQ).
"""

from __future__ import annotations

from pyroce.cm.ids import CmId
from pyroce.cm.records import ConnParam
from pyroce.cm.timing import CA_ACK_DELAY, ack_timeout
from pyroce.ib.cm import QPT_RC
from pyroce.wire.cm import CmRep, CmReq, service_id

DEFAULT_PKEY = 0xFFFF
PERMISSIVE_LID = 0xFFFF  # the LIDs a RoCE REQ carries
MAD_AGENT = 2  # the high half of our transaction IDs (ib_cm's agent number on rxe's port 1)
RETRY_MAX = 7  # the REQ's and REP's 3-bit retry counts: rdma_cm clamps a larger ask (7: RNR retry forever)


def form_tid(local_comm_id: int) -> int:
    """ib_cm's transaction ID for the exchanges ``local_comm_id`` starts."""
    return MAD_AGENT << 32 | int.from_bytes(local_comm_id.to_bytes(4, "big"), "little")


def make_req(cm_id: CmId, param: ConnParam, ca_guid: int, local_gid: bytes, private_data: bytes,
             response_timeout: int, max_retries: int) -> CmReq:  # fmt: skip
    """The REQ that connects ``cm_id`` (its path resolved, its comm ID and PSN chosen)."""
    path = cm_id.path
    assert path is not None and cm_id.remote is not None
    timeout = cm_id.ack_timeout if cm_id.ack_timeout is not None else ack_timeout(CA_ACK_DELAY, path.packet_life_time)
    return CmReq(
        local_comm_id=cm_id.local_comm_id, service_id=service_id(cm_id.port_space, cm_id.remote[1]),
        local_ca_guid=ca_guid, local_qpn=param.qp_num, responder_resources=param.responder_resources,
        initiator_depth=param.initiator_depth, remote_cm_response_timeout=response_timeout,
        transport_service_type=0 if cm_id.qp_type == QPT_RC else 1, end_to_end_flow_control=bool(param.flow_control),
        starting_psn=cm_id.seq_num, local_cm_response_timeout=response_timeout, retry_count=min(param.retry_count, RETRY_MAX),
        partition_key=DEFAULT_PKEY, path_mtu=path.mtu, rnr_retry_count=min(param.rnr_retry_count, RETRY_MAX),
        max_cm_retries=max_retries, srq=bool(param.srq), primary_local_lid=PERMISSIVE_LID,
        primary_remote_lid=PERMISSIVE_LID, primary_local_gid=local_gid, primary_remote_gid=path.dgid,
        primary_flow_label=path.flow_label, primary_traffic_class=path.traffic_class,
        primary_hop_limit=path.hop_limit, primary_local_ack_timeout=timeout, private_data=private_data,
    )  # fmt: skip


def make_rep(cm_id: CmId, param: ConnParam, ca_guid: int) -> CmRep:
    """The REP that accepts the REQ ``cm_id`` holds."""
    return CmRep(
        local_comm_id=cm_id.local_comm_id, remote_comm_id=cm_id.remote_comm_id, local_qpn=param.qp_num,
        starting_psn=cm_id.seq_num, responder_resources=param.responder_resources,
        initiator_depth=param.initiator_depth, target_ack_delay=CA_ACK_DELAY,
        end_to_end_flow_control=bool(param.flow_control), rnr_retry_count=min(param.rnr_retry_count, RETRY_MAX),
        srq=bool(param.srq), local_ca_guid=ca_guid, private_data=param.private_data,
    )  # fmt: skip
