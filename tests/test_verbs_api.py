"""The verbs control path and API misuse, answered as pyverbs on rxe answers them.

Device and port queries, object lifetimes, MR/CQ/QP creation limits, the QP state machine
(Linux's ``qp_state_table`` plus rxe's attribute checks) and the errnos ``post_send`` and
``post_recv`` return. Every test opens its own Context on pyroce0 (one UDP socket and engine).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import ipaddress
import mmap
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import pyroce.verbs.enums as e
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.cq import CQ, WC
from pyroce.verbs.device import Context, get_device_list
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE, RecvWR, SendWR

A = e.ibv_access_flags
M = e.ibv_qp_attr_mask
QPS = e.ibv_qp_state
QPT = e.ibv_qp_type
WR = e.ibv_wr_opcode

LOCAL_WRITE = A.IBV_ACCESS_LOCAL_WRITE
MAX_INLINE_DATA = 400  # rxe's RXE_MAX_INLINE_DATA
POLL_DEADLINE_S = 2.0
RESET_TO_INIT_MASK = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS

QP_CAP_LIMITS = {
    "max_send_wr": lambda attr: attr.max_qp_wr,
    "max_recv_wr": lambda attr: attr.max_qp_wr,
    "max_send_sge": lambda attr: attr.max_sge,
    "max_recv_sge": lambda attr: attr.max_sge,
    "max_inline_data": lambda attr: MAX_INLINE_DATA,
}


@contextlib.contextmanager
def raises_errno(code: int) -> Iterator[None]:
    """The block raises PyverbsRDMAError carrying errno ``code``."""
    with pytest.raises(PyverbsRDMAError) as info:
        yield
    got = info.value.error_code
    assert got == code, f"errno {errno.errorcode.get(got, got)}, expected {errno.errorcode[code]}: {info.value}"


def make_qp(pd: PD, cq: CQ, qp_type: int = QPT.IBV_QPT_RC, **cap: int) -> QP:
    return QP(pd, QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq, cap=QPCap(**cap)))


def connect_attr(ctx: Context, dest_qp_num: int) -> QPAttr:
    """Everything RESET -> INIT -> RTR -> RTS needs, aimed at ``dest_qp_num`` on this device's GID."""
    attr = QPAttr(port_num=1, path_mtu=e.ibv_mtu.IBV_MTU_1024)
    attr.qp_access_flags = LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ
    attr.dest_qp_num = dest_qp_num
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, 0)))
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.max_rd_atomic = 1
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.rq_psn = 0x123
    attr.sq_psn = 0x456
    return attr


def to_state(qp: QP, attr: QPAttr, state: int) -> None:
    """Walk a new QP to ``state`` the way an application would."""
    if state == QPS.IBV_QPS_INIT:
        qp.to_init(attr)
    elif state == QPS.IBV_QPS_RTR:
        qp.to_rtr(attr)
    elif state == QPS.IBV_QPS_RTS:
        qp.to_rts(attr)
    elif state == QPS.IBV_QPS_ERR:
        qp.to_init(attr)
        modify_state(qp, QPS.IBV_QPS_ERR)
    else:
        assert state == QPS.IBV_QPS_RESET


def modify_state(qp: QP, state: int) -> None:
    qp.modify(QPAttr(qp_state=state), M.IBV_QP_STATE)


def recv_wr(mr: MR, wr_id: int, num_sge: int = 1) -> RecvWR:
    return RecvWR(wr_id=wr_id, sg=[SGE(mr.buf + 64 * i, 64, mr.lkey) for i in range(num_sge)])


def send_wr(mr: MR, wr_id: int = 1, opcode: int = WR.IBV_WR_SEND, num_sge: int = 1, length: int = 64,
            send_flags: int = e.ibv_send_flags.IBV_SEND_SIGNALED) -> SendWR:  # fmt: skip
    sg = [SGE(mr.buf + length * i, length, mr.lkey) for i in range(num_sge)]
    return SendWR(wr_id=wr_id, opcode=opcode, sg=sg, send_flags=send_flags)


def poll_until(cq: CQ, count: int) -> list[WC]:
    """``count`` completions, polling for up to POLL_DEADLINE_S."""
    deadline = time.monotonic() + POLL_DEADLINE_S
    wcs: list[WC] = []
    while len(wcs) < count and time.monotonic() < deadline:
        wcs += cq.poll(count - len(wcs))[1]
    assert len(wcs) == count, f"{len(wcs)} of {count} completions after {POLL_DEADLINE_S} s: {wcs}"
    return wcs


@pytest.fixture
def ctx() -> Iterator[Context]:
    with Context(name="pyroce0") as context:
        yield context


@pytest.fixture
def pd(ctx: Context) -> PD:
    return PD(ctx)


@pytest.fixture
def cq(ctx: Context) -> CQ:
    return CQ(ctx, 64)


@pytest.fixture
def mr(pd: PD) -> MR:
    return MR(pd, 4096, LOCAL_WRITE)


@pytest.fixture
def peer(pd: PD, cq: CQ) -> QP:
    """A QP to name as dest_qp_num; it stays in RESET, so it never answers."""
    return make_qp(pd, cq)


@pytest.fixture
def rts_qp(ctx: Context, pd: PD, cq: CQ, peer: QP) -> QP:
    """An RTS QP with 4 send WRs of 1 SGE and 16 inline bytes, aimed at a peer that never answers."""
    qp = make_qp(pd, cq, max_send_wr=4, max_send_sge=1, max_inline_data=16)
    qp.to_rts(connect_attr(ctx, peer.qp_num))
    return qp


# --- device and port ------------------------------------------------------------------------------------------------


