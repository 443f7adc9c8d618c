"""Devices and contexts (pyverbs ``device.pyx``): ``get_device_list``, ``Context``, the
attributes it reports, modelled on what rxe reports for a RoCE port (rxe_param.h), its GID
table (``pyroce.verbs.gids``: Linux's four entries, and what a RoCE v1 one does on a UDP device) and its asynchronous events
(``get_async_event``, ``AsyncEvent``)."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field, fields

from pyroce.host.registry import DEVICE_NAMES, LinkError, netdev_ifindex, netdev_mtu, open_device, release_device
from pyroce.ib.addressing import GID_TABLE_LEN, node_guid_of
from pyroce.ib.limits import MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_MSG_SZ, MAX_TOTAL_MCAST_QP_ATTACH
from pyroce.nic.device import NicDevice
from pyroce.verbs.addr import GID, gid_of_address
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.driver_memory import LOCAL, DriverMemory
from pyroce.verbs.enums import (
    ibv_atomic_cap,
    ibv_device_cap_flags,
    ibv_event_type,
    ibv_link_layer,
    ibv_mtu,
    ibv_node_type,
    ibv_odp_general_caps,
    ibv_odp_transport_cap_bits,
    ibv_port_state,
    ibv_transport_type,
)
from pyroce.verbs.gids import GID_TYPE_SYSFS, GIDEntry, roce_gid_table, translate_gid_type
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.wire.bth import DEFAULT_PKEY
from pyroce.wire.mtu import mtu_for_netdev

PORT_NUM = 1
__all__ = ["AsyncEvent", "Context", "Device", "DeviceAttr", "DeviceAttrEx", "GIDEntry", "ODPCaps", "PortAttr", "get_device_list",
           "translate_event_type", "translate_gid_type"]  # fmt: skip


@dataclass
class _Attr:
    def __str__(self) -> str:
        return "\n".join(f"{f.name.replace('_', ' ').capitalize():<28}: {getattr(self, f.name)}" for f in fields(self))


_CAP = ibv_device_cap_flags
PORT_COUNTER_MAX = 0xFFFF
DEVICE_CAP_FLAGS = (
    _CAP.IBV_DEVICE_UD_AV_PORT_ENFORCE  # one port: an AH of any other is EINVAL (verbs/ah.py)
    | _CAP.IBV_DEVICE_CURR_QP_STATE_MOD  # modify_qp honours IBV_QP_CUR_STATE as rdmavt does (verbs/qp.py)
    | _CAP.IBV_DEVICE_PORT_ACTIVE_EVENT  # the port coming up raises IBV_EVENT_PORT_ACTIVE (nic/device.py set_port_state)
    | _CAP.IBV_DEVICE_SYS_IMAGE_GUID  # sys_image_guid is the node GUID (query_device)
    | _CAP.IBV_DEVICE_RC_RNR_NAK_GEN  # a SEND with no receive WQE is answered with an RNR NAK (transport/responder.py)
    | _CAP.IBV_DEVICE_SRQ_RESIZE  # modify_srq with IBV_SRQ_MAX_WR resizes, keeping the WQEs posted (verbs/srq.py)
    | _CAP.IBV_DEVICE_MEM_WINDOW  # type 1 and type 2 memory windows (verbs/mw.py, nic/memory.py)
    | _CAP.IBV_DEVICE_BAD_PKEY_CNTR  # the port's bad_pkey_cntr counts packets dropped for their P_Key (query_port)
    | _CAP.IBV_DEVICE_BAD_QKEY_CNTR  # and qkey_viol_cntr the UD datagrams dropped for their Q_Key
)
"""``device_cap_flags``: only what pyroce does (each bit's reason beside it). Not offered, though
rxe reports them: AUTO_PATH_MIG and CHANGE_PHY_PORT (no
alternate path; one port), MEM_MGT_EXTENSIONS (no fast-register work request), and
MEM_WINDOW_TYPE_2B (an access through a type 2 window checks its PD, not the QP that bound it)."""


@dataclass
class DeviceAttr(_Attr):
    """``ibv_device_attr`` with rxe's limits (``rxe_param.h``), but ``max_cqe``: rxe's 32767 is
    too few for libfabric's ofi_rxm, which opens one CQ for all its connections (262144 entries
    by default) and so fails on rxe; ConnectX allows 2^22 - 1, pyroce 2^20 - 1 (a 64 MiB ring)."""

    fw_ver: str = "0.1.0"
    node_guid: int = 0
    sys_image_guid: int = 0
    max_mr_size: int = (1 << 64) - 1
    page_size_cap: int = 0xFFFFF000
    vendor_id: int = 0xFFFFFF
    vendor_part_id: int = 0
    hw_ver: int = 0
    max_qp: int = 0x10000
    max_qp_wr: int = 0x4000
    device_cap_flags: int = DEVICE_CAP_FLAGS
    max_sge: int = 32
    max_sge_rd: int = 32
    max_cq: int = 0x4000
    max_cqe: int = (1 << 20) - 1
    max_mr: int = 0x100000
    max_pd: int = 0x10000
    max_qp_rd_atom: int = 128
    max_ee_rd_atom: int = 0
    max_res_rd_atom: int = 0x3F000
    max_qp_init_rd_atom: int = 128
    max_ee_init_rd_atom: int = 0
    atomic_caps: int = ibv_atomic_cap.IBV_ATOMIC_HCA
    max_ee: int = 0
    max_rdd: int = 0
    max_mw: int = 0x1000  # rxe_param.h RXE_MAX_MW
    max_raw_ipv6_qp: int = 0
    max_raw_ethy_qp: int = 0
    max_mcast_grp: int = MAX_MCAST_GRP  # rxe_param.h's; what ``nic.multicast`` enforces
    max_mcast_qp_attach: int = MAX_MCAST_QP_ATTACH
    max_total_mcast_qp_attach: int = MAX_TOTAL_MCAST_QP_ATTACH
    max_ah: int = 0x8000
    max_fmr: int = 0
    max_map_per_fmr: int = 0
    max_srq: int = 0xDFFFF  # rxe: DEFAULT_MAX_VALUE - RXE_MIN_SRQ_INDEX
    max_srq_wr: int = 0x4000
    max_srq_sge: int = 27
    max_pkeys: int = 1
    local_ca_ack_delay: int = 15
    phys_port_cnt: int = 1


_ODP_RC = (ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_SEND | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_RECV
           | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_WRITE | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_READ
           | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_ATOMIC | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_SRQ_RECV)  # fmt: skip
_ODP_UD = (ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_SEND | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_RECV
           | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_SRQ_RECV)  # fmt: skip
_ODP_UC = (ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_SEND | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_RECV
           | ibv_odp_transport_cap_bits.IBV_ODP_SUPPORT_WRITE)  # fmt: skip


@dataclass
class ODPCaps(_Attr):
    """``ibv_odp_caps`` (pyverbs' ``ODPCaps``, with ``xrc_odp_caps``): on-demand paging is what
    pyroce does for every MR (the NIC reads and writes registered memory when a packet needs it,
    nothing is pinned, an unmapped page fails the access), so an ``IBV_ACCESS_ON_DEMAND`` MR
    works for every operation of RC, UC and UD (rxe offers RC and UD). Not implicit ODP: an MR
    of the whole address space has no memory behind it here; no XRC."""

    general_caps: int = int(ibv_odp_general_caps.IBV_ODP_SUPPORT)
    rc_odp_caps: int = _ODP_RC
    uc_odp_caps: int = _ODP_UC
    ud_odp_caps: int = _ODP_UD
    xrc_odp_caps: int = 0


@dataclass
class DeviceAttrEx(_Attr):
    """``ibv_device_attr_ex``: the basic attributes in ``orig_attr``, and ODP (``ODPCaps``);
    no other extended capability (TSO, RSS, device memory ...) is offered yet."""

    orig_attr: DeviceAttr
    odp_caps: ODPCaps = field(default_factory=ODPCaps)
    comp_mask: int = 0
    completion_timestamp_mask: int = 0
    hca_core_clock: int = 0
    device_cap_flags_ex: int = 0
    max_dm_size: int = 0
    phys_port_cnt_ex: int = 1


@dataclass
class PortAttr(_Attr):
    """``ibv_port_attr`` of a RoCE port."""

    state: int = ibv_port_state.IBV_PORT_ACTIVE
    max_mtu: int = ibv_mtu.IBV_MTU_4096
    active_mtu: int = ibv_mtu.IBV_MTU_1024
    gid_tbl_len: int = GID_TABLE_LEN
    port_cap_flags: int = 0
    max_msg_sz: int = MAX_MSG_SZ
    bad_pkey_cntr: int = 0
    qkey_viol_cntr: int = 0
    pkey_tbl_len: int = 1
    lid: int = 0
    sm_lid: int = 0
    lmc: int = 0
    max_vl_num: int = 1
    sm_sl: int = 0
    subnet_timeout: int = 0
    init_type_reply: int = 0
    active_width: int = 1
    active_speed: int = 1
    phys_state: int = 5  # LinkUp
    link_layer: int = ibv_link_layer.IBV_LINK_LAYER_ETHERNET
    flags: int = 0
    port_cap_flags2: int = 0


@dataclass
class Device:
    """An entry of ``get_device_list()``; ``name`` is bytes, as in pyverbs."""

    name: bytes
    node_type: int = ibv_node_type.IBV_NODE_CA
    transport_type: int = ibv_transport_type.IBV_TRANSPORT_IB
    guid: int = 0


NIC_CHOICES = ("own", "shared")
DEFAULT_NIC = "own"


def nic_choice(nic: str | None = None) -> str:
    """Where a Context's device lives: ``nic`` if given, else ``PYROCE_NIC``, else ``own``
    (README, "Where a device lives"); EINVAL for anything else."""
    choice = nic or os.environ.get("PYROCE_NIC") or DEFAULT_NIC
    if choice not in NIC_CHOICES:
        raise PyverbsRDMAError(f"PYROCE_NIC={choice!r} is not one of {', '.join(NIC_CHOICES)}", errno.EINVAL)
    return choice


def get_device_list() -> list[Device]:
    return [Device(name.encode()) for name in DEVICE_NAMES]


class AsyncEvent:
    """An asynchronous event (``ibv_async_event``), as pyverbs' ``AsyncEvent``: ``event_type``
    and ``ack()``. pyroce adds ``element`` (the QPN of a QP event, the CQN of a CQ event, the
    port number of a port event, 0 for the device; C's ``element`` union) and ``reason``, one
    line on why."""

    def __init__(self, event_type: int = 0, element: int = 0, reason: str = "") -> None:
        self.event_type = event_type
        self.element = element
        self.reason = reason

    def ack(self) -> None:
        """``ibv_ack_async_event``: nothing waits on it in pyroce (destroying a QP or CQ with
        unacknowledged events does not block), but programs written for libibverbs call it."""

    def __str__(self) -> str:
        return f"{'Event Type':<24}: {translate_event_type(self.event_type):<20}\n"

    def __repr__(self) -> str:
        return f"AsyncEvent({translate_event_type(self.event_type)}, element={self.element}, reason={self.reason!r})"


def translate_event_type(event_type: int) -> str:
    """``IBV_EVENT_PORT_ERR`` for 10 (pyverbs' ``translate_event_type``)."""
    known = ibv_event_type._value2member_map_.get(event_type)
    return known.name if known is not None else f"Unknown event_type ({event_type})"


class Context(PyverbsObject):
    """An open device (``ibv_open_device``). ``Context(name='pyroce0')``."""

    CLOSE_ORDER = 3

    def __init__(self, name: str | bytes = "pyroce0", *, progress: str | None = None,
                 driver_memory: DriverMemory = LOCAL, nic: str | None = None, device: NicDevice | None = None,
                 **kwargs: object) -> None:  # fmt: skip
        """``progress`` (pyroce's): the mode the device starts in when ``PYROCE_PROGRESS``
        names none (the C driver, whose program lends no thread, asks for ``thread``);
        ``driver_memory`` (pyroce's): where the rings of this context's objects live
        (``verbs.driver_memory``: the shared NIC's connections give theirs); ``nic`` (pyroce's):
        ``own`` (a NIC in this process) or ``shared`` (the address's ``pyroce nicd``), else
        ``PYROCE_NIC``'s choice (``nic_choice``); ``device`` (pyroce's): a device the caller
        built and closes (``host.assembly.build_device``: a simulator's NIC on a link of its
        own, in host mode), the verbs then drive it as they drive pyroce0."""
        super().__init__()
        self.driver_memory = driver_memory
        device_name = name.decode() if isinstance(name, bytes) else name
        if device is None and device_name not in DEVICE_NAMES:
            raise PyverbsRDMAError(f"Failed to open device {device_name}: no such device", errno.ENODEV)
        self.nic = "given" if device is not None else nic_choice(nic)
        try:
            if device is not None:
                self.device = device
                device_name = device.name
            elif self.nic == "shared":
                from pyroce.nicd.remote_device import RemoteDevice

                remote = RemoteDevice(device_name)
                self.driver_memory = remote.memory
                self.device: NicDevice = remote  # type: ignore[assignment]
            else:
                self.device = open_device(device_name, progress)
        except LinkError as exc:
            raise PyverbsRDMAError(
                f"Failed to open device {device_name}: {exc.strerror}", exc.errno or errno.EIO
            ) from None
        self.name = device_name
        # This context's async events (pyroce's; C reads them from ``context->async_fd``): those
        # of the QPs, CQs and SRQs created on it, and every port and device event
        self.async_queue = self.device.open_async_events()
        self.gid = gid_of_address(self.device.address)
        self.gids = roce_gid_table(PORT_NUM, self.device.address, netdev_ifindex(self.device))
        self.active_mtu = mtu_for_netdev(netdev_mtu(self.device))

    @property
    def num_comp_vectors(self) -> int:
        return 1

    def _release(self) -> None:
        self.device.close_async_events(self.async_queue)
        if self.nic == "shared":
            self.device.close()
        elif self.nic == "own":
            release_device(self.device)

    @property
    def async_fd(self) -> int:
        """pyroce's ``context->async_fd`` (pyverbs has no accessor): readable while
        asynchronous events of this context wait (each context of a device has its own, as
        each ``ibv_open_device`` has in the kernel)."""
        self._check_open()
        return self.async_queue.fileno()

    def get_async_event(self) -> AsyncEvent:
        """``ibv_get_async_event``: the next asynchronous event, waiting for one (EAGAIN if
        ``async_fd`` was made non-blocking and none waits)."""
        self._check_open()
        self.device.waiting()  # the engine must run while this thread may wait
        try:
            event = self.async_queue.get()
        except BlockingIOError:
            raise PyverbsRDMAError("Failed to get async event", errno.EAGAIN) from None
        return AsyncEvent(event.event_type, event.element, event.reason)

    def query_device(self) -> DeviceAttr:
        self._check_open()
        guid = node_guid_of(self.device.address)
        return DeviceAttr(node_guid=guid, sys_image_guid=guid)

    def query_device_ex(self) -> DeviceAttrEx:
        attr = self.query_device()
        return DeviceAttrEx(attr, device_cap_flags_ex=attr.device_cap_flags)  # the kernel's: all 64 bits, the 32 too

    def _check_port(self, port_num: int) -> None:
        self._check_open()
        if port_num != PORT_NUM:
            raise PyverbsRDMAError(f"Failed to query port {port_num}: the device has port 1 only", errno.EINVAL)

    def query_port(self, port_num: int = PORT_NUM) -> PortAttr:
        self._check_port(port_num)
        state = ibv_port_state.IBV_PORT_ACTIVE if self.device.port_active else ibv_port_state.IBV_PORT_DOWN
        drops = self.device.stats()  # PortInfo's violation counters are 16 bits and stop at the top
        return PortAttr(state=state, active_mtu=int(self.active_mtu), gid_tbl_len=len(self.gids),
                        bad_pkey_cntr=min(drops.get("drop_pkey", 0), PORT_COUNTER_MAX),
                        qkey_viol_cntr=min(drops.get("drop_qkey", 0), PORT_COUNTER_MAX))  # fmt: skip

    def query_gid(self, port_num: int, index: int) -> GID:
        """The GID at ``index``, zero where it is empty (EINVAL past the table, or on another port)."""
        self._check_port(port_num)
        return self.gids.gid(index)

    def query_gid_type(self, port_num: int, index: int) -> int:
        """``ibv_query_gid_type``: the sysfs numbering (IBV_GID_TYPE_SYSFS_ROCE_V2 = 1)."""
        self._check_port(port_num)
        return GID_TYPE_SYSFS[self.gids.row(index)[1]]

    def query_gid_ex(self, port_num: int, gid_index: int, flags: int = 0) -> GIDEntry:
        """``ibv_query_gid_ex``: the entry at ``gid_index`` with its type and netdev."""
        self._check_port(port_num)
        return self.gids.entry(gid_index)

    def query_gid_table(self, max_entries: int, flags: int = 0) -> list[GIDEntry]:
        """``ibv_query_gid_table``: every valid entry of every port; EINVAL when they do not
        fit in ``max_entries``, as libibverbs answers."""
        self._check_open()
        if max_entries < len(self.gids.entries):
            raise PyverbsRDMAError("Failed to query gid tables of the device", errno.EINVAL)
        return [self.gids.entry(index) for index in range(len(self.gids.entries))]

    def query_pkey(self, port_num: int, index: int) -> int:
        self._check_port(port_num)
        if index != 0:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}", errno.EINVAL)
        return DEFAULT_PKEY
