"""rdma_cm for pyverbs programs in one process: two CMIDs on one device connect through the
NIC's connection manager (REQ, REP, RTU on QP1), move data through the QPs the CM connected, and
disconnect; rejections, SIDR, the channel's fd, and the errnos librdmacm gives."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator

import pytest

from pyroce.ib.cm import RejectReason
from pyroce.verbs.addrinfo import AddrInfo
from pyroce.verbs.ah import AH
from pyroce.verbs.cm_enums import (
    RAI_PASSIVE,
    RDMA_OPTION_ID,
    RDMA_OPTION_ID_ACK_TIMEOUT,
    RDMA_OPTION_ID_REUSEADDR,
    RDMA_UDP_QKEY,
    rdma_port_space,
)
from pyroce.verbs.cmid import CMID, CMEvent, CMEventChannel, ConnParam, UDParam
from pyroce.verbs.cq import CQ
from pyroce.verbs.enums import ibv_access_flags, ibv_qp_state, ibv_qp_type, ibv_send_flags, ibv_wc_status
from pyroce.verbs.enums import ibv_qp_attr_mask as M
from pyroce.verbs.mr import MR
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.cm_pair import E, connected, expect, listen, request, resolved
from tests.waiting import readable, spin_until

UDP = rdma_port_space.RDMA_PS_UDP
SIGNALED = ibv_send_flags.IBV_SEND_SIGNALED


@pytest.fixture
def channels() -> Iterator[tuple[CMEventChannel, CMEventChannel]]:
    """A server's and a client's event channel on this process's pyroce0."""
    server, client = CMEventChannel(), CMEventChannel()
    yield server, client
    client.close()
    server.close()


def test_connect_exchange_rdma_and_disconnect_on_one_device(channels) -> None:
    server, client = channels
    listener, child, cmid = connected(server, client, 7471)
    assert cmid.qp.qp_state == ibv_qp_state.IBV_QPS_RTS and child.qp.qp_state == ibv_qp_state.IBV_QPS_RTS
    attr, _ = cmid.query_qp(M.IBV_QP_DEST_QPN)
    assert attr.dest_qp_num == child.qpn  # the CM gave each QP the other's number

    inbox, outbox = child.reg_msgs(64), cmid.reg_msgs(64)
    child.post_recv(inbox)
    outbox.write(b"hello through rdma_cm", 21)
    cmid.post_send(outbox, length=21)
    assert cmid.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    wc = child.get_recv_comp()
    assert (wc.status, wc.byte_len) == (ibv_wc_status.IBV_WC_SUCCESS, 21)
    assert inbox.read(21, 0) == b"hello through rdma_cm"

    target, source = child.reg_write(64), child.reg_read(64)
    outbox.write(b"W" * 16, 16)
    cmid.post_write(outbox, 16, target.buf, target.rkey, flags=SIGNALED)
    assert cmid.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert target.read(16, 0) == b"W" * 16
    source.write(b"read me back....", 16)
    cmid.post_read(outbox, 16, source.buf, source.rkey, flags=SIGNALED)
    assert cmid.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert outbox.read(16, 0) == b"read me back...."

    cmid.disconnect()  # its QP to ERROR, a DREQ
    assert cmid.qp.qp_state == ibv_qp_state.IBV_QPS_ERR
    expect(server, E.RDMA_CM_EVENT_DISCONNECTED).ack_cm_event()
    child.disconnect()
    assert child.qp.qp_state == ibv_qp_state.IBV_QPS_ERR
    expect(client, E.RDMA_CM_EVENT_DISCONNECTED).ack_cm_event()
    for cm in (cmid, child, listener):
        cm.close()


def test_reject_with_private_data(channels) -> None:
    server, client = channels
    listener = listen(server, 7472)
    cmid = resolved(client, server.device.address, 7472)
    cmid.connect(ConnParam())
    child = request(server, listener)
    child.reject(b"connection rejected")
    event = expect(client, E.RDMA_CM_EVENT_REJECTED)
    assert event.private_data[:19] == b"connection rejected"
    assert event.status == RejectReason.CONSUMER_DEFINED
    assert cmid.qp.qp_state == ibv_qp_state.IBV_QPS_ERR  # librdmacm moves the QP to ERROR on REJECTED


def test_connect_to_a_port_nobody_listens_on_is_rejected(channels) -> None:
    server, client = channels
    listener = listen(server, 7473)
    cmid = resolved(client, server.device.address, 7474)
    cmid.connect(ConnParam())
    event = expect(client, E.RDMA_CM_EVENT_REJECTED)
    assert event.status == RejectReason.INVALID_SERVICE_ID
    assert not readable(server.fd, 0.2), "the listener on another port saw something"
    listener.close()


