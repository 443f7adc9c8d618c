"""``CMEventChannel`` (pyverbs ``cmid.pyx``; ``rdma_create_event_channel``): where the events of
the ids created on it arrive. It is a channel of the NIC's connection manager (ucma's file): its
``fd`` is readable while events wait, for select, poll, epoll or asyncio's ``add_reader``, and,
made non-blocking, taking an event when none waits fails with EAGAIN instead of waiting.
"""

from __future__ import annotations

import errno
import os
import select
from typing import TYPE_CHECKING

from pyroce.cm.errors import CmError
from pyroce.verbs import cm_device
from pyroce.verbs.base import PyverbsObject
from pyroce.verbs.pyverbs_error import PyverbsRDMAError

if TYPE_CHECKING:
    from pyroce.cm.ids import CmId
    from pyroce.cm.records import CmEvent as NicCmEvent
    from pyroce.verbs.cma_id import CmaId


def cm_failed(action: str, exc: CmError) -> PyverbsRDMAError:
    """A command the NIC's connection manager refused, as pyverbs raises librdmacm's failure."""
    return PyverbsRDMAError(f"Failed to {action}: {exc.strerror or exc}", exc.errno or errno.EIO)


class CMEventChannel(PyverbsObject):
    """``CMEventChannel()``: an event channel on this process's pyroce0."""

    CLOSE_ORDER = 4  # after the ids on it

    def __init__(self) -> None:
        super().__init__()
        self.device = cm_device.acquire()
        try:
            self.channel = self.device.cm.open_channel()
        except CmError as exc:
            cm_device.release(self.device)
            raise cm_failed("create CMEventChannel", exc) from None
        self.ids: dict[CmId, CmaId] = {}  # the NIC's ids on this channel -> librdmacm's state of each

    @property
    def fd(self) -> int:
        """Readable while events wait (``channel->fd``)."""
        self._check_open()
        return self.channel.fileno()

    def fileno(self) -> int:
        return self.fd

    def next_event(self) -> NicCmEvent:
        """The oldest waiting event, waiting for one while the fd blocks (EAGAIN if it was made
        non-blocking and none waits): ``rdma_get_cm_event``'s read of ucma's file. With no id on
        the channel none can come: EINVAL rather than a wait for ever."""
        self._check_open()
        if not self.ids:
            raise PyverbsRDMAError("Failed to get CM event: no id is on this channel, none can come", errno.EINVAL)
        cm = self.device.cm
        while True:
            try:
                event = cm.get_event(self.channel)
            except CmError as exc:
                raise cm_failed("get CM event", exc) from None
            if event is not None:
                return event
            fd = self.channel.fileno()
            if not os.get_blocking(fd):
                raise PyverbsRDMAError("Failed to get CM event", errno.EAGAIN)
            select.select([fd], [], [])

    def _release(self) -> None:
        """``rdma_destroy_event_channel``: the NIC destroys the ids still on it, as closing
        ucma's file does."""
        for cma_id in list(self.ids.values()):
            cma_id.forget()
        try:
            self.device.cm.close_channel(self.channel)
        finally:
            cm_device.release(self.device)