def test_device_list_has_pyroce0():
    assert b"pyroce0" in [device.name for device in get_device_list()]


@pytest.mark.parametrize("name", ["nosuch", b"nosuch"])
def test_unknown_device_is_enodev(name):
    with raises_errno(errno.ENODEV):
        Context(name=name)


RXE_DEVICE = {  # rxe_param.h: the values libraries check (UCX, libfabric, MPI size their QPs by them)
    "max_qp_rd_atom": 128, "max_qp_init_rd_atom": 128, "max_res_rd_atom": 0x3F000, "max_sge": 32,
    "max_sge_rd": 32, "max_qp_wr": 0x4000, "max_srq_sge": 27, "max_mr_size": (1 << 64) - 1,
    "page_size_cap": 0xFFFFF000, "atomic_caps": e.ibv_atomic_cap.IBV_ATOMIC_HCA, "phys_port_cnt": 1,
    "local_ca_ack_delay": 15, "max_mcast_grp": 8192, "max_mcast_qp_attach": 56, "max_total_mcast_qp_attach": 0x70000,
}  # fmt: skip
RXE_PORT = {"active_width": 1, "active_speed": 1, "max_msg_sz": 0x800000, "max_vl_num": 1}  # 1X, SDR: 2.5 Gb/s


def test_query_device_reports_rxes_limits_and_one_port(ctx):
    attr = ctx.query_device()
    assert {name: getattr(attr, name) for name in RXE_DEVICE} == RXE_DEVICE
    assert attr.max_cqe >= 32767  # rxe's 2**15 - 1, or more (DeviceAttr says why)
    assert attr.max_qp_init_rd_atom <= attr.max_qp_rd_atom  # a QP initiates no more than a peer takes
    assert attr.page_size_cap & 4096  # 4 KiB pages (libraries test the bit of their page size)


def test_device_cap_flags_are_what_pyroce_does(ctx):
    """Exactly the capabilities pyroce has (verbs/device.py says why each); the 64-bit
    ``device_cap_flags_ex`` holds them too, as the kernel answers."""
    C = e.ibv_device_cap_flags
    expected = (C.IBV_DEVICE_UD_AV_PORT_ENFORCE | C.IBV_DEVICE_CURR_QP_STATE_MOD | C.IBV_DEVICE_PORT_ACTIVE_EVENT
                | C.IBV_DEVICE_SYS_IMAGE_GUID | C.IBV_DEVICE_RC_RNR_NAK_GEN | C.IBV_DEVICE_SRQ_RESIZE
                | C.IBV_DEVICE_MEM_WINDOW | C.IBV_DEVICE_BAD_PKEY_CNTR | C.IBV_DEVICE_BAD_QKEY_CNTR)  # fmt: skip
    assert ctx.query_device().device_cap_flags == expected
    assert ctx.query_device_ex().device_cap_flags_ex == expected
    assert ctx.query_device().sys_image_guid == ctx.query_device().node_guid != 0


def test_query_port_1_is_active_ethernet(ctx):
    port = ctx.query_port(1)
    assert {name: getattr(port, name) for name in RXE_PORT} == RXE_PORT
    assert port.state == e.ibv_port_state.IBV_PORT_ACTIVE
    assert port.link_layer == e.ibv_link_layer.IBV_LINK_LAYER_ETHERNET
    assert port.active_mtu in set(e.ibv_mtu)
    assert port.active_mtu <= port.max_mtu


@pytest.mark.parametrize("port_num", [0, 2])
def test_query_missing_port_is_einval(ctx, port_num):
    with raises_errno(errno.EINVAL):
        ctx.query_port(port_num)


def test_gid_table_is_linuxs_for_a_roce_port(ctx):
    """Link-local then the address, each RoCE v1 and v2: index 3 is RoCE v2 over IPv4, where
    rdma-core's pyverbs documentation and the tutorials look for it."""
    address = ctx.query_gid(1, 3).ipv4()
    assert address is not None and ctx.query_gid(1, 3) == GID(f"::ffff:{address}") == ctx.query_gid(1, 2)
    ip = ipaddress.IPv4Address(address).packed
    mac_iid = bytes([0, 0, ip[0], 0xFF, 0xFE, *ip[1:]])  # EUI-64 of the MAC 02:00:a:b:c:d
    assert ctx.query_gid(1, 0) == ctx.query_gid(1, 1) == GID(b"\xfe\x80" + bytes(6) + mac_iid)
    assert ctx.query_port(1).gid_tbl_len == 16
    sysfs = e.ibv_gid_type_sysfs
    assert [ctx.query_gid_type(1, i) for i in range(4)] == [sysfs.IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
                                                            sysfs.IBV_GID_TYPE_SYSFS_ROCE_V2] * 2  # fmt: skip
    assert ctx.query_gid(1, 4) == GID(bytes(16))  # empty entries follow, zero as libibverbs reads them
    with raises_errno(errno.ENODATA):
        ctx.query_gid_type(1, 4)


@pytest.mark.parametrize(("port_num", "index"), [(1, 16), (2, 0)])
def test_query_gid_outside_the_table_is_einval(ctx, port_num, index):
    with raises_errno(errno.EINVAL):
        ctx.query_gid(port_num, index)


def test_query_gid_ex_names_index_type_and_netdev(ctx):
    entry = ctx.query_gid_ex(1, 3)
    assert (entry.gid_index, entry.port_num, entry.gid_type) == (3, 1, e.ibv_gid_type.IBV_GID_TYPE_ROCE_V2)
    if str(ctx.query_gid(1, 3).ipv4()).startswith("127."):  # the default, a loopback address
        assert entry.ndev_ifindex == socket.if_nametoindex("lo")
    assert GID(entry.gid_str()) == ctx.query_gid(1, 3)
    assert "GID type                : RoCEv2" in str(entry)
    assert "GID type                : RoCEv1" in str(ctx.query_gid_ex(1, 0))
    with raises_errno(errno.ENODATA):
        ctx.query_gid_ex(1, 4)
    with raises_errno(errno.EINVAL):
        ctx.query_gid_ex(1, 16)


