"""A capture streamed into a pcap file: each frame written and flushed as it is recorded, so
the file is a valid pcap (whole records) while it grows and a reader can follow it."""

from __future__ import annotations

from pyroce.wire.framing import LINKTYPE_RAW
from pyroce.wire.pcap import PcapWriter


class PcapSink:
    """A ``FrameSink`` (``nic.capture``) writing to the pcap file at ``path`` (created or
    truncated; ``OSError`` if it cannot be), full after ``limit`` frames (None: no limit).

    It runs inside engine passes, so a failed write does not raise: it ends the stream and
    keeps the error in ``failure`` for whoever stops it."""

    def __init__(self, path: str, limit: int | None = None) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - open until close(), across engine passes
        self._writer = PcapWriter(self._file, LINKTYPE_RAW)
        self._file.flush()
        self.limit = limit
        self.written = 0
        self.failure = ""

    @property
    def full(self) -> bool:
        """Whether it takes no more frames: its limit reached or a write failed."""
        return bool(self.failure) or (self.limit is not None and self.written >= self.limit)

    def __call__(self, item: tuple[float, bytes]) -> None:
        if self.full:
            return
        timestamp, frame = item
        try:
            self._writer.write(frame, timestamp)
            self._file.flush()
        except OSError as exc:
            self.failure = f"{self._file.name}: {exc.strerror or exc}"
            return
        self.written += 1

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            self.failure = self.failure or f"{self._file.name}: {exc.strerror or exc}"
