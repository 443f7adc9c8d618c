"""UD multicast through the verbs API on one NIC (IBA 10.5, 11.3.1; Linux rxe's ``rxe_mcast.c`` and
``rxe_rcv_mcast_pkt``): one send to a multicast GID reaches every QP attached to the group (the
sender's own too), each after its 40 bytes of network header and through its own Q_Key check;
a QP not attached, or detached, hears nothing; rxe's errnos and limits; destroying a QP detaches
it; the packet as a capture shows it (destination QP 0xFFFFFF, destination IP 239.x).

The NIC here is the one a Python program gets (``PYROCE_NIC``): the shared NIC's path is this
module under ``PYROCE_NIC=shared`` (``tests/test_shared_nic_suite.py`` runs a share of it)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.host.assembly import build_device
from pyroce.ib.limits import MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH
from pyroce.link.memory import MemoryWire
from pyroce.verbs.addr import GID
from pyroce.verbs.device import Context
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.wire import parse_frame
from pyroce.wire.framing import LINKTYPE_RAW
from tests.cli import ROOT, SRC
from tests.netns import two_hosts  # noqa: F401 - a fixture (ruff: F811 below is its use)
from tests.rc_pair import Endpoint, open_endpoint
from tests.test_ud_datapath import GRH, QKEY, RECV_AT, ah_to, post_recvs, send, ud_endpoint
from tests.test_verbs_api import raises_errno
from tests.waiting import spin_until

MULTICAST_QPN = 0xFFFFFF
_GROUP = f"239.{os.getpid() % 250 + 1}.{os.getpid() // 250 % 250 + 1}"  # this run's own: the host may hear others


def group(n: int) -> GID:
    """The n-th IPv4 multicast group of this run, as rdma_cm makes an MGID of it (IPv4-mapped)."""
    return GID(f"::ffff:{_GROUP}.{n}")


@pytest.fixture
def three() -> Iterator[tuple[Endpoint, Endpoint, Endpoint]]:
    """A sender and two receivers, UD QPs in RTS with one Q_Key."""
    eps = ud_endpoint(), ud_endpoint(), ud_endpoint()
    yield eps
    for ep in eps:
        ep.close()


def multicast(a: Endpoint, mgid: GID, payload: bytes, wr_id: int = 1) -> None:
    """One datagram from ``a`` to the group, to QP 0xFFFFFF as rdma_cm's join event names it."""
    a.mr.write(payload, len(payload), 0)
    send(a, ah_to(a, mgid.raw), MULTICAST_QPN, len(payload), wr_id=wr_id)
    (sent,) = a.poll()
    assert sent.status == e.ibv_wc_status.IBV_WC_SUCCESS


def first_receive_is_the_unicast(a: Endpoint, ep: Endpoint, qkey: int = QKEY) -> None:
    """``ep`` (one receive posted before the multicast send) heard nothing of the group: a
    unicast datagram sent afterwards takes that receive."""
    a.mr.write(b"unicast", 7, 0)
    send(a, ah_to(a, ep.info().gid), ep.qp.qp_num, 7, wr_id=9, qkey=qkey)
    a.poll()
    (wc,) = ep.poll()
    assert wc.byte_len == GRH + 7 and ep.mr.read(7, RECV_AT + GRH) == b"unicast"