def test_query_gid_table_lists_every_entry_or_is_einval_when_they_do_not_fit(ctx):
    entries = ctx.query_gid_table(8)
    assert [entry.gid_str() for entry in entries] == [ctx.query_gid_ex(1, i).gid_str() for i in range(4)]
    assert [entry.gid_index for entry in entries] == [0, 1, 2, 3]
    with raises_errno(errno.EINVAL):
        ctx.query_gid_table(3)


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_every_gid_index_connects_a_qp_and_moves_data(ctx, index):
    """A v1 entry's traffic is RoCE v2 as a v2 entry's (the link is UDP); the link-local GID
    names the device's address: every index works between pyroce peers."""
    pd, cq = PD(ctx), CQ(ctx, 8)
    a, b = make_qp(pd, cq, max_send_wr=4, max_recv_wr=4), make_qp(pd, cq, max_send_wr=4, max_recv_wr=4)
    for qp, peer in ((a, b), (b, a)):
        attr = connect_attr(ctx, peer.qp_num)
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, index), sgid_index=index))
        attr.rq_psn = attr.sq_psn
        qp.to_rts(attr)
    mr = MR(pd, 64, LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE)
    mr.write(b"hello", 5)
    wr = SendWR(opcode=e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(mr.buf, 5, mr.lkey)])
    wr.set_wr_rdma(mr.rkey, mr.buf + 32)
    a.post_send(wr)
    (wc,) = poll_until(cq, 1)
    assert wc.status == e.ibv_wc_status.IBV_WC_SUCCESS and mr.read(5, 32) == b"hello"


@pytest.mark.parametrize("index", [4, 16])
def test_sgid_index_of_an_empty_entry_or_past_the_table_is_einval(ctx, index):
    pd, cq = PD(ctx), CQ(ctx, 8)
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, qp.qp_num)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, 3), sgid_index=index))
    with raises_errno(errno.EINVAL):
        qp.to_rts(attr)


def test_pkey_table_holds_the_default_pkey_only(ctx):
    assert ctx.query_pkey(1, 0) == 0xFFFF
    with raises_errno(errno.EINVAL):
        ctx.query_pkey(1, 1)


# --- lifetimes ------------------------------------------------------------------------------------------------------


def test_objects_are_context_managers(ctx):
    with PD(ctx) as pd, CQ(ctx, 8) as cq, MR(pd, 64, LOCAL_WRITE) as mr, make_qp(pd, cq) as qp:
        assert not any(obj.closed for obj in (pd, cq, mr, qp))
    assert all(obj.closed for obj in (pd, cq, mr, qp))


def test_close_twice_is_harmless(ctx, pd, cq, mr):
    qp = make_qp(pd, cq)
    for obj in (qp, mr, cq, pd, ctx):
        obj.close()
        obj.close()
        assert obj.closed


def test_closing_context_closes_its_children(ctx, pd, cq, mr):
    qp = make_qp(pd, cq)
    ctx.close()
    assert all(obj.closed for obj in (qp, mr, cq, pd, ctx))


def test_closing_cq_closes_its_qps(pd, cq):
    qp = make_qp(pd, cq)
    cq.close()
    assert qp.closed
    assert not pd.closed


def test_closed_mr_is_ebadf(mr):
    mr.close()
    with raises_errno(errno.EBADF):
        _ = mr.lkey
    with raises_errno(errno.EBADF):
        _ = mr.rkey
    with raises_errno(errno.EBADF):
        mr.read(1, 0)
    with raises_errno(errno.EBADF):
        mr.write(b"x", 1)


def test_closed_context_is_ebadf():
    context = Context(name="pyroce0")
    context.close()
    with raises_errno(errno.EBADF):
        context.query_device()
    with raises_errno(errno.EBADF):
        PD(context)


def test_closed_qp_is_ebadf(pd, cq, mr):
    qp = make_qp(pd, cq)
    qp.close()
    with raises_errno(errno.EBADF):
        modify_state(qp, QPS.IBV_QPS_RESET)
    with raises_errno(errno.EBADF):
        qp.post_recv(recv_wr(mr, 1))
    with raises_errno(errno.EBADF):
        qp.post_send(send_wr(mr))


def test_closed_cq_is_ebadf(cq):
    cq.close()
    with raises_errno(errno.EBADF):
        cq.poll(1)


def test_mr_dropped_without_close_is_deregistered(pd):
    buf = bytearray(64)
    mr = MR(pd, 64, LOCAL_WRITE, address=buf)
    del mr
    gc.collect()
    buf.extend(b"x")  # BufferError while a registration still exports the buffer
    assert len(buf) == 65


