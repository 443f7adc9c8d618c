"""The rdma_cm commands of the C side, in Python: one per ucma command that
``libpyroce_rdmacm.so`` (``driver/c/rdma_cm*.c``) serves for the system's librdmacm, run by the
shared NIC (``pyroce.nicd``) as the command of the same name, on the device's connection
manager (``device.cm``, ``pyroce.cm``), as the kernel's ucma runs rdma_cm's functions for the
file ``/dev/infiniband/rdma_cm``.

They are thin on purpose: C decodes the kernel's structs (sockaddrs become ``(address, port)``,
``rdma_ucm_conn_param`` a mapping), these call the CM, and C encodes the answer (a ``CmEvent``,
``CmRoute``, ``init_qp_attr``'s values) where the kernel would write it. A refusal is the CM's
``CmError`` (an ``OSError``: its errno is what the program sees); the file's own checks are
here: an id named on a file that is not its own is EINVAL, as ucma answers.

An open of the file is a ``CmFile``: the device held open while it is (as a Context holds it)
and one event channel of its CM, whose eventfd the program gets as the file's descriptor.
"""

from __future__ import annotations

import errno
from typing import Any

from pyroce.cm.ids import CmChannel, CmId
from pyroce.cm.multicast import McGroup
from pyroce.cm.records import CmEvent, CmRoute, ConnParam
from pyroce.driver.calls import PROGRESS
from pyroce.host.registry import DEVICE_NAMES, open_device, release_device
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.driver_memory import LOCAL, DriverMemory
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

IBV_EVENT_COMM_EST = 6  # ibv_event_type: the one event ucma's NOTIFY passes on (rdma_notify)


class CmFile(PyverbsObject):
    """One open of ``/dev/infiniband/rdma_cm`` (ucma's file); closing it destroys its ids, as
    closing ucma's file does."""

    def __init__(self) -> None:
        super().__init__()
        self.device = open_device(DEVICE_NAMES[0], PROGRESS)  # the NIC's one device
        try:
            self.channel: CmChannel = self.device.cm.open_channel()
        except BaseException:
            release_device(self.device)
            raise

    def _release(self) -> None:
        try:
            self.device.cm.close_channel(self.channel)
        finally:
            release_device(self.device)

    def id_of(self, cm_id: CmId) -> CmId:
        """``cm_id``, if it is on this file (EINVAL otherwise, as ucma's ``ucma_get_ctx``)."""
        self._check_open()
        if cm_id.channel is not self.channel:
            raise PyverbsRDMAError("the id is not on this rdma_cm file", errno.EINVAL)
        return cm_id


def cm_open(driver_memory: DriverMemory = LOCAL) -> tuple[CmFile, int]:
    """``open("/dev/infiniband/rdma_cm")``: the file and its channel's eventfd."""
    file = CmFile()
    return file, driver_memory.export_fd(file.channel.fileno())


def cm_close(file: CmFile) -> None:
    file.close()


def cm_create_id(file: CmFile, uid: int, port_space: int, qp_type: int) -> CmId:
    file._check_open()
    return file.device.cm.create_id(file.channel, uid, port_space, qp_type)


def cm_destroy_id(file: CmFile, cm_id: CmId) -> int:
    """The number of events reported for the id (librdmacm waits until it has acked them)."""
    return file.device.cm.destroy_id(file.id_of(cm_id))


def cm_bind(file: CmFile, cm_id: CmId, address: tuple[str, int]) -> None:
    file.device.cm.bind(file.id_of(cm_id), address)


def cm_resolve_addr(file: CmFile, cm_id: CmId, source: tuple[str, int] | None, dest: tuple[str, int],
                    timeout_ms: int) -> None:  # fmt: skip
    file.device.cm.resolve_addr(file.id_of(cm_id), source, dest, timeout_ms)


