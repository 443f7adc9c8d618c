"""The connection manager's commands in the NIC's command layer, for a Python driver on the
shared NIC (``nicd.remote_cm`` is its side): ``device.cm``'s commands with handles for its
channels and ids, and its records as mappings.

An id a connection made, or one a CONNECT_REQUEST on its channel brought, is that connection's
alone: the handle is its name on the wire, and a command naming another's is refused (EBADF).
What the connection leaves (its channels, and with them their ids: a connected one sends its
DREQ) goes when it closes, first, as the kernel closes a dead process's rdma_cm file before its
verbs objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyroce.cm.errors import CmError
from pyroce.cm.ids import CmChannel, CmId
from pyroce.cm.multicast import McGroup
from pyroce.cm.records import AhValues, CmEvent, ConnParam
from pyroce.nicd.protocol import Handle, PassFd
from pyroce.nicd.refused import CommandRefused


def _mapping(record: Any) -> dict[str, Any] | None:
    """A CM record (``ConnParam``, ``UdParam``, ``AhValues``...) as the protocol carries it."""
    return None if record is None else dataclasses.asdict(record)


class ConnectionManagerCommands:
    """The ``cm_*`` commands of ``nicd.commands.DeviceCommands`` (which gives ``_handle``,
    ``_object``, ``_forget`` and ``_device``)."""

    objects: dict[int, object]
    _handle: Any
    _object: Any
    _forget: Any
    _device: Any

    def _cm_handle(self, cm_id: CmId) -> Handle:
        """The handle of ``cm_id`` on this connection, numbered when first seen (a new id comes
        with its CONNECT_REQUEST)."""
        for number, obj in self.objects.items():
            if obj is cm_id:
                return Handle(number)
        return self._handle(cm_id)

    def _cm_run(self, command: str, *args: Any) -> Any:
        try:
            return getattr(self._device().cm, command)(*args)
        except CmError as exc:
            raise CommandRefused(exc.errno or 0, exc.strerror or str(exc)) from None

    def cm_open_channel(self) -> tuple[Handle, PassFd]:
        channel = self._cm_run("open_channel")
        return self._handle(channel), PassFd(channel.fileno())

    def _forget_left_groups(self) -> None:
        """The handles of multicast groups left (their ids destroyed) go."""
        for number, obj in list(self.objects.items()):
            if isinstance(obj, McGroup) and obj.destroyed:
                self._forget(number)

    def cm_close_channel(self, channel: Any) -> None:
        obj = self._object(channel, CmChannel)
        for cm_id in obj.ids:
            self._forget(self._cm_handle(cm_id))
        self._cm_run("close_channel", obj)
        self._forget(channel)
        self._forget_left_groups()

    def cm_create_id(self, channel: Any, context: int, port_space: int, qp_type: int) -> Handle:
        return self._handle(self._cm_run("create_id", self._object(channel, CmChannel), context, port_space, qp_type))

    def cm_destroy_id(self, cm_id: Any) -> int:
        reported = self._cm_run("destroy_id", self._object(cm_id, CmId))
        self._forget(cm_id)
        self._forget_left_groups()
        return reported

    def cm_migrate_id(self, cm_id: Any, channel: Any) -> int:
        return self._cm_run("migrate_id", self._object(cm_id, CmId), self._object(channel, CmChannel))

    def cm_get_event(self, channel: Any) -> tuple[Any, ...] | None:
        """The channel's oldest event as (event, context, id handle, status, conn, ud, group
        handle or None), or None."""
        event: CmEvent | None = self._cm_run("get_event", self._object(channel, CmChannel))
        if event is None:
            return None
        group = None if event.group is None else self._cm_handle(event.group)
        return (int(event.event), event.context, self._cm_handle(event.cm_id), event.status, _mapping(event.conn),
                _mapping(event.ud), group)  # fmt: skip

    def cm_bind(self, cm_id: Any, host: str, port: int) -> None:
        self._cm_run("bind", self._object(cm_id, CmId), (host, port))

    def cm_resolve_addr(self, cm_id: Any, source: Any, dest: Any, timeout_ms: int) -> None:
        source = None if source is None else (str(source[0]), int(source[1]))
        self._cm_run("resolve_addr", self._object(cm_id, CmId), source, (str(dest[0]), int(dest[1])), timeout_ms)

    def cm_resolve_route(self, cm_id: Any, timeout_ms: int) -> None:
        self._cm_run("resolve_route", self._object(cm_id, CmId), timeout_ms)

    def cm_listen(self, cm_id: Any, backlog: int) -> None:
        self._cm_run("listen", self._object(cm_id, CmId), backlog)

    def cm_join_multicast(self, cm_id: Any, address: str, join_flags: int, context: int) -> Handle:
        group = self._cm_run("join_multicast", self._object(cm_id, CmId), str(address), int(join_flags), int(context))
        return self._handle(group)

    def cm_leave_multicast(self, group: Any) -> int:
        reported = self._cm_run("leave_multicast", self._object(group, McGroup))
        self._forget(group)
        return reported

    def cm_connect(self, cm_id: Any, param: dict[str, Any]) -> None:
        self._cm_run("connect", self._object(cm_id, CmId), ConnParam(**param))

    def cm_accept(self, cm_id: Any, param: dict[str, Any] | None, context: int | None) -> None:
        self._cm_run("accept", self._object(cm_id, CmId), None if param is None else ConnParam(**param), context)

    def cm_reject(self, cm_id: Any, private_data: bytes, reason: int | None) -> None:
        self._cm_run("reject", self._object(cm_id, CmId), bytes(private_data), reason)

    def cm_disconnect(self, cm_id: Any, private_data: bytes) -> None:
        self._cm_run("disconnect", self._object(cm_id, CmId), bytes(private_data))

    def cm_establish(self, cm_id: Any) -> None:
        self._cm_run("establish", self._object(cm_id, CmId))

    def cm_init_qp_attr(self, cm_id: Any, qp_state: int) -> tuple[dict[str, Any], int]:
        attrs, mask = self._cm_run("init_qp_attr", self._object(cm_id, CmId), qp_state)
        return {name: _mapping(v) if isinstance(v, AhValues) else int(v) for name, v in attrs.items()}, int(mask)

    def cm_query(self, cm_id: Any) -> dict[str, Any]:
        return _mapping(self._cm_run("query", self._object(cm_id, CmId)))  # type: ignore[return-value]

    def cm_set_option(self, cm_id: Any, level: int, name: int, value: bytes) -> None:
        self._cm_run("set_option", self._object(cm_id, CmId), level, name, bytes(value))

    def cm_close(self) -> int:
        """The connection's end: its channels closed (their ids destroyed); how many ids went."""
        channels = [(number, obj) for number, obj in self.objects.items() if isinstance(obj, CmChannel)]
        gone = 0
        for number, channel in channels:
            gone += len(channel.ids)
            self.cm_close_channel(number)
        return gone