# A QP and its CQ nobody closed, reachable only through a reference cycle, and a collection in
# the middle of an engine pass (a capture sink runs there, under the device's lock): the
# collection must not wait for the lock its own thread holds, and the QP is still destroyed.
COLLECTED_IN_A_PASS = """
import gc, time
import pyroce.verbs.enums as e
from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.verbs.cq import CQ
from pyroce.verbs.qp import QP, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, SendWR

a, b = RcEndpoint.open(4096), RcEndpoint.open(4096)
a.connect(b.info())
b.connect(a.info())

class Cycle:
    pass

def orphan():
    cycle = Cycle()
    cycle.itself = cycle
    cycle.cq = CQ(a.ctx, 4)
    cycle.qp = QP(a.pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=cycle.cq, rcq=cycle.cq, cap=QPCap()))
    return cycle.qp.qp_num

gc.disable()
qpn = orphan()
engine = a.ctx.device.engine
assert qpn in engine.qps
found = []
a.ctx.device.start_capture(sink=lambda frame: found.append(gc.collect()))
wr = SendWR(opcode=e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
a.qp.post_send(wr)
(done,) = a.poll()
a.ctx.device.stop_capture()
deadline = time.monotonic() + 10
while qpn in engine.qps and time.monotonic() < deadline:
    time.sleep(0.01)
print(done.status, sum(found) > 0, qpn in engine.qps)
"""


def test_an_object_collected_in_an_engine_pass_is_closed_without_a_deadlock() -> None:
    env = {**os.environ, "PYROCE_NIC": "own"}
    try:
        run = subprocess.run([sys.executable, "-c", COLLECTED_IN_A_PASS], check=False, capture_output=True,
                             text=True, timeout=60, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the collection waited for the device's lock its own thread held")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "True", "False"]  # the WRITE completed; the QP is gone


# An MR nobody closed, found by a collection just before the program ends: the closer thread
# closes it and has ended before the interpreter's finalization, which would freeze it where it
# stands (a device's lock held with it).
COLLECTED_AT_EXIT = """
import atexit, gc, threading, weakref

def at_finalization():  # registered before pyroce's own exit handlers: runs after them
    closer = [thread for thread in threading.enumerate() if thread.name == "pyroce-verbs-closer"]
    print(bool(closer), collected() is None)

atexit.register(at_finalization)
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD

ctx = Context(name="pyroce0")
pd = PD(ctx)

class Cycle:
    pass

def orphan():
    cycle = Cycle()
    cycle.itself = cycle
    cycle.mr = MR(pd, 4096, 1)
    return weakref.ref(cycle.mr)

gc.disable()
collected = orphan()
gc.collect()
"""


def test_the_closer_thread_ends_before_the_interpreter_does() -> None:
    env = {**os.environ, "PYROCE_NIC": "own"}
    run = subprocess.run([sys.executable, "-c", COLLECTED_AT_EXIT], check=False, capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]  # no closer left; the MR closed and let go


def test_an_object_two_threads_close_at_once_is_released_once(pd):
    """The closer thread may be closing an MR when the program closes its PD: the PD's close
    waits for the MR's, which releases it once, and the PD's own release finds it gone."""
    releasing, go = threading.Event(), threading.Event()
    releases, errors = [], []

    class SlowMR(MR):
        def _release(self) -> None:
            releases.append(threading.current_thread().name)
            releasing.set()
            go.wait(10)
            super()._release()

    mr = SlowMR(pd, 4096, LOCAL_WRITE)

    def close_mr() -> None:
        try:
            mr.close()
        except Exception as exc:  # noqa: BLE001 - the test's answer
            errors.append(exc)

    other = threading.Thread(target=close_mr, name="other")
    other.start()
    assert releasing.wait(10)
    threading.Timer(0.2, go.set).start()  # the PD's close below waits for it meanwhile
    pd.close()
    other.join(10)
    assert (releases, errors, mr.closed, pd.closed) == (["other"], [], True, True)


# --- memory regions -------------------------------------------------------------------------------------------------


def test_allocated_mr_round_trips_data(pd):
    mr = MR(pd, 4096, LOCAL_WRITE)
    assert isinstance(mr.buf, int) and mr.buf != 0
    assert mr.length == 4096
    mr.write(b"hello", 5, 4091)
    assert mr.read(5, 4091) == b"hello"
    assert mr.read(4, 0) == bytes(4)


@pytest.mark.parametrize(
    "access",
    [
        lambda mr: mr.read(2, 4095),
        lambda mr: mr.read(1, -1),
        lambda mr: mr.write(b"ab", 2, 4095),
        lambda mr: mr.write(b"a", 1, -1),
        lambda mr: mr.write(b"a", 2, 0),  # longer than the data given
    ],
    ids=["read past end", "read before start", "write past end", "write before start", "write beyond data"],
)
def test_mr_access_out_of_range_is_user_error(mr, access):
    with pytest.raises(PyverbsUserError):
        access(mr)


def test_mr_over_bytearray_shares_its_memory(pd):
    buf = bytearray(256)
    with MR(pd, 256, LOCAL_WRITE, address=buf) as mr:
        anchor = ctypes.c_char.from_buffer(buf)
        assert mr.buf == ctypes.addressof(anchor)
        del anchor
        mr.write(b"via mr", 6, 10)
        assert buf[10:16] == b"via mr"
        buf[100:104] = b"back"
        assert mr.read(4, 100) == b"back"


def test_mr_over_mmap_shares_its_memory(pd):
    with mmap.mmap(-1, 8192) as mem, MR(pd, 8192, LOCAL_WRITE, address=mem) as mr:
        anchor = ctypes.c_char.from_buffer(mem)
        assert mr.buf == ctypes.addressof(anchor)
        del anchor
        mr.write(b"page two", 8, 4096)
        assert mem[4096:4104] == b"page two"
        mem[0:3] = b"abc"
        assert mr.read(3, 0) == b"abc"


def test_mr_over_numpy_array_shares_its_memory(pd):
    np = pytest.importorskip("numpy")
    array = np.zeros(64, dtype=np.uint32)
    with MR(pd, array.nbytes, LOCAL_WRITE, address=array) as mr:
        assert mr.buf == array.ctypes.data
        mr.write((0x11223344).to_bytes(4, "little"), 4, 8)
        assert array[2] == 0x11223344
        array[5] = 0xA0B0C0D0
        assert mr.read(4, 20) == (0xA0B0C0D0).to_bytes(4, "little")


def test_mr_over_readonly_bytes_is_refused(pd):
    with raises_errno(errno.EFAULT):
        MR(pd, 8, LOCAL_WRITE, address=b"readonly")


@pytest.mark.parametrize("remote", [A.IBV_ACCESS_REMOTE_WRITE, A.IBV_ACCESS_REMOTE_ATOMIC])
def test_remote_write_access_without_local_write_is_einval(pd, remote):
    with raises_errno(errno.EINVAL):
        MR(pd, 64, remote)


def test_mr_keys_match_and_differ_between_mrs(pd):
    first = MR(pd, 64, LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE)
    second = MR(pd, 64, LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE)
    assert first.lkey == first.rkey
    assert second.lkey == second.rkey
    assert first.lkey != second.lkey


ADVICES = [e.IBV_ADVISE_MR_ADVICE_PREFETCH, e.IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
           e.IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT]  # fmt: skip
FLUSH = e.IBV_ADVISE_MR_FLAG_FLUSH


@pytest.mark.parametrize("flags", [0, FLUSH], ids=["async", "sync"])
@pytest.mark.parametrize("advice", ADVICES)
def test_advise_mr_prefetch_of_ranges_in_mrs_of_the_pd_succeeds(pd, advice, flags):
    """Every MR pages on demand: a prefetch of any range of an MR of the PD (the whole MR, an
    empty SGE at its end, two MRs at once) is checked and returns 0; the MR still works."""
    first = MR(pd, 4096, LOCAL_WRITE | A.IBV_ACCESS_ON_DEMAND)
    second = MR(pd, 64, LOCAL_WRITE)
    sges = [SGE(first.buf, 4096, first.lkey), SGE(second.buf + 64, 0, second.lkey), SGE(second.buf + 8, 8, second.lkey)]
    assert pd.advise_mr(advice, flags, sges) == 0
    first.write(b"paged", 5, 100)
    assert first.read(5, 100) == b"paged"


def test_advise_mr_of_a_read_only_mr_reads_but_does_not_write(pd):
    """A read prefetch of an MR without local write passes; a write prefetch is EPERM (mlx5's
    and rxe's check)."""
    read_only = MR(pd, 64, 0)
    sge = SGE(read_only.buf, 64, read_only.lkey)
    assert pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH, FLUSH, [sge]) == 0
    with raises_errno(errno.EPERM):
        pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, FLUSH, [sge])