def test_every_attached_qp_receives_one_send_and_no_other_does(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    a, b, c = three
    outsider = ud_endpoint()
    try:
        mgid = group(1)
        b.qp.attach_mcast(mgid, 0)
        c.qp.attach_mcast(mgid, 0)
        for ep in (b, c, outsider):
            post_recvs(ep, 1)
        multicast(a, mgid, b"to the group")
        for ep in (b, c):
            (wc,) = ep.poll()
            assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS and wc.opcode == e.ibv_wc_opcode.IBV_WC_RECV
            assert wc.src_qp == a.qp.qp_num and wc.byte_len == GRH + 12 and wc.wc_flags & e.ibv_wc_flags.IBV_WC_GRH
            assert ep.mr.read(12, RECV_AT + GRH) == b"to the group"
            header = ep.mr.read(GRH, RECV_AT)  # RoCEv2/IPv4: 20 zero bytes, then the IPv4 header
            assert header[20 + 16 : 20 + 20] == bytes(int(part) for part in mgid.ipv4().split("."))  # type: ignore[union-attr]
        first_receive_is_the_unicast(a, outsider)
    finally:
        outsider.close()


def test_a_detached_qp_hears_nothing_and_an_attached_sender_hears_itself(
    three: tuple[Endpoint, Endpoint, Endpoint],
) -> None:
    """No IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (pyroce takes no create flags): a sender attached to
    the group gets its own datagram, as a NIC's multicast loopback gives it."""
    a, b, c = three
    mgid = group(2)
    for ep in (a, b, c):
        ep.qp.attach_mcast(mgid, 0)
        post_recvs(ep, 1)
    c.qp.detach_mcast(mgid, 0)
    multicast(a, mgid, b"once")
    for ep in (a, b):
        (wc,) = ep.poll()
        assert wc.src_qp == a.qp.qp_num and ep.mr.read(4, RECV_AT + GRH) == b"once"
    first_receive_is_the_unicast(a, c)


def test_each_member_checks_the_q_key_and_counts_a_wrong_one(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    a, b, _ = three
    other = ud_endpoint(qkey=QKEY + 1)
    try:
        mgid = group(3)
        for ep in (b, other):
            ep.qp.attach_mcast(mgid, 0)
            post_recvs(ep, 1)
        before = other.ctx.device.qp_stats(other.qp.qp_num).get("drop_qkey", 0)
        multicast(a, mgid, b"qkey")
        (wc,) = b.poll()
        assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS
        spin_until(lambda: other.ctx.device.qp_stats(other.qp.qp_num).get("drop_qkey", 0) == before + 1,
                   "the other Q_Key's drop counted")  # fmt: skip
        first_receive_is_the_unicast(a, other, QKEY + 1)  # its receive WQE is still there
    finally:
        other.close()


def test_qp_0xffffff_at_a_unicast_address_is_dropped_and_counted(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    """The multicast QPN sent to an address, not a group: no group is there (rxe drops it too)."""
    a, b, _ = three
    b.qp.attach_mcast(group(4), 0)
    before = b.ctx.device.stats().get("drop_mcast_no_group", 0)
    send(a, ah_to(a, b.info().gid), MULTICAST_QPN, 4)
    a.poll()
    spin_until(lambda: b.ctx.device.stats().get("drop_mcast_no_group", 0) == before + 1, "the drop counted")


@pytest.mark.parametrize("gid", ["::ffff:10.1.2.3", "::ffff:240.0.0.1", "fe80::1", "::", "fd00::ff"])
def test_a_gid_that_is_not_multicast_is_einval(three: tuple[Endpoint, Endpoint, Endpoint], gid: str) -> None:
    with raises_errno(errno.EINVAL):
        three[1].qp.attach_mcast(GID(gid), 0)


def test_misuse_is_einval_as_rxe_answers(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    _, b, _ = three
    mgid = group(5)
    rc = open_endpoint()
    try:
        with raises_errno(errno.EINVAL):
            rc.qp.attach_mcast(mgid, 0)  # UD QPs only
    finally:
        rc.close()
    with raises_errno(errno.EINVAL):
        b.qp.detach_mcast(mgid, 0)  # never attached
    b.qp.attach_mcast(mgid, 0)
    b.qp.attach_mcast(mgid, 0)  # again: nothing to do
    b.qp.detach_mcast(mgid, 0)
    with raises_errno(errno.EINVAL):
        b.qp.detach_mcast(mgid, 0)  # one attachment, gone
    with raises_errno(errno.EINVAL):
        b.qp.attach_mcast(GID("ff0e::1:2"), 0)  # an IPv6 group: this IPv4 device's link cannot reach it
    with raises_errno(errno.EINVAL):
        b.qp.attach_mcast(mgid, 0x10000)  # a LID is 16 bits (RoCE ignores it)


def ud_qps(ep: Endpoint, count: int) -> list[QP]:
    attr = QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_UD, scq=ep.cq, rcq=ep.cq, cap=QPCap(max_send_wr=1, max_recv_wr=1))
    return [QP(ep.pd, attr) for _ in range(count)]


def test_a_group_takes_rxes_56_qps_and_destroying_one_detaches_it(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    _, b, _ = three
    assert b.ctx.query_device().max_mcast_qp_attach == MAX_MCAST_QP_ATTACH == 56
    mgid = group(6)
    qps = ud_qps(b, MAX_MCAST_QP_ATTACH + 1)
    for qp in qps[:-1]:
        qp.attach_mcast(mgid, 0)
    with raises_errno(errno.EINVAL):
        qps[-1].attach_mcast(mgid, 0)
    qps[0].close()
    qps[-1].attach_mcast(mgid, 0)


def test_a_device_takes_rxes_8192_groups(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    _, b, _ = three
    assert b.ctx.query_device().max_mcast_grp == MAX_MCAST_GRP == 8192
    mgids = [GID(f"::ffff:239.{250 + n // 65536}.{n // 256 % 256}.{n % 256}") for n in range(MAX_MCAST_GRP + 1)]
    for mgid in mgids[:-1]:
        b.qp.attach_mcast(mgid, 0)
    with raises_errno(errno.EINVAL):
        b.qp.attach_mcast(mgids[-1], 0)
    b.qp.detach_mcast(mgids[0], 0)
    b.qp.attach_mcast(mgids[-1], 0)


@pytest.mark.embedded_nic
def test_a_capture_shows_qp_0xffffff_to_the_groups_address(three: tuple[Endpoint, Endpoint, Endpoint]) -> None:
    """tshark's and scapy's view: the datagram leaves for 239.x:4791 with BTH DestQP 0xFFFFFF
    and a DETH naming the sender, its ICRC valid; the copy the NIC delivers to its own member is
    the same datagram (received, it is not recorded twice)."""
    from scapy.contrib.roce import BTH as ScapyBTH
    from scapy.layers.inet import IP

    a, b, _ = three
    mgid = group(7)
    b.qp.attach_mcast(mgid, 0)
    post_recvs(b, 1)
    capture = a.ctx.device.start_capture()
    try:
        multicast(a, mgid, b"captured")
        b.poll()
    finally:
        a.ctx.device.stop_capture()
    frames = [frame for _, frame in capture.frames]
    assert len(frames) == 1
    parsed = parse_frame(frames[0], LINKTYPE_RAW)
    assert parsed.icrc_ok and parsed.packet.bth.dqpn == MULTICAST_QPN and parsed.packet.deth.src_qp == a.qp.qp_num
    ip = IP(frames[0])
    assert ip.dst == mgid.ipv4() and ip.dport == 4791 and ip[ScapyBTH].dqpn == MULTICAST_QPN


def peer_env(address: str) -> dict[str, str]:
    """``tests/mcast_peer.py``'s environment: its own NIC on ``address``, this tree's pyroce."""
    return {**os.environ, "PYROCE_NIC": "own", "PYROCE_ADDR": address,
            "PYTHONPATH": os.pathsep.join((str(SRC), str(ROOT)))}  # fmt: skip


def test_a_group_spans_two_nics_on_two_hosts(two_hosts: tuple[str, str]) -> None:  # noqa: F811
    """Two network namespaces joined by a veth, a NIC in each: the receiver's link joined the
    group on its interface (IP_ADD_MEMBERSHIP), the sender's datagram leaves its own for the
    group's address and arrives with the sender's address and the group's in its GRH."""
    a, b = two_hosts
    peer = [sys.executable, str(ROOT / "tests" / "mcast_peer.py")]
    receiver = subprocess.Popen(["ip", "netns", "exec", b, *peer, "receive", "::ffff:239.1.1.9"], text=True,
                                stdout=subprocess.PIPE, env=peer_env("10.199.0.2"))  # fmt: skip
    try:
        assert receiver.stdout is not None and receiver.stdout.readline() == "ready\n"
        sent = subprocess.run(["ip", "netns", "exec", a, *peer, "send", "::ffff:239.1.1.9", "across"], text=True,
                              capture_output=True, check=False, timeout=60, env=peer_env("10.199.0.1"))  # fmt: skip
        assert sent.returncode == 0 and sent.stdout.startswith("sent 0 qpn="), sent.stdout + sent.stderr
        got = receiver.communicate(timeout=60)[0]
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.communicate()
    sender_qpn = int(sent.stdout.split("qpn=")[1])
    assert got == f"got across src_qp={sender_qpn} from=10.199.0.1 to=239.1.1.9\n"


def test_an_ipv6_group_on_an_ipv6_device_with_no_route_still_loops_back() -> None:
    """An IPv6 device on a bare ``lo`` (a network namespace of its own, no multicast route): the
    group's datagram cannot leave (counted, no engine error), and the NIC's own member still
    gets it, its GRH the IPv6 header from the device's address to the group."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare")
    env = peer_env("::1")
    script = f"ip link set lo up && exec {sys.executable} {ROOT / 'tests' / 'mcast_peer.py'} both ff0e::1:2 six"
    done = subprocess.run(["unshare", "-n", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got, counters = done.stdout.splitlines()
    assert got.startswith("got six src_qp=") and got.endswith(" from=::1 to=ff0e::1:2")
    stats = json.loads(counters)
    assert stats["drop_mcast_unsent"] == 1 and "engine_errors" not in stats


@pytest.mark.embedded_nic
def test_a_group_on_a_memory_wire_reaches_the_nics_that_joined_in_simulated_time() -> None:
    """Three NICs on one ``MemoryWire`` (no sockets), stepped by hand: the two whose QPs are
    attached get the sender's datagram, each once; a QP of the sender's NIC not attached gets
    nothing, and no NIC counts a drop."""
    wire = MemoryWire()
    devices = [build_device(f"wire-{n}", wire.link(f"10.3.0.{n}"), progress="host") for n in (1, 2, 3)]
    sender, *members, outsider = (open_ud(Context(device=device)) for device in (*devices, devices[0]))
    try:
        mgid = GID("::ffff:239.3.0.1")
        for ep in members:
            ep.qp.attach_mcast(mgid, 0)
            post_recvs(ep, 1)
        post_recvs(outsider, 1)
        sender.mr.write(b"wired", 5, 0)
        send(sender, ah_to(sender, mgid.raw), MULTICAST_QPN, 5)
        for step in range(4):
            for device in devices:
                device.step(step * 1e-5)
        for ep in members:
            count, wcs = ep.cq.poll(2)
            assert count == 1 and wcs[0].src_qp == sender.qp.qp_num and ep.mr.read(5, RECV_AT + GRH) == b"wired"
        assert sender.cq.poll(2)[0] == 1 and outsider.cq.poll(1)[0] == 0
        assert all("drop_mcast_no_group" not in device.stats() for device in devices)
    finally:
        for ep in (sender, *members, outsider):
            ep.close()
        for device in devices:
            device.close()


def open_ud(context: Context) -> Endpoint:
    ep = RcEndpoint.open(1 << 21, context=context, qp_type=e.ibv_qp_type.IBV_QPT_UD)
    attr = QPAttr(port_num=1)
    attr.qkey = QKEY
    ep.qp.to_rts(attr)
    return ep