def cm_resolve_route(file: CmFile, cm_id: CmId, timeout_ms: int) -> None:
    file.device.cm.resolve_route(file.id_of(cm_id), timeout_ms)


def cm_query(file: CmFile, cm_id: CmId) -> CmRoute:
    """QUERY_ROUTE and QUERY's address: the id's addresses, GIDs, P_Key, port and path."""
    return file.device.cm.query(file.id_of(cm_id))


def cm_connect(file: CmFile, cm_id: CmId, param: dict[str, Any]) -> None:
    file.device.cm.connect(file.id_of(cm_id), ConnParam(**param))


def cm_listen(file: CmFile, cm_id: CmId, backlog: int) -> None:
    file.device.cm.listen(file.id_of(cm_id), backlog)


def cm_accept(file: CmFile, cm_id: CmId, param: dict[str, Any] | None, uid: int | None) -> None:
    """With ``param`` the passive side's accept (REP, the id's new uid); without, the active
    side's after CONNECT_RESPONSE (RTU)."""
    file.device.cm.accept(file.id_of(cm_id), None if param is None else ConnParam(**param), uid)


def cm_reject(file: CmFile, cm_id: CmId, private_data: bytes, reason: int | None) -> None:
    file.device.cm.reject(file.id_of(cm_id), private_data, reason)


def cm_disconnect(file: CmFile, cm_id: CmId) -> None:
    file.device.cm.disconnect(file.id_of(cm_id))


def cm_join_multicast(file: CmFile, cm_id: CmId, address: str, join_flags: int, uid: int) -> McGroup:
    """JOIN_IP_MCAST and JOIN_MCAST: the join (its MULTICAST_JOIN event carries ``uid``)."""
    return file.device.cm.join_multicast(file.id_of(cm_id), address, join_flags, uid)


def cm_leave_multicast(file: CmFile, group: McGroup) -> int:
    """LEAVE_MCAST: the number of the join's events reported (EINVAL for another file's, as
    ucma answers; ENOENT for one left)."""
    file.id_of(group.cm_id)
    return file.device.cm.leave_multicast(group)


def cm_init_qp_attr(file: CmFile, cm_id: CmId, qp_state: int) -> tuple[dict[str, object], int]:
    """The ``ibv_qp_attr`` values by name (``ah_attr`` an ``AhValues``) and their ``IBV_QP_*`` mask."""
    return file.device.cm.init_qp_attr(file.id_of(cm_id), qp_state)


def cm_get_event(file: CmFile) -> CmEvent:
    """The file's oldest event, EAGAIN if none waits: C waits on the file's eventfd itself, so a
    signal ends the wait as it ends the kernel's, and the NIC never blocks."""
    file._check_open()
    event = file.device.cm.get_event(file.channel)
    if event is None:
        raise PyverbsRDMAError("Failed to get CM event: none is waiting", errno.EAGAIN)
    return event


def cm_set_option(file: CmFile, cm_id: CmId, level: int, name: int, value: bytes) -> None:
    file.device.cm.set_option(file.id_of(cm_id), level, name, value)


def cm_notify(file: CmFile, cm_id: CmId, event: int) -> None:
    """``rdma_notify``: the id's QP saw its first packet (COMM_EST, what rdma_notify passes on:
    EINVAL for another event, as the kernel's ``ib_cm_notify``)."""
    cm_id = file.id_of(cm_id)
    if event != IBV_EVENT_COMM_EST:
        raise PyverbsRDMAError(f"rdma_notify of event {event}: only IBV_EVENT_COMM_EST is passed on", errno.EINVAL)
    file.device.cm.establish(cm_id)


def cm_migrate_id(file: CmFile, current: CmFile, cm_id: CmId) -> int:
    """MIGRATE_ID, written to ``file``: the id on ``current`` moves to it; the number of events
    reported for it on ``current``."""
    file._check_open()
    return file.device.cm.migrate_id(current.id_of(cm_id), file.channel)