@pytest.mark.parametrize(("case", "code"), [
    ("advice 3", errno.EOPNOTSUPP), ("flags 2", errno.EINVAL), ("no SGE", errno.EINVAL),
    ("4096 SGEs", errno.EINVAL), ("lkey of no MR", errno.EINVAL), ("MR of another PD", errno.EINVAL),
    ("MR closed", errno.EINVAL), ("before the MR", errno.EFAULT), ("past the MR", errno.EFAULT),
])  # fmt: skip
def test_advise_mr_misuse_has_the_kernels_errno(ctx, pd, mr, case, code):
    """ib_uverbs' checks (flags, an SGE list of 1 to 4095), rxe's (advice, an lkey of an MR of
    this PD, a synchronous prefetch's range inside its MR): each its errno."""
    advice, flags, sges = e.IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, FLUSH, [SGE(mr.buf, 64, mr.lkey)]
    if case == "advice 3":
        advice = 3
    elif case == "flags 2":
        flags = 2
    elif case == "no SGE":
        sges = []
    elif case == "4096 SGEs":
        sges = sges * 4096
    elif case == "lkey of no MR":
        sges = [SGE(mr.buf, 64, mr.lkey ^ 0x100)]
    elif case == "MR of another PD":
        other = MR(PD(ctx), 64, LOCAL_WRITE)
        sges = [SGE(other.buf, 64, other.lkey)]
    elif case == "MR closed":
        gone = MR(pd, 64, LOCAL_WRITE)
        sges = [SGE(gone.buf, 64, gone.lkey)]
        gone.close()
    elif case == "before the MR":
        sges = [SGE(mr.buf - 1, 64, mr.lkey)]
    else:
        sges = [SGE(mr.buf + 4096 - 63, 64, mr.lkey)]
    with raises_errno(code):
        pd.advise_mr(advice, flags, sges)


def test_advise_mr_asynchronous_checks_keys_not_ranges(pd, mr):
    """As rxe and mlx5: an asynchronous prefetch is best effort, its range faulted in (and found
    outside the MR) later or never, so only its keys are checked."""
    assert pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [SGE(mr.buf + 4000, 4096, mr.lkey)]) == 0
    with raises_errno(errno.EINVAL):
        pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [SGE(mr.buf, 64, mr.lkey + 1)])


# --- completion queues ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beyond", [False, True], ids=["cqe 0", "cqe max_cqe+1"])
def test_cq_size_outside_device_range_is_einval(ctx, beyond):
    cqe = ctx.query_device().max_cqe + 1 if beyond else 0
    with raises_errno(errno.EINVAL):
        CQ(ctx, cqe)


def test_cq_of_max_cqe_is_created(ctx):
    max_cqe = ctx.query_device().max_cqe
    with CQ(ctx, max_cqe) as cq:
        assert cq.cqe >= max_cqe


def test_poll_of_empty_cq_returns_nothing(cq):
    assert cq.poll() == (0, [])
    assert cq.poll(16) == (0, [])


