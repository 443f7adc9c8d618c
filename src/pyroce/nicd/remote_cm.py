"""The connection manager of the shared NIC, as a Python program's ``device.cm`` sees it.

``RemoteCm`` offers ``pyroce.cm.manager.RdmaCm``'s commands (what ``pyroce.verbs.cmid`` calls)
and sends each to the NIC (``nicd.cm_commands``); its channels and ids are handles on the
program's connection, its records cross as mappings and are made again here, and its refusals
are ``CmError`` with the NIC's errno, as from a CM in the process. A channel's fd is the NIC's
eventfd, sent across: readable while events wait, so select, epoll and asyncio work; taking an
event is a command that never waits.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any

from pyroce.cm.errors import CmError
from pyroce.cm.records import AhValues, CmEvent, CmRoute, ConnParam, PathValues, UdParam
from pyroce.ib.cm import CmEventType
from pyroce.nicd.client import NicError

if TYPE_CHECKING:
    from pyroce.nicd.remote_device import RemoteDevice


class RemoteCmChannel:
    """An event channel of the NIC: its handle, and its eventfd here."""

    def __init__(self, handle: Any, fd: int) -> None:
        self.handle = handle
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RemoteCmId:
    """An id of the NIC, named by its handle (one object per handle, so drivers may key on it)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle


class RemoteMcGroup:
    """A multicast join of the NIC, named by its handle (one object per handle: events name it)."""

    def __init__(self, handle: Any, cm_id: RemoteCmId) -> None:
        self.handle = handle
        self.cm_id = cm_id


def _conn(mapping: dict[str, Any] | None) -> ConnParam | None:
    return None if mapping is None else ConnParam(**{**mapping, "private_data": bytes(mapping["private_data"])})


def _ud(mapping: dict[str, Any] | None) -> UdParam | None:
    if mapping is None:
        return None
    ah = AhValues(**{**mapping["ah"], "dgid": bytes(mapping["ah"]["dgid"])})
    return UdParam(bytes(mapping["private_data"]), ah, mapping["qp_num"], mapping["qkey"])


def _mapping(param: ConnParam | None) -> dict[str, Any] | None:
    if param is None:
        return None
    return {name: getattr(param, name) for name in ConnParam.__dataclass_fields__}


class RemoteCm:
    """``device.cm`` of a ``RemoteDevice``."""

    def __init__(self, device: RemoteDevice) -> None:
        self._device = device
        self._ids: dict[int, RemoteCmId] = {}
        self._groups: dict[int, RemoteMcGroup] = {}

    def _call(self, command: str, *args: Any) -> Any:
        try:
            return self._device.call_raw("cm_" + command, *args)
        except NicError as exc:
            raise CmError(exc.errno or 0, exc.strerror or str(exc)) from None

    def _id(self, handle: Any) -> RemoteCmId:
        cm_id = self._ids.get(int(handle))
        if cm_id is None:
            cm_id = self._ids[int(handle)] = RemoteCmId(handle)
        return cm_id

    # --- channels and ids ---------------------------------------------------------------

    def open_channel(self) -> RemoteCmChannel:
        handle, fd = self._call("open_channel")
        return RemoteCmChannel(handle, fd)

    def close_channel(self, channel: RemoteCmChannel) -> None:
        try:
            self._call("close_channel", channel.handle)
        finally:
            channel.close()

    def create_id(self, channel: RemoteCmChannel, context: int, port_space: int, qp_type: int) -> RemoteCmId:
        return self._id(self._call("create_id", channel.handle, context, int(port_space), qp_type))

    def destroy_id(self, cm_id: RemoteCmId) -> int:
        reported = self._call("destroy_id", cm_id.handle)
        self._ids.pop(int(cm_id.handle), None)
        self._groups = {number: group for number, group in self._groups.items() if group.cm_id is not cm_id}
        return reported

    def migrate_id(self, cm_id: RemoteCmId, channel: RemoteCmChannel) -> int:
        return self._call("migrate_id", cm_id.handle, channel.handle)

    def get_event(self, channel: RemoteCmChannel) -> CmEvent | None:
        answer = self._call("get_event", channel.handle)
        if answer is None:
            return None
        event, context, handle, status, conn, ud, group = answer
        joined = None if group is None else self._groups.get(int(group))
        return CmEvent(CmEventType(event), context, self._id(handle), status, _conn(conn), _ud(ud), joined)  # type: ignore[arg-type]

    # --- addresses and connections ----------------------------------------------------------

    def bind(self, cm_id: RemoteCmId, address: tuple[str, int]) -> None:
        self._call("bind", cm_id.handle, address[0], address[1])

    def resolve_addr(self, cm_id: RemoteCmId, source: tuple[str, int] | None, dest: tuple[str, int],
                     timeout_ms: int) -> None:  # fmt: skip
        self._call("resolve_addr", cm_id.handle, source, dest, timeout_ms)

    def resolve_route(self, cm_id: RemoteCmId, timeout_ms: int) -> None:
        self._call("resolve_route", cm_id.handle, timeout_ms)

    def listen(self, cm_id: RemoteCmId, backlog: int) -> None:
        self._call("listen", cm_id.handle, backlog)

    def join_multicast(self, cm_id: RemoteCmId, address: str, join_flags: int, context: int) -> RemoteMcGroup:
        handle = self._call("join_multicast", cm_id.handle, address, int(join_flags), context)
        group = self._groups[int(handle)] = RemoteMcGroup(handle, cm_id)
        return group

    def leave_multicast(self, group: RemoteMcGroup) -> int:
        """ENOENT for a join left or of an id destroyed, as the NIC's CM (its handle is gone)."""
        if self._groups.get(int(group.handle)) is not group:
            raise CmError(errno.ENOENT, "the multicast group was left already")
        reported = self._call("leave_multicast", group.handle)
        self._groups.pop(int(group.handle), None)
        return reported

    def connect(self, cm_id: RemoteCmId, param: ConnParam) -> None:
        self._call("connect", cm_id.handle, _mapping(param))

    def accept(self, cm_id: RemoteCmId, param: ConnParam | None, context: int | None = None) -> None:
        self._call("accept", cm_id.handle, _mapping(param), context)

    def reject(self, cm_id: RemoteCmId, private_data: bytes = b"", reason: int | None = None) -> None:
        self._call("reject", cm_id.handle, bytes(private_data), reason)

    def disconnect(self, cm_id: RemoteCmId, private_data: bytes = b"") -> None:
        self._call("disconnect", cm_id.handle, bytes(private_data))

    def establish(self, cm_id: RemoteCmId) -> None:
        self._call("establish", cm_id.handle)

    def init_qp_attr(self, cm_id: RemoteCmId, qp_state: int) -> tuple[dict[str, object], int]:
        attrs, mask = self._call("init_qp_attr", cm_id.handle, int(qp_state))
        if "ah_attr" in attrs:
            ah = attrs["ah_attr"]
            attrs = {**attrs, "ah_attr": AhValues(**{**ah, "dgid": bytes(ah["dgid"])})}
        return attrs, mask

    def query(self, cm_id: RemoteCmId) -> CmRoute:
        route = self._call("query", cm_id.handle)
        paths = [PathValues(**{**p, "dgid": bytes(p["dgid"]), "sgid": bytes(p["sgid"])}) for p in route["paths"]]
        return CmRoute(**{**route, "paths": paths, "sgid": bytes(route["sgid"]), "dgid": bytes(route["dgid"])})

    def set_option(self, cm_id: RemoteCmId, level: int, name: int, value: bytes) -> None:
        self._call("set_option", cm_id.handle, level, name, bytes(value))