def test_a_hundred_connections_to_one_listener(channels) -> None:
    server, client = channels
    listener = listen(server, 7475)
    cmids = [resolved(client, server.device.address, 7475) for _ in range(100)]
    for cmid in cmids:
        cmid.connect(ConnParam())
    children = []
    for _ in cmids:
        child = request(server, listener)
        child.accept(ConnParam())
        children.append(child)
    for _ in cmids:
        expect(client, E.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
        expect(server, E.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
    by_qpn = {child.qpn: child for child in children}
    for index, cmid in enumerate(cmids):
        peer = by_qpn[cmid.query_qp(M.IBV_QP_DEST_QPN)[0].dest_qp_num]  # each client QP has its own peer
        inbox, outbox = peer.reg_msgs(8), cmid.reg_msgs(8)
        peer.post_recv(inbox)
        outbox.write(index.to_bytes(8, "little"), 8)
        cmid.post_send(outbox)
        assert cmid.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
        assert peer.get_recv_comp().status == ibv_wc_status.IBV_WC_SUCCESS
        assert int.from_bytes(inbox.read(8, 0), "little") == index
    assert len(by_qpn) == 100


def test_ud_through_sidr(channels) -> None:
    server, client = channels
    listener = listen(server, 7476, UDP)
    cmid = resolved(client, server.device.address, 7476, UDP)
    cmid.connect(ConnParam())
    child = request(server, listener, UDP)
    child.accept(ConnParam())
    event = expect(client, E.RDMA_CM_EVENT_ESTABLISHED)
    peer = UDParam(event)
    assert (peer.qp_num, peer.qkey) == (child.qpn, RDMA_UDP_QKEY)

    inbox, outbox = child.reg_msgs(40 + 32), cmid.reg_msgs(40 + 32)
    child.post_recv(inbox)
    outbox.write(b"a datagram by SIDR", 18)
    cmid.post_ud_send(outbox, AH(cmid.pd, attr=peer.ah_attr), rqpn=peer.qp_num, length=18)
    assert cmid.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    wc = child.get_recv_comp()
    assert (wc.status, wc.byte_len, wc.src_qp) == (ibv_wc_status.IBV_WC_SUCCESS, 40 + 18, cmid.qpn)
    assert inbox.read(18, 40) == b"a datagram by SIDR"
    # the answer goes back by an AH made from the datagram, as rdma-core's test does
    cmid.post_recv(outbox)
    inbox.write(b"answer", 6)
    child.post_ud_send(inbox, AH(child.pd, wc=wc, port_num=1, grh=inbox.buf), rqpn=wc.src_qp, length=6)
    assert child.get_send_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert cmid.get_recv_comp().status == ibv_wc_status.IBV_WC_SUCCESS
    assert outbox.read(6, 40) == b"answer"


def test_sidr_to_a_port_nobody_listens_on_is_unreachable(channels) -> None:
    server, client = channels
    cmid = resolved(client, server.device.address, 7477, UDP)
    cmid.connect(ConnParam())
    assert expect(client, E.RDMA_CM_EVENT_UNREACHABLE).status != 0


def test_the_channel_fd_in_select_and_non_blocking(channels) -> None:
    server, client = channels
    with pytest.raises(PyverbsRDMAError) as nothing:
        CMEvent(client)  # no id on it: nothing can come
    assert nothing.value.error_code == errno.EINVAL
    cmid = CMID(client)
    assert not readable(client.fd, 0)
    os.set_blocking(client.fd, False)
    try:
        with pytest.raises(PyverbsRDMAError) as again:
            CMEvent(client)
        assert again.value.error_code == errno.EAGAIN
        cmid.resolve_addr(AddrInfo(dst=server.device.address, dst_service="7478"))
        assert readable(client.fileno(), 10)
        assert CMEvent(client).event_type == E.RDMA_CM_EVENT_ADDR_RESOLVED
        assert not readable(client.fd, 0)
    finally:
        os.set_blocking(client.fd, True)


def test_the_channel_fd_drives_asyncio(channels) -> None:
    server, client = channels
    listener = listen(server, 7479)

    async def next_event(channel: CMEventChannel) -> CMEvent:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(channel.fd, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, 10)
        finally:
            loop.remove_reader(channel.fd)
        return CMEvent(channel)

    async def serve() -> int:
        event = await next_event(server)
        assert event.event_type == E.RDMA_CM_EVENT_CONNECT_REQUEST
        child = CMID(event, listen_id=listener)
        child.accept(ConnParam(qp_num=0x123))  # no QP: the parameters name the caller's own
        return (await next_event(server)).event_type

    async def connect() -> list[int]:
        cmid = CMID(client)
        cmid.resolve_addr(AddrInfo(dst=server.device.address, dst_service="7479"))
        seen = [(await next_event(client)).event_type]
        cmid.resolve_route()
        seen.append((await next_event(client)).event_type)
        cmid.connect(ConnParam(qp_num=0x456))
        seen.append((await next_event(client)).event_type)  # no QP: CONNECT_RESPONSE, then establish()
        cmid.establish()
        return seen

    async def both() -> tuple[int, list[int]]:
        return await asyncio.gather(serve(), connect())

    served, seen = asyncio.run(both())
    assert seen == [E.RDMA_CM_EVENT_ADDR_RESOLVED, E.RDMA_CM_EVENT_ROUTE_RESOLVED, E.RDMA_CM_EVENT_CONNECT_RESPONSE]
    assert served == E.RDMA_CM_EVENT_ESTABLISHED


def test_private_data_over_the_limit_is_einval(channels) -> None:
    server, client = channels
    listener = listen(server, 7480)
    cmid = resolved(client, server.device.address, 7480)
    too_long = ConnParam(data_len=57)
    too_long.set_private_data(b"x" * 57)
    with pytest.raises(PyverbsRDMAError) as refused:
        cmid.connect(too_long)  # a REQ carries 56 bytes after rdma_cm's header
    assert refused.value.error_code == errno.EINVAL
    fits = ConnParam(data_len=56)
    fits.set_private_data(b"y" * 56)
    cmid.connect(fits)
    event = expect(server, E.RDMA_CM_EVENT_CONNECT_REQUEST)
    assert event.private_data == b"y" * 56
    child = CMID(event, listen_id=listener)
    child.create_qp(cmid.qp.init_attr)
    with pytest.raises(PyverbsRDMAError) as rejected:
        child.reject(b"z" * 149)  # a REJ carries 148
    assert rejected.value.error_code == errno.EINVAL


def test_listen_on_a_port_in_use_is_eaddrinuse(channels) -> None:
    server, _ = channels
    holder = listen(server, 7481)  # held: a CMID dropped is destroyed, and its port free again
    with pytest.raises(PyverbsRDMAError) as taken:
        listen(server, 7481)
    assert taken.value.error_code == errno.EADDRINUSE
    passive = AddrInfo(src=server.device.address, src_service="7482", flags=RAI_PASSIVE)
    first, second = CMID(server), CMID(server)
    for cmid in (first, second):  # both may bind with SO_REUSEADDR's rdma_cm twin; one may listen
        cmid.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, 1, 4)
        cmid.bind_addr(passive)
    first.listen()
    with pytest.raises(PyverbsRDMAError) as listening:
        second.listen()
    assert listening.value.error_code == errno.EADDRINUSE
    holder.close()
    listen(server, 7481)  # the port is free once its listener is gone


def test_addresses_no_pyroce_device_has(channels) -> None:
    server, _ = channels
    cmid = CMID(server)
    other = "127.3.2.1" if server.device.address != "127.3.2.1" else "127.3.2.2"
    with pytest.raises(PyverbsRDMAError) as local:
        cmid.bind_addr(AddrInfo(src=other, src_service="7483", flags=RAI_PASSIVE))
    assert local.value.error_code == errno.ENODEV  # this host's, but no RDMA device's
    with pytest.raises(PyverbsRDMAError) as foreign:
        cmid.bind_addr(AddrInfo(src="192.0.2.1", src_service="7483", flags=RAI_PASSIVE))
    assert foreign.value.error_code == errno.EADDRNOTAVAIL  # not this host's at all


def test_ack_timeout_option_reaches_the_qp(channels) -> None:
    server, client = channels
    listener = listen(server, 7484)
    cmid = resolved(client, server.device.address, 7484)
    cmid.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, 21, 1)
    cmid.connect(ConnParam())
    child = request(server, listener)
    child.accept(ConnParam())
    expect(client, E.RDMA_CM_EVENT_ESTABLISHED)
    assert cmid.query_qp(M.IBV_QP_TIMEOUT)[0].timeout == 21