def test_poll_of_zero_entries_takes_nothing(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq)
    qp.to_init(connect_attr(ctx, peer.qp_num))
    for wr_id in (1, 2, 3):
        qp.post_recv(recv_wr(mr, wr_id))
    modify_state(qp, QPS.IBV_QPS_ERR)
    assert [wc.wr_id for wc in poll_until(cq, 1)] == [1]  # the flush has reached the CQ
    assert cq.poll(0) == (0, [])
    assert [wc.wr_id for wc in poll_until(cq, 2)] == [2, 3]


# --- QP creation ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qp_type", [QPT.IBV_QPT_RAW_PACKET, QPT.IBV_QPT_XRC_SEND, QPT.IBV_QPT_XRC_RECV])
def test_qp_types_pyroce_lacks_are_eopnotsupp(pd, cq, qp_type):
    with raises_errno(errno.EOPNOTSUPP):
        make_qp(pd, cq, qp_type=qp_type)


@pytest.mark.parametrize("cap", list(QP_CAP_LIMITS))
def test_qp_cap_beyond_device_limit_is_einval(ctx, pd, cq, cap):
    limit = QP_CAP_LIMITS[cap](ctx.query_device())
    with raises_errno(errno.EINVAL):
        make_qp(pd, cq, **{cap: limit + 1})


@pytest.mark.parametrize("cap", list(QP_CAP_LIMITS))
def test_qp_cap_at_device_limit_is_accepted(ctx, pd, cq, cap):
    limit = QP_CAP_LIMITS[cap](ctx.query_device())
    qp = make_qp(pd, cq, **{cap: limit})
    assert getattr(qp.query()[1].cap, cap) >= limit


def test_a_send_queue_past_its_16_bit_counters_is_einval(pd, cq):
    """16384 WQEs of up to 16 segments take 65536 basic blocks: posted, the NIC's 16-bit counters
    would read a full queue as an empty one and the QP would hang. mlx5 refuses a send queue
    past its most WQEBBs alike (EINVAL); 3 basic blocks each (49152, a ring of 65536) still fit."""
    with raises_errno(errno.EINVAL):
        make_qp(pd, cq, max_send_wr=16384, max_send_sge=13)
    assert make_qp(pd, cq, max_send_wr=16384, max_send_sge=9).sq_wqebbs == 65536


def test_cqs_or_srq_of_another_context_than_the_pd_are_einval(ctx, pd, cq):
    """The kernel finds a QP's CQs and SRQ in the PD's context only, and a C poller finds the QP
    in its CQ's context: another context's CQ or SRQ is EINVAL, even on the same device."""
    with Context(name="pyroce0") as other:
        other_cq = CQ(other, 8)
        other_srq = SRQ(PD(other), SrqInitAttr(SrqAttr(max_wr=4)))
        for scq, rcq, srq in ((other_cq, cq, None), (cq, other_cq, None), (cq, cq, other_srq)):
            with raises_errno(errno.EINVAL):
                QP(pd, QPInitAttr(qp_type=QPT.IBV_QPT_RC, scq=scq, rcq=rcq, srq=srq))


def test_qp_numbers_start_at_0x11_and_differ(ctx, pd, cq):
    qps = [make_qp(pd, cq) for _ in range(4)]
    with Context(name="pyroce0") as other:
        qps.append(make_qp(PD(other), CQ(other, 8)))
        numbers = [qp.qp_num for qp in qps]
        assert min(numbers) >= 0x11
        assert len(set(numbers)) == len(numbers)


def test_new_qp_is_in_reset(pd, cq):
    qp = make_qp(pd, cq)
    assert qp.qp_state == QPS.IBV_QPS_RESET
    attr, init_attr = qp.query()
    assert attr.qp_state == QPS.IBV_QPS_RESET
    assert init_attr.qp_type == QPT.IBV_QPT_RC


# --- QP state machine -----------------------------------------------------------------------------------------------


