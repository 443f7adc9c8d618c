"""The control verbs of the C library, in Python: each function is one verb on pyroce's verbs
objects (so a C program gets the checks and errnos a Python program gets), run by the shared
NIC (``pyroce.nicd``) as the command of the same name a driver sends. They return what the C
data path needs: where the rings and doorbell records the verbs objects allocated are (offsets
in the connection's shared memory, as the Context's ``driver_memory`` names them), which C then
writes and reads, and descriptors sent across (docs/architecture.md, "Unmodified programs: the
C driver").

A failure raises ``PyverbsRDMAError`` with libibverbs' errno, which the NIC answers and the C
side returns or puts in ``errno``. Objects are the verbs objects themselves; C holds a handle
to each.
"""

from __future__ import annotations

import errno
import struct
from typing import Any

from pyroce.host.stats_file import summary_line
from pyroce.nic.rings import UAR_SIZE
from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.ah import AH
from pyroce.verbs.ah import route_from_header as ah_route_from_header
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.cq import CQ, CompChannel
from pyroce.verbs.cq_ex import check_extended
from pyroce.verbs.device import Context, DeviceAttr, DeviceAttrEx, PortAttr
from pyroce.verbs.driver_memory import LOCAL, DriverMemory
from pyroce.verbs.mr import MR
from pyroce.verbs.mw import MW
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.qp_ex import send_ops
from pyroce.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyroce.verbs.wr import SGE

IMPLICIT_ODP_LENGTH = (1 << 64) - 1  # ibv_reg_mr(pd, NULL, SIZE_MAX, ...) asks for implicit ODP
_SGE = struct.Struct("=QII")  # struct ibv_sge, the program's byte order: addr, length, lkey
PROGRESS = "thread"  # a C program lends the engine no thread: the engine thread does everything


def _busy(obj: PyverbsObject, verb: str, what: str) -> None:
    """EBUSY while ``obj`` still has open children, as libibverbs answers (pyverbs would
    close them instead; a C program must destroy them first)."""
    if any(not child.closed for child in list(obj._children or ())):
        raise PyverbsRDMAError(f"Failed to {verb}: {what}", errno.EBUSY)


# --- devices -------------------------------------------------------------------------


def open_context(name: str, driver_memory: DriverMemory = LOCAL) -> tuple[Context, int, int]:
    """``ibv_open_device``: the Context, its doorbell fd (``host.handoff``) and ``async_fd``."""
    ctx = Context(name=name, progress=PROGRESS, driver_memory=driver_memory)
    if ctx.device.progress_mode == "host":
        ctx.close()
        raise PyverbsRDMAError("Failed to open device: PYROCE_PROGRESS=host needs a host calling step()", errno.EINVAL)
    export = ctx.driver_memory.export_fd
    return ctx, export(ctx.device.doorbell_fd), export(ctx.async_fd)


def close_context(ctx: Context) -> None:
    ctx.close()


def summary(ctx: Context) -> str:
    """``PYROCE_PRINT_STATS``' line: the device's counters as ``pyroce stats`` would sum them."""
    return summary_line(ctx.name, ctx.device.stats())


def node_guid(name: str) -> int:
    """``ibv_get_device_guid``: the GUID follows the device's address, known once it opens."""
    with Context(name=name, progress=PROGRESS) as ctx:
        return ctx.query_device().node_guid


def query_device(ctx: Context) -> DeviceAttr:
    return ctx.query_device()


def query_device_ex(ctx: Context) -> DeviceAttrEx:
    return ctx.query_device_ex()


def query_port(ctx: Context, port_num: int) -> PortAttr:
    return ctx.query_port(port_num)


def query_gid(ctx: Context, port_num: int, index: int) -> bytes:
    return ctx.query_gid(port_num, index).raw


def query_gid_type(ctx: Context, port_num: int, index: int) -> int:
    return ctx.query_gid_type(port_num, index)


def query_gid_entry(ctx: Context, port_num: int, index: int) -> tuple[bytes, int, int]:
    """``ibv_query_gid_ex``: the GID, its ``ibv_gid_type`` and the netdev's ifindex."""
    entry = ctx.query_gid_ex(port_num, index)
    return ctx.query_gid(port_num, index).raw, entry.gid_type, entry.ndev_ifindex