def test_errors_before_the_id_is_ready(channels) -> None:
    _, client = channels
    cmid = CMID(client)
    with pytest.raises(PyverbsRDMAError) as early:
        cmid.connect(ConnParam())
    assert early.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as no_qp:
        cmid.post_send(MR(client.device.pd, 8, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE))
    assert no_qp.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as bad_space:
        CMID(client, port_space=0x1234)
    assert bad_space.value.error_code == errno.EINVAL


def test_passive_addrinfo_and_its_errors() -> None:
    info = AddrInfo(src="127.0.0.1", src_service="7471", flags=RAI_PASSIVE)
    assert info.src_addr == ("127.0.0.1", 7471) and info.dst_addr is None
    active = AddrInfo(src="127.0.0.1", dst="127.0.0.2", dst_service="7471", port_space=UDP)
    assert active.src_addr == ("127.0.0.1", 0) and active.dst_addr == ("127.0.0.2", 7471)
    group = AddrInfo(src="239.1.2.3", src_service="5000")  # the source alone, as rdma_getaddrinfo gives it
    assert group.src_addr == ("239.1.2.3", 5000) and group.dst_addr is None
    with pytest.raises(PyverbsRDMAError) as bad:
        AddrInfo(dst="not-an-address", dst_service="1", flags=2)  # RAI_NUMERICHOST
    assert bad.value.error_code == errno.EADDRNOTAVAIL