def test_reset_to_rtr_is_einval(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    attr.qp_state = QPS.IBV_QPS_RTR
    mask = (M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
            | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)  # fmt: skip
    with raises_errno(errno.EINVAL):
        qp.modify(attr, mask)
    assert qp.qp_state == QPS.IBV_QPS_RESET


def test_reset_to_init_without_access_flags_is_einval(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    attr.qp_state = QPS.IBV_QPS_INIT
    with raises_errno(errno.EINVAL):
        qp.modify(attr, RESET_TO_INIT_MASK & ~M.IBV_QP_ACCESS_FLAGS)
    assert qp.qp_state == QPS.IBV_QPS_RESET


def test_reset_to_init_with_its_mask_succeeds(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    attr.qp_state = QPS.IBV_QPS_INIT
    qp.modify(attr, RESET_TO_INIT_MASK)
    assert qp.qp_state == QPS.IBV_QPS_INIT


def test_to_init_rtr_rts_walk_the_states(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    qp.to_init(attr)
    assert qp.qp_state == QPS.IBV_QPS_INIT
    qp.to_rtr(attr)
    assert qp.qp_state == QPS.IBV_QPS_RTR
    qp.to_rts(attr)
    assert qp.qp_state == QPS.IBV_QPS_RTS
    assert qp.query()[0].qp_state == QPS.IBV_QPS_RTS


def test_to_rts_from_reset_passes_through_init_and_rtr(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    qp.to_rts(connect_attr(ctx, peer.qp_num))
    assert qp.qp_state == QPS.IBV_QPS_RTS


@pytest.mark.parametrize("state", [QPS.IBV_QPS_INIT, QPS.IBV_QPS_RTR, QPS.IBV_QPS_RTS, QPS.IBV_QPS_ERR],
                         ids=["INIT", "RTR", "RTS", "ERR"])  # fmt: skip
def test_any_state_past_reset_may_go_to_err(ctx, pd, cq, peer, state):
    qp = make_qp(pd, cq)
    to_state(qp, connect_attr(ctx, peer.qp_num), state)
    modify_state(qp, QPS.IBV_QPS_ERR)
    assert qp.qp_state == QPS.IBV_QPS_ERR


def test_reset_to_err_is_einval(pd, cq):
    """Linux's qp_state_table has no RESET -> ERR (the IBA allows it; the kernel answers EINVAL)."""
    qp = make_qp(pd, cq)
    with raises_errno(errno.EINVAL):
        modify_state(qp, QPS.IBV_QPS_ERR)
    assert qp.qp_state == QPS.IBV_QPS_RESET


def test_err_to_reset_and_back_to_rts(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    to_state(qp, attr, QPS.IBV_QPS_ERR)
    modify_state(qp, QPS.IBV_QPS_RESET)
    assert qp.qp_state == QPS.IBV_QPS_RESET
    qp.to_rts(attr)
    assert qp.qp_state == QPS.IBV_QPS_RTS


@pytest.mark.parametrize(("name", "value"), [("timeout", 32), ("retry_cnt", 8), ("rnr_retry", 8)])
def test_rts_attribute_out_of_range_is_einval(ctx, pd, cq, peer, name, value):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    qp.to_rtr(attr)
    setattr(attr, name, value)
    with raises_errno(errno.EINVAL):
        qp.to_rts(attr)
    assert qp.qp_state == QPS.IBV_QPS_RTR


def test_min_rnr_timer_out_of_range_is_einval(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    qp.to_init(attr)
    attr.min_rnr_timer = 32
    with raises_errno(errno.EINVAL):
        qp.to_rtr(attr)
    assert qp.qp_state == QPS.IBV_QPS_INIT


def test_port_2_is_einval(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    attr.port_num = 2
    with raises_errno(errno.EINVAL):
        qp.to_init(attr)
    assert qp.qp_state == QPS.IBV_QPS_RESET


def test_av_without_grh_is_einval(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    attr = connect_attr(ctx, peer.qp_num)
    qp.to_init(attr)
    attr.ah_attr = AHAttr(port_num=1, is_global=0)
    with raises_errno(errno.EINVAL):
        qp.to_rtr(attr)
    assert qp.qp_state == QPS.IBV_QPS_INIT


def test_query_returns_the_attributes_set(ctx, pd, cq, peer):
    qp = make_qp(pd, cq, max_send_wr=8, max_recv_wr=16, max_send_sge=2, max_recv_sge=3, max_inline_data=32)
    qp.to_rts(connect_attr(ctx, peer.qp_num))
    attr, init_attr = qp.query()
    assert attr.qp_state == QPS.IBV_QPS_RTS
    assert attr.port_num == 1
    assert attr.path_mtu == e.ibv_mtu.IBV_MTU_1024
    assert attr.dest_qp_num == peer.qp_num
    assert attr.qp_access_flags == LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ
    assert (attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer) == (14, 7, 7, 12)
    assert (attr.max_rd_atomic, attr.max_dest_rd_atomic) == (1, 1)
    assert (attr.rq_psn, attr.sq_psn) == (0x123, 0x456)
    assert attr.ah_attr.dgid == ctx.query_gid(1, 0)
    assert init_attr.qp_type == QPT.IBV_QPT_RC
    cap = attr.cap
    assert (cap.max_send_wr, cap.max_recv_wr) >= (8, 16)
    assert (cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data) >= (2, 3, 32)


def test_query_keeps_attributes_a_modify_did_not_mask(ctx, pd, cq, peer):
    qp = make_qp(pd, cq)
    qp.to_rts(connect_attr(ctx, peer.qp_num))
    modify_state(qp, QPS.IBV_QPS_ERR)
    attr, _ = qp.query()
    assert attr.qp_state == QPS.IBV_QPS_ERR
    assert (attr.dest_qp_num, attr.timeout, attr.retry_cnt, attr.path_mtu) == (
        peer.qp_num, 14, 7, e.ibv_mtu.IBV_MTU_1024)  # fmt: skip


# --- posting work ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [QPS.IBV_QPS_RESET, QPS.IBV_QPS_INIT, QPS.IBV_QPS_RTR], ids=["RESET", "INIT", "RTR"])
def test_post_send_before_rts_is_einval(ctx, pd, cq, mr, peer, state):
    qp = make_qp(pd, cq)
    to_state(qp, connect_attr(ctx, peer.qp_num), state)
    with raises_errno(errno.EINVAL):
        qp.post_send(send_wr(mr))


def test_post_recv_in_reset_is_einval(pd, cq, mr):
    qp = make_qp(pd, cq)
    with raises_errno(errno.EINVAL):
        qp.post_recv(recv_wr(mr, 1))


def test_post_send_with_too_many_sges_is_einval(rts_qp, mr):
    with raises_errno(errno.EINVAL):
        rts_qp.post_send(send_wr(mr, num_sge=2))


@pytest.mark.parametrize("opcode", [WR.IBV_WR_TSO, WR.IBV_WR_ATOMIC_WRITE], ids=["TSO", "ATOMIC_WRITE"])
def test_unsupported_send_opcode_is_eopnotsupp(rts_qp, mr, opcode):
    with raises_errno(errno.EOPNOTSUPP):
        rts_qp.post_send(send_wr(mr, opcode=opcode))


def test_unsignaled_sends_that_never_complete_fill_the_send_queue(rts_qp, mr):
    depth = rts_qp.query()[0].cap.max_send_wr
    for wr_id in range(depth):
        rts_qp.post_send(send_wr(mr, wr_id=wr_id, send_flags=0))
    with raises_errno(errno.ENOMEM):
        rts_qp.post_send(send_wr(mr, wr_id=depth, send_flags=0))


def test_inline_data_beyond_max_inline_data_is_einval(rts_qp, mr):
    limit = rts_qp.query()[0].cap.max_inline_data
    rts_qp.post_send(send_wr(mr, length=limit, send_flags=e.ibv_send_flags.IBV_SEND_INLINE))
    with raises_errno(errno.EINVAL):
        rts_qp.post_send(send_wr(mr, length=limit + 1, send_flags=e.ibv_send_flags.IBV_SEND_INLINE))


def test_post_recv_beyond_max_recv_wr_is_enomem(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq, max_recv_wr=4)
    qp.to_init(connect_attr(ctx, peer.qp_num))
    depth = qp.query()[0].cap.max_recv_wr
    for wr_id in range(depth):
        qp.post_recv(recv_wr(mr, wr_id))
    with raises_errno(errno.ENOMEM):
        qp.post_recv(recv_wr(mr, depth))


def test_post_recv_with_too_many_sges_is_einval(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq, max_recv_sge=2)
    qp.to_init(connect_attr(ctx, peer.qp_num))
    qp.post_recv(recv_wr(mr, 1, num_sge=2))
    with raises_errno(errno.EINVAL):
        qp.post_recv(recv_wr(mr, 2, num_sge=3))


WIDE_SEND_FIELDS = [  # (what is set, the name the error gives): each wider than its C field
    (lambda wr: wr.set_wr_rdma(1 << 32, 0), "rkey 4294967296 does not fit a uint32_t"),
    (lambda wr: wr.set_wr_rdma(0, -1), "remote_addr -1 does not fit a uint64_t"),
    (lambda wr: setattr(wr.sg[0], "lkey", 1 << 32), "sg[0].lkey 4294967296 does not fit a uint32_t"),
    (lambda wr: setattr(wr.sg[0], "addr", 1 << 64), "sg[0].addr 18446744073709551616 does not fit a uint64_t"),
    (lambda wr: setattr(wr, "imm_data", 1 << 32), "imm_data 4294967296 does not fit a uint32_t"),
]


@pytest.mark.parametrize(("widen", "message"), WIDE_SEND_FIELDS, ids=["rkey", "remote_addr", "lkey", "addr", "imm"])
def test_a_send_value_wider_than_its_c_field_is_overflow_error_and_posts_nothing(rts_qp, mr, widen, message):
    """pyverbs' Cython WRs raise OverflowError when such a value is set; pyroce's raise it at
    the post, naming the field, with the WRs before it posted and none of it in the ring."""
    good = send_wr(mr, wr_id=1, opcode=WR.IBV_WR_RDMA_WRITE_WITH_IMM)
    bad = send_wr(mr, wr_id=2, opcode=WR.IBV_WR_RDMA_WRITE_WITH_IMM)
    widen(bad)
    good.next_wr = bad
    with pytest.raises(OverflowError, match=re.escape(message)):
        rts_qp.post_send(good)
    assert [wr_id for _, _, wr_id in rts_qp.sq_outstanding] == [1]


def test_a_receive_value_wider_than_its_c_field_is_overflow_error(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq, max_recv_wr=4)
    qp.to_init(connect_attr(ctx, peer.qp_num))
    wr = recv_wr(mr, 1)
    wr.sg[0].length = 1 << 32
    with pytest.raises(OverflowError, match=re.escape("sg[0].length 4294967296 does not fit a uint32_t")):
        qp.post_recv(wr)
    qp.post_recv(recv_wr(mr, 2))  # the queue took nothing of the bad one
    assert qp.rq.producer == 1


def test_err_flushes_posted_receives(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq, max_recv_wr=8)
    qp.to_rts(connect_attr(ctx, peer.qp_num))
    wr_ids = [0xC0DE0000 + i for i in range(5)]
    for wr_id in wr_ids:
        qp.post_recv(recv_wr(mr, wr_id))
    modify_state(qp, QPS.IBV_QPS_ERR)
    wcs = poll_until(cq, len(wr_ids))
    assert [wc.wr_id for wc in wcs] == wr_ids
    assert {wc.status for wc in wcs} == {e.ibv_wc_status.IBV_WC_WR_FLUSH_ERR}
    assert {wc.qp_num for wc in wcs} == {qp.qp_num}
    assert cq.poll() == (0, [])


def test_reset_empties_the_receive_queue(ctx, pd, cq, mr, peer):
    qp = make_qp(pd, cq, max_recv_wr=4)
    attr = connect_attr(ctx, peer.qp_num)
    qp.to_init(attr)
    depth = qp.query()[0].cap.max_recv_wr
    for wr_id in range(depth):
        qp.post_recv(recv_wr(mr, wr_id))
    modify_state(qp, QPS.IBV_QPS_ERR)
    modify_state(qp, QPS.IBV_QPS_RESET)
    qp.to_init(attr)
    fresh = [0x100 + i for i in range(depth)]
    for wr_id in fresh:
        qp.post_recv(recv_wr(mr, wr_id))
    modify_state(qp, QPS.IBV_QPS_ERR)
    deadline = time.monotonic() + POLL_DEADLINE_S
    seen: set[int] = set()
    while not set(fresh) <= seen and time.monotonic() < deadline:
        seen.update(wc.wr_id for wc in cq.poll(16)[1])
    assert set(fresh) <= seen


def test_query_device_ex_wraps_the_basic_attributes() -> None:
    with Context(name="pyroce0") as ctx:
        attr_ex = ctx.query_device_ex()
        assert attr_ex.orig_attr == ctx.query_device()
        assert attr_ex.phys_port_cnt_ex == 1