def gid_table_len(ctx: Context) -> int:
    """How many entries ``ibv_query_gid_table`` lists: the valid ones, at indices 0 up."""
    return len(ctx.gids.entries)


def query_pkey(ctx: Context, port_num: int, index: int) -> int:
    return ctx.query_pkey(port_num, index)


def get_async_event(ctx: Context) -> tuple[int, int]:
    """``ibv_get_async_event``: (event type, element: QPN, CQN, SRQN or port) of the next event,
    EAGAIN if none waits: C waits for ``async_fd`` itself, so a signal can end the wait."""
    ctx._check_open()
    event = ctx.async_queue.take()
    if event is None:
        raise PyverbsRDMAError("Failed to get async event: none is waiting", errno.EAGAIN)
    return event.event_type, event.element


# --- protection domains and memory -----------------------------------------------------


def alloc_pd(ctx: Context) -> PD:
    return PD(ctx)


def dealloc_pd(pd: PD) -> None:
    _busy(pd, "dealloc PD", "MRs, QPs or SRQs of the PD still exist")
    pd.close()


def reg_mr(pd: PD, addr: int, length: int, access: int) -> tuple[MR, int, int]:
    """``ibv_reg_mr`` of process memory at ``addr``: the NIC reaches it through a memoryview."""
    implicit = addr == 0 and length == IMPLICIT_ODP_LENGTH
    if addr == 0 and length and not implicit:
        raise PyverbsRDMAError("Failed to register a MR: no memory at address 0", errno.EFAULT)
    mr = MR(pd, length, access, address=None if implicit else pd.ctx.driver_memory.program_memory(addr, length),
            implicit=implicit)  # fmt: skip
    return mr, mr.lkey, mr.rkey


def rereg_mr(mr: MR, flags: int, pd: PD | None, addr: int, length: int, access: int) -> tuple[int, int]:
    """``ibv_rereg_mr``: a new translation is process memory at ``addr``, as ``reg_mr`` takes it."""
    memory = mr.pd.ctx.driver_memory.program_memory(addr, length) if addr else addr
    mr.rereg(flags, pd, memory, length, access)
    return mr.lkey, mr.rkey


def dereg_mr(mr: MR) -> None:
    mr.close()


def advise_mr(pd: PD, advice: int, flags: int, sg_list: bytes) -> None:
    """``ibv_advise_mr``: the program's ``struct ibv_sge`` array as its bytes, checked by
    ``PD.advise_mr`` (which is all a prefetch does here)."""
    pd.advise_mr(advice, flags, [SGE(*fields) for fields in _SGE.iter_unpack(sg_list)])


def alloc_mw(pd: PD, mw_type: int) -> tuple[MW, int]:
    """``ibv_alloc_mw``: the window and its rkey (a bind changes the key's low byte)."""
    mw = MW(pd, mw_type)
    return mw, mw.rkey


def dealloc_mw(mw: MW) -> None:
    mw.close()


# --- completion queues ---------------------------------------------------------------


def create_comp_channel(ctx: Context) -> tuple[CompChannel, int]:
    channel = CompChannel(ctx)
    return channel, ctx.driver_memory.export_fd(channel.fd)


def destroy_comp_channel(channel: CompChannel) -> None:
    _busy(channel, "destroy completion channel", "CQs still use it")
    channel.close()


def get_cq_event(channel: CompChannel) -> int:
    """The CQN of the next completion event, EAGAIN if none waits: C waits for the channel's fd
    itself, so a signal can end the wait (EINTR), as it ends a read of the kernel's."""
    channel._check_open()
    cqn = channel.events.take()
    if cqn is None:
        raise PyverbsRDMAError("Failed to get CQ event: none is waiting", errno.EAGAIN)
    return cqn


def _cq_ring(cq: CQ) -> tuple[int, int, int]:
    """The CQ ring's address, its entries and the consumer record's address."""
    address = cq.ctx.driver_memory.address
    ring, consumer = cq.driver_rings
    return address(ring), cq.reader.ring.cqe_count, address(consumer)