def test_pyverbs_module_names() -> None:
    """rdma-core's tests import ``pyverbs.cmid`` and ``pyverbs.cm_enums`` (v44) or
    ``pyverbs.librdmacm_enums``: the compatibility package serves all three."""
    import importlib
    import sys

    from pyroce.pyverbs_path import DIRECTORY

    sys.path.insert(0, str(DIRECTORY))
    try:
        cmid = importlib.import_module("pyverbs.cmid")
        ce = importlib.import_module("pyverbs.cm_enums")
        new = importlib.import_module("pyverbs.librdmacm_enums")
    finally:
        sys.path.remove(str(DIRECTORY))
        for name in [name for name in sys.modules if name == "pyverbs" or name.startswith("pyverbs.")]:
            del sys.modules[name]
    assert cmid.CMID is CMID and cmid.AddrInfo is AddrInfo and cmid.UDParam is UDParam
    assert ce.RDMA_PS_TCP == 0x0106 and ce.RDMA_CM_EVENT_ESTABLISHED == 9 and ce.RAI_PASSIVE == 1
    assert new.rdma_cm_event_type.RDMA_CM_EVENT_TIMEWAIT_EXIT == 15
    assert ce.RDMA_OPTION_ID_ACK_TIMEOUT == 3


def test_external_qps_moved_with_init_qp_attr(channels) -> None:
    """rdma-core's ``with_ext_qp`` flow: QPs of the caller's own, moved to RTS with the CM's
    ``init_qp_attr`` (the client after CONNECT_RESPONSE, then ``establish()`` for the RTU)."""
    server, client = channels
    listener = listen(server, 7485)
    cmid = CMID(client)
    cmid.resolve_addr(AddrInfo(dst=server.device.address, dst_service="7485"))
    expect(client, E.RDMA_CM_EVENT_ADDR_RESOLVED)
    cmid.resolve_route()
    expect(client, E.RDMA_CM_EVENT_ROUTE_RESOLVED)

    def external_qp(owner: CMID) -> tuple[QP, CQ]:
        cq = CQ(owner.context, 8)
        init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=2, max_recv_wr=2))
        return QP(owner.pd, init, QPAttr()), cq

    def to_rts(owner: CMID, qp: QP) -> None:
        for state in (ibv_qp_state.IBV_QPS_INIT, ibv_qp_state.IBV_QPS_RTR, ibv_qp_state.IBV_QPS_RTS):
            qp.modify(*owner.init_qp_attr(state))

    client_qp, _ = external_qp(cmid)
    cmid.connect(ConnParam(qp_num=client_qp.qp_num))
    event = expect(server, E.RDMA_CM_EVENT_CONNECT_REQUEST)
    child = CMID(event, listen_id=listener)
    server_qp, server_cq = external_qp(child)
    to_rts(child, server_qp)
    child.accept(ConnParam(qp_num=server_qp.qp_num))
    expect(client, E.RDMA_CM_EVENT_CONNECT_RESPONSE)
    to_rts(cmid, client_qp)
    cmid.establish()
    expect(server, E.RDMA_CM_EVENT_ESTABLISHED)
    assert client_qp.query(M.IBV_QP_DEST_QPN)[0].dest_qp_num == server_qp.qp_num

    inbox, outbox = MR(child.pd, 16, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE), MR(cmid.pd, 16, 0)
    server_qp.post_recv(RecvWR(sg=[SGE(inbox.buf, 16, inbox.lkey)]))
    outbox.write(b"external QPs ok!", 16)
    client_qp.post_send(SendWR(sg=[SGE(outbox.buf, 16, outbox.lkey)]))
    spin_until(lambda: server_cq.poll(1)[0] == 1, "the SEND's receive completion")
    assert inbox.read(16, 0) == b"external QPs ok!"
