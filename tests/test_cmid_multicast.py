"""rdma_cm multicast for pyverbs programs: UD ids join a group (MULTICAST_JOIN with the group's
AH, QPN 0xFFFFFF and rdma_cm's Q_Key), a datagram sent to it reaches every QP joined, a member
that left gets nothing more, and the errnos of Linux's rdma_cm and librdmacm. In one process on
one device; ``test_shared_nic_suite`` runs them again on the shared NIC."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from pyroce.cm.errors import CmError
from pyroce.ib.addressing import ROCE_V2_INDEX, roce_gid
from pyroce.verbs.addrinfo import AddrInfo
from pyroce.verbs.ah import AH
from pyroce.verbs.cm_enums import (
    RDMA_CM_JOIN_MC_ATTR_ADDRESS,
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
    RDMA_CM_JOIN_MC_ATTR_RESERVED,
    RDMA_MC_JOIN_FLAG_FULLMEMBER,
    RDMA_MC_JOIN_FLAG_RESERVED,
    RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
    RDMA_UDP_QKEY,
    rdma_port_space,
)
from pyroce.verbs.cmid import CMID, CMEventChannel, JoinMCAttrEx, UDParam
from pyroce.verbs.enums import ibv_wc_status
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from tests.cm_pair import E, expect, qp_attr
from tests.waiting import readable

UDP = rdma_port_space.RDMA_PS_UDP
GROUP = "239.1.2.3"
GRH = 40
BOTH_MASKS = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS


@pytest.fixture
def channel() -> Iterator[CMEventChannel]:
    channel = CMEventChannel()
    yield channel
    channel.close()


def bound(channel: CMEventChannel, port_space: int = UDP, qp: bool = True) -> CMID:
    """A UD id bound to the device's address (a QP of its own with ``qp``)."""
    cmid = CMID(channel, port_space=port_space)
    cmid.bind_addr(AddrInfo(src=channel.device.address, port_space=port_space))
    if qp:
        cmid.create_qp(qp_attr(port_space))
    return cmid


def joined(channel: CMEventChannel, cmid: CMID, flags: int = RDMA_MC_JOIN_FLAG_FULLMEMBER) -> UDParam:
    """``cmid`` joined to GROUP with ``flags``: the group as its MULTICAST_JOIN reports it."""
    cmid.join_multicast(mc_attr=JoinMCAttrEx(AddrInfo(src=GROUP), comp_mask=BOTH_MASKS, join_flags=flags))
    event = expect(channel, E.RDMA_CM_EVENT_MULTICAST_JOIN)
    event.ack_cm_event()
    return UDParam(event)


def errno_of(call) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(PyverbsRDMAError) as failed:
        call()
    return failed.value.error_code


def test_join_reports_the_group_as_linux_roce_does(channel) -> None:
    cmid = bound(channel, qp=False)
    cmid.join_multicast(AddrInfo(src=GROUP))
    event = expect(channel, E.RDMA_CM_EVENT_MULTICAST_JOIN)
    assert event.status == 0
    group = UDParam(event)
    assert (group.qp_num, group.qkey) == (0xFFFFFF, RDMA_UDP_QKEY)
    ah = group.ah_attr
    assert ah.is_global == 1 and ah.port_num == 1 and ah.dlid == 0
    assert ah.gr.dgid.raw == roce_gid(GROUP) == bytes(10) + b"\xff\xff" + bytes([239, 1, 2, 3])
    assert (ah.gr.sgid_index, ah.gr.hop_limit) == (ROCE_V2_INDEX, 64)  # the id's RoCEv2 GID; IPv6's default
    cmid.leave_multicast(AddrInfo(src=GROUP))


def test_the_event_carries_the_joins_context_and_counts_for_the_leave(channel) -> None:
    """The NIC's side, as ucma reports it: the event names the join (its context: librdmacm's
    uid of it), LEAVE answers how many of the join's events were taken, and a left join is
    ENOENT; destroying an id leaves its groups."""
    cm = channel.device.cm
    cmid = bound(channel, qp=False)
    nic_id = cmid.id.cm_id
    first = cm.join_multicast(nic_id, GROUP, RDMA_MC_JOIN_FLAG_FULLMEMBER, 4242)
    second = cm.join_multicast(nic_id, GROUP, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, 4343)  # Linux takes it again
    assert readable(channel.fd, 10)
    event = cm.get_event(channel.channel)
    assert (event.event, event.context, event.group, event.status) == (E.RDMA_CM_EVENT_MULTICAST_JOIN, 4242, first, 0)
    assert cm.leave_multicast(first) == 1
    assert cm.leave_multicast(second) == 0  # its event, never taken, went with it
    assert cm.get_event(channel.channel) is None
    with pytest.raises(CmError) as again:
        cm.leave_multicast(first)
    assert again.value.errno == errno.ENOENT
    third = cm.join_multicast(nic_id, "ff0e::1:2", RDMA_MC_JOIN_FLAG_FULLMEMBER, 1)  # an IPv6 group: its own GID
    assert cm.get_event(channel.channel).ud.ah.dgid == bytes.fromhex("ff0e0000000000000000000000010002")
    cmid.close()
    with pytest.raises(CmError) as gone:
        cm.leave_multicast(third)
    assert gone.value.errno == errno.ENOENT