def create_cq(ctx: Context, cqe: int, channel: CompChannel | None, comp_vector: int) -> tuple[Any, ...]:
    """``ibv_create_cq``: (CQ, CQN, ring address, entries, consumer record address, cqe)."""
    cq = CQ(ctx, cqe, None, channel, comp_vector)
    return (cq, cq.hw.cqn, *_cq_ring(cq), cq.cqe)


def resize_cq(cq: CQ, cqe: int, consumer: int) -> tuple[int, int, int]:
    """``ibv_resize_cq`` after C polled up to ``consumer``: (new ring address, entries, cqe)."""
    cq.consumer = consumer
    cq.resize(cqe)
    ring, count, _ = _cq_ring(cq)
    return ring, count, cq.cqe


def check_cq_ex(wc_flags: int, parent_domain: int) -> None:
    """``ibv_create_cq_ex``: what ``pyroce.verbs.cq_ex.CQEX`` refuses; C then creates a CQ."""
    check_extended(wc_flags, bool(parent_domain))


def cq_poller_wakeup(cq: CQ) -> tuple[int, int]:
    """What C's ``ibv_poll_cq`` sleeps on past its spins (datapath.c): (its eventfd, the flag
    byte's address)."""
    napping, fd = cq.poller_wakeup()
    return cq.ctx.driver_memory.export_fd(fd), cq.ctx.driver_memory.address(napping)


def req_notify_cq(cq: CQ, solicited_only: int) -> None:
    cq.req_notify(bool(solicited_only))


def destroy_cq(cq: CQ) -> None:
    if cq.qps:
        raise PyverbsRDMAError("Failed to destroy CQ: QPs still use it", errno.EBUSY)
    cq.close()


# --- address handles ---------------------------------------------------------------


def _ah_attr(ah: dict[str, Any]) -> AHAttr:
    """An ``ibv_ah_attr`` as C passes it (a dict of its fields, the GID as 16 bytes)."""
    route = GlobalRoute(GID(ah["dgid"]), ah["flow_label"], ah["sgid_index"], ah["hop_limit"], ah["traffic_class"])
    return AHAttr(ah["dlid"], ah["sl"], ah["src_path_bits"], ah["static_rate"], ah["is_global"], ah["port_num"],
                  route)  # fmt: skip


def create_ah(pd: PD, fields: dict[str, Any]) -> AH:
    """``ibv_create_ah``: the AH's checks (a GRH, a GID the link reaches); C writes the datagram
    segment from the same ``ibv_ah_attr``."""
    return AH(pd, attr=_ah_attr(fields))


def destroy_ah(ah: AH) -> None:
    ah.close()


def route_from_header(ctx: Context, header: bytes) -> tuple[bytes, int, int, int, int]:
    """``ibv_init_ah_from_wc`` of a WC with a GRH: the 40 bytes before the datagram read as
    ``pyroce.verbs.ah`` reads them: (dgid, flow_label, sgid_index, hop_limit, traffic_class)."""
    route = ah_route_from_header(ctx, header)
    return route.dgid.raw, route.flow_label, route.sgid_index, route.hop_limit, route.traffic_class


# --- queue pairs ---------------------------------------------------------------------


def create_qp(pd: PD, send_cq: CQ, recv_cq: CQ, srq: SRQ | None, qp_type: int, sq_sig_all: int, max_send_wr: int,
              max_recv_wr: int, max_send_sge: int, max_recv_sge: int, max_inline_data: int) -> tuple[Any, ...]:  # fmt: skip
    """``ibv_create_qp``: (QP, QPN, send ring address, its basic blocks, receive ring address,
    its WQEs, their stride, doorbell record address, the max_inline_data its WQEs hold, which
    C writes back into the caller's ``cap`` as libibverbs providers do); with an SRQ, the
    receive ring is the SRQ's."""
    cap = QPCap(max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data)
    qp = QP(pd, QPInitAttr(qp_type, None, send_cq, recv_cq, srq, cap, sq_sig_all))
    ring = qp.rq.ring
    address = pd.ctx.driver_memory.address
    send_ring, doorbell = qp.driver_rings
    return (qp, qp.qp_num, address(send_ring), qp.sq_wqebbs, address(ring.buf), ring.count, ring.stride,
            address(doorbell), qp.cap.max_inline_data)  # fmt: skip


