"""A toy key-value store over one-sided RDMA: GET is an RDMA READ and PUT an RDMA WRITE of a
slot in the server's memory, so the server's CPU takes no part (the idea of Pilaf and FaRM,
without their concurrency control: one writer per key).

The table is an array of fixed-size slots in a memory region the server registered for remote
read and write; a key's slot is its CRC-32 modulo the slot count. A slot holds the key, the
value's length and the value. A client needs only the server's QP numbers, R_Key and the
table's address, exchanged once, as any verbs program exchanges them.
"""

from __future__ import annotations

import struct
import zlib

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR

KEY_SIZE = 32
VALUE_SIZE = 220
SLOT = struct.Struct(f"<{KEY_SIZE}sI{VALUE_SIZE}s")  # key (NUL padded), value length, value
SLOT_SIZE = SLOT.size  # 256 bytes
SLOTS = 1024


class KvError(Exception):
    """A GET or PUT that could not be done: the message says why (a WC's reason included)."""


class KvClient:
    """GET and PUT against a table at ``table`` (the server's ``PeerInfo``: R_Key and address)."""

    def __init__(self, endpoint: RcEndpoint, table: PeerInfo, staging_offset: int = 0) -> None:
        self.ep = endpoint
        self.table = table
        self.staging = staging_offset  # where in our own MR slots are built and read into
        self._wr_id = 0

    def put(self, key: str, value: bytes) -> None:
        raw_key = _key(key)
        if len(value) > VALUE_SIZE:
            raise KvError(f"value of {len(value)} bytes is longer than {VALUE_SIZE}")
        slot = self._read_slot(raw_key)
        if slot[0] not in (raw_key, bytes(KEY_SIZE)):
            raise KvError(f"slot of {key!r} holds another key ({slot[0].rstrip(bytes(1)).decode(errors='replace')!r})")
        self.ep.mr.write(SLOT.pack(raw_key, len(value), value), SLOT_SIZE, self.staging)
        self._one_sided(ibv_wr_opcode.IBV_WR_RDMA_WRITE, raw_key)

    def get(self, key: str) -> bytes | None:
        """The value, or None if the key is not in the table."""
        raw_key = _key(key)
        stored, length, value = self._read_slot(raw_key)
        return value[:length] if stored == raw_key else None

    def delete(self, key: str) -> None:
        raw_key = _key(key)
        if self._read_slot(raw_key)[0] == raw_key:
            self.ep.mr.write(bytes(SLOT_SIZE), SLOT_SIZE, self.staging)
            self._one_sided(ibv_wr_opcode.IBV_WR_RDMA_WRITE, raw_key)

    def _read_slot(self, raw_key: bytes) -> tuple[bytes, int, bytes]:
        self._one_sided(ibv_wr_opcode.IBV_WR_RDMA_READ, raw_key)
        return SLOT.unpack(self.ep.mr.read(SLOT_SIZE, self.staging))  # type: ignore[return-value]

    def _one_sided(self, opcode: int, raw_key: bytes) -> None:
        """READ the key's slot into the staging area, or WRITE the staging area to it."""
        self._wr_id += 1
        wr = SendWR(
            wr_id=self._wr_id, opcode=opcode, sg=[SGE(self.ep.mr.buf + self.staging, SLOT_SIZE, self.ep.mr.lkey)]
        )
        wr.set_wr_rdma(self.table.rkey, self.table.addr + slot_of(raw_key) * SLOT_SIZE)
        self.ep.qp.post_send(wr)
        (wc,) = self.ep.poll(1)
        if wc.status != ibv_wc_status.IBV_WC_SUCCESS:
            raise KvError(f"{'GET' if opcode == ibv_wr_opcode.IBV_WR_RDMA_READ else 'PUT'} failed: {wc.reason}")


def slot_of(raw_key: bytes) -> int:
    return zlib.crc32(raw_key) % SLOTS


def _key(key: str) -> bytes:
    raw = key.encode()
    if not 0 < len(raw) <= KEY_SIZE:
        raise KvError(f"key {key!r} must be 1 to {KEY_SIZE} bytes")
    return raw.ljust(KEY_SIZE, b"\0")