def test_a_datagram_to_the_group_reaches_every_member_until_it_leaves(channel) -> None:
    sender, first, second = bound(channel), bound(channel), bound(channel)
    group = joined(channel, sender, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    for member in (first, second):
        joined(channel, member)
    outbox = sender.reg_msgs(GRH + 64)
    inboxes = {member: member.reg_msgs(GRH + 64) for member in (first, second)}

    def send(payload: bytes) -> None:
        outbox.write(payload, len(payload))
        sender.post_ud_send(outbox, AH(sender.pd, attr=group.ah_attr), rqpn=group.qp_num, length=len(payload))
        assert sender.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS

    for member, inbox in inboxes.items():
        member.post_recv(inbox)
    send(b"to the whole group")
    for member, inbox in inboxes.items():
        wc = member.get_recv_comp()
        assert (wc.status, wc.byte_len, wc.src_qp) == (ibv_wc_status.IBV_WC_SUCCESS, GRH + 18, sender.qpn)
        assert inbox.read(18, GRH) == b"to the whole group"
        assert inbox.read(4, GRH - 4) == bytes([239, 1, 2, 3])  # the IPv4 header's destination: the group

    second.leave_multicast(AddrInfo(src=GROUP))  # its QP detached, then the NIC leaves
    for member, inbox in inboxes.items():
        member.post_recv(inbox)
    send(b"after one left")
    assert first.get_recv_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert inboxes[first].read(14, GRH) == b"after one left"
    assert second.qp.rq.wr_ids, "the member that left received the datagram"  # its receive is still posted


def test_a_send_only_member_receives_nothing(channel) -> None:
    sender, listener = bound(channel), bound(channel)
    group = joined(channel, sender)
    joined(channel, listener, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)  # librdmacm attaches no QP
    inbox, outbox = listener.reg_msgs(GRH + 8), sender.reg_msgs(GRH + 8)
    listener.post_recv(inbox)
    sender.post_recv(outbox)  # a full member: its own datagram comes back to it
    sender.post_ud_send(outbox, AH(sender.pd, attr=group.ah_attr), rqpn=group.qp_num, length=8)
    assert sender.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert sender.get_recv_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert listener.qp.rq.wr_ids, "a send-only member received the datagram"


def test_join_and_leave_errors_as_linux(channel) -> None:
    unbound = CMID(channel, port_space=UDP)
    assert errno_of(lambda: unbound.join_multicast(AddrInfo(src=GROUP))) == errno.EINVAL  # no device yet
    cmid = bound(channel, qp=False)
    assert errno_of(lambda: cmid.join_multicast(AddrInfo(src="10.1.2.3"))) == errno.EINVAL  # not a group
    assert errno_of(lambda: cmid.join_multicast(AddrInfo(src="0.0.0.0"))) == errno.EINVAL
    tcp = bound(channel, rdma_port_space.RDMA_PS_TCP, qp=False)
    assert errno_of(lambda: tcp.join_multicast(AddrInfo(src=GROUP))) == errno.EINVAL  # multicast is UD's
    # rdma_join_multicast_ex's own checks of the attributes
    address = AddrInfo(src=GROUP)
    for mask, flags, code in ((RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS, 0, errno.EINVAL),
                              (RDMA_CM_JOIN_MC_ATTR_ADDRESS, 0, errno.EINVAL),
                              (BOTH_MASKS, RDMA_MC_JOIN_FLAG_RESERVED, errno.EINVAL),
                              (BOTH_MASKS | RDMA_CM_JOIN_MC_ATTR_RESERVED, 0, errno.EOPNOTSUPP)):  # fmt: skip
        attr = JoinMCAttrEx(address, comp_mask=mask, join_flags=flags)
        assert errno_of(lambda attr=attr: cmid.join_multicast(mc_attr=attr)) == code, (mask, flags)
    assert errno_of(lambda: cmid.leave_multicast(address)) == errno.EADDRNOTAVAIL  # never joined
    joined(channel, cmid)
    cmid.leave_multicast(address)
    assert errno_of(lambda: cmid.leave_multicast(address)) == errno.EADDRNOTAVAIL  # left already


def test_a_resolved_id_joins_the_group_it_resolved(channel) -> None:
    """mckey's and rdma-core's way: the group resolved as the destination (no route asked for
    a multicast address), then joined."""
    cmid = CMID(channel, port_space=UDP)
    cmid.resolve_addr(AddrInfo(src=channel.device.address, dst=GROUP, port_space=UDP))
    expect(channel, E.RDMA_CM_EVENT_ADDR_RESOLVED).ack_cm_event()
    cmid.create_qp(qp_attr(UDP))
    assert joined(channel, cmid).qp_num == 0xFFFFFF
    cmid.close()