def direct_qp(qp: QP) -> int:
    """``mlx5dv_init_obj`` of a QP: its program posts by hand from now on, so the NIC reads its
    doorbell records on every pass; the address of its register page (mlx5's UAR), which the
    NIC keeps with the QP."""
    page = qp.ctx.driver_memory.alloc(UAR_SIZE)
    qp.ctx.device.direct_qp(qp.qp_num, page)
    return qp.ctx.driver_memory.address(page)


def direct_cq(cq: CQ) -> int:
    """``mlx5dv_init_obj`` of a CQ: the address of a register page for its ``cq_uar`` (where
    mlx5 programs store their arm doorbells; pyroce's arm is ``ibv_req_notify_cq``)."""
    page = cq.ctx.driver_memory.alloc(UAR_SIZE)
    cq.hw.uar = page
    return cq.ctx.driver_memory.address(page)


def qp_ex_send_ops(qp_type: int, comp_mask: int, send_ops_flags: int, create_flags: int) -> int:
    """``ibv_create_qp_ex``: the send ops after ``pyroce.verbs.qp_ex.QPEx``'s checks; C then
    creates the QP and its ``wr_*`` builders (which refuse the ops not asked for)."""
    return send_ops(qp_type, comp_mask, send_ops_flags, create_flags)


def modify_qp(qp: QP, mask: int, fields: dict[str, Any]) -> tuple[int, int] | None:
    """``ibv_modify_qp`` with ``ibv_qp_attr``'s fields by name (``ah_attr``: a dict of its
    own, the GID as 16 bytes). To RESET, returns where each CQ's CQEs of the QP's new life
    start (the send CQ's, the receive CQ's): those before are skipped, as ``mlx5_cq_clean``."""
    attr = QPAttr()
    for name, value in fields.items():
        if name != "ah_attr":
            setattr(attr, name, value)
    ah = fields.get("ah_attr")
    if ah is not None:
        attr.ah_attr = _ah_attr(ah)
    qp.modify(attr, mask)
    if qp.qp_state == 0:  # IBV_QPS_RESET
        reset_at = qp.completing.reset_at
        return reset_at[qp.scq.hw.cqn], reset_at[qp.rcq.hw.cqn]
    return None


def query_qp(qp: QP) -> QPAttr:
    """``ibv_query_qp``: the attributes (``cap`` included) as the QP holds them."""
    attr, _ = qp.query()
    return attr


def destroy_qp(qp: QP) -> None:
    qp.close()


def attach_mcast(qp: QP, gid: bytes, lid: int) -> None:
    """``ibv_attach_mcast`` with the GID's 16 bytes."""
    qp.attach_mcast(GID(gid), lid)


def detach_mcast(qp: QP, gid: bytes, lid: int) -> None:
    qp.detach_mcast(GID(gid), lid)


# --- shared receive queues --------------------------------------------------------------


def _srq_ring(srq: SRQ) -> tuple[int, int, int]:
    ring = srq.rq.ring
    return srq.pd.ctx.driver_memory.address(ring.buf), ring.count, ring.stride


def create_srq(pd: PD, max_wr: int, max_sge: int) -> tuple[Any, ...]:
    """``ibv_create_srq``: (SRQ, SRQN, ring address, WQEs, stride, doorbell record address)."""
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr, max_sge)))
    return (srq, srq.hw.srqn, *_srq_ring(srq), pd.ctx.driver_memory.address(srq.doorbell_record))


def modify_srq(srq: SRQ, max_wr: int, srq_limit: int, mask: int) -> tuple[int, int, int]:
    """``ibv_modify_srq``: the ring afterwards (a resize moves the WQEs not yet taken to a new
    one, at the same counters)."""
    srq.modify(SrqAttr(max_wr, srq.rq.max_sge, srq_limit), mask)
    return _srq_ring(srq)


def query_srq(srq: SRQ) -> tuple[int, int, int]:
    """``ibv_query_srq``: max_wr, max_sge and the armed limit (0 once it fired)."""
    attr = srq.query()
    return attr.max_wr, attr.max_sge, attr.srq_limit


def destroy_srq(srq: SRQ) -> None:
    srq.close()
