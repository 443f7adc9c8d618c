"""IB CM messages (IBA 12.6) as Linux's ib_cm lays them out, and rdma_cm's private-data header.

Each message is a frozen dataclass whose fields are named after the IBA/Linux fields
(``include/rdma/ibta_vol1_c12.h``); one table per message says where each field lies: its bit
ranges, counted from the first bit of the 232 bytes after the MAD header, most significant bit
first (a field Linux splits, like REP's vendor ID, has several ranges, high part first). One
codec reads and writes every table. Reserved bits are sent as zero and ignored on receive.

- One-bit fields are bools.
- ``private_data`` is zero-padded to ``PRIVATE_DATA_LEN`` on the wire; parsing returns all of it
  (the wire carries no length), so a message that went through parse has the padded value.
- REJ's ``ari`` and SIDR_REP's ``additional_info`` are counted: their length field follows the
  bytes given and is not a field of its own.
- LAP and APR (alternate path migration) are left out: pyroce's RoCE paths have no alternate,
  and their attributes raise ``UnknownAttribute`` like any other.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

from pyroce.ib.cm import PortSpace
from pyroce.wire.errors import BadCmField, BadMadVersion, BuildError, UnknownAttribute, WrongMgmtClass
from pyroce.wire.mad import MAD_BASE_VERSION, MAD_HEADER_LEN, MAD_LEN, MadHeader, MadMethod, MgmtClass

CM_CLASS_VERSION = 2
CM_BODY_LEN = MAD_LEN - MAD_HEADER_LEN  # 232
_BODY_BITS = CM_BODY_LEN * 8
_GID_LEN = 16


class CmAttr(enum.IntEnum):
    """CM attribute IDs (IBA table 104): which message a CM MAD holds."""

    CLASS_PORT_INFO = 0x0001
    REQ = 0x0010
    MRA = 0x0011
    REJ = 0x0012
    REP = 0x0013
    RTU = 0x0014
    DREQ = 0x0015
    DREP = 0x0016
    SIDR_REQ = 0x0017
    SIDR_REP = 0x0018
    LAP = 0x0019
    APR = 0x001A


class CmMsgResponse(enum.IntEnum):
    """Which message an MRA delays or a REJ rejects (Linux ``enum cm_msg_response``)."""

    REQ = 0
    REP = 1
    OTHER = 2


PRIVATE_DATA_LEN = {
    CmAttr.REQ: 92,
    CmAttr.MRA: 222,
    CmAttr.REJ: 148,
    CmAttr.REP: 196,
    CmAttr.RTU: 224,
    CmAttr.DREQ: 220,
    CmAttr.DREP: 224,
    CmAttr.SIDR_REQ: 216,
    CmAttr.SIDR_REP: 136,
}

_ZERO_GID = bytes(_GID_LEN)

# Defaults are what Linux's rdma_cm sends over RoCE where it always sends the same value: the
# default P_Key, the permissive LID, 7 retries, 15 CM retries, CM response timeout 20 (4 s).
_PKEY = 0xFFFF
_PERMISSIVE_LID = 0xFFFF
_CM_RESPONSE_TIMEOUT = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class CmReq:
    """REQ (IBA 12.6.5): the active side asks for a connection to ``service_id``."""

    local_comm_id: int
    vendor_id: int = 0
    service_id: int
    local_ca_guid: int = 0
    local_qkey: int = 0
    local_qpn: int
    responder_resources: int = 0
    local_eecn: int = 0
    initiator_depth: int = 0
    remote_eecn: int = 0
    remote_cm_response_timeout: int = _CM_RESPONSE_TIMEOUT
    transport_service_type: int = 0  # 0 RC, 1 UC, 3 XRC with extended_transport_type
    end_to_end_flow_control: bool = False
    starting_psn: int
    local_cm_response_timeout: int = _CM_RESPONSE_TIMEOUT
    retry_count: int = 7
    partition_key: int = _PKEY
    path_mtu: int = 3  # IBV_MTU_1024, what a 1500-byte Ethernet carries
    rdc_exists: bool = False
    rnr_retry_count: int = 7
    max_cm_retries: int = 15
    srq: bool = False
    extended_transport_type: int = 0
    primary_local_lid: int = _PERMISSIVE_LID
    primary_remote_lid: int = _PERMISSIVE_LID
    primary_local_gid: bytes = _ZERO_GID
    primary_remote_gid: bytes = _ZERO_GID
    primary_flow_label: int = 0
    primary_packet_rate: int = 0
    primary_traffic_class: int = 0
    primary_hop_limit: int = 64
    primary_sl: int = 0
    primary_subnet_local: bool = False
    primary_local_ack_timeout: int = 0
    alternate_local_lid: int = 0
    alternate_remote_lid: int = 0
    alternate_local_gid: bytes = _ZERO_GID
    alternate_remote_gid: bytes = _ZERO_GID
    alternate_flow_label: int = 0
    alternate_packet_rate: int = 0
    alternate_traffic_class: int = 0
    alternate_hop_limit: int = 0
    alternate_sl: int = 0
    alternate_subnet_local: bool = False
    alternate_local_ack_timeout: int = 0
    sap_supported: bool = False
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmMra:
    """MRA (IBA 12.6.6): "message received, answer coming": the sender needs more time."""

    local_comm_id: int
    remote_comm_id: int
    message_mraed: int = CmMsgResponse.REQ
    service_timeout: int = 0
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmRej:
    """REJ (IBA 12.6.7): a REQ or REP refused; ``reason`` is the IBA rejection reason code."""

    local_comm_id: int
    remote_comm_id: int
    message_rejected: int = CmMsgResponse.REQ
    reason: int
    ari: bytes = b""  # additional rejection information, up to 72 bytes
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmRep:
    """REP (IBA 12.6.8): the passive side accepts a REQ and gives its QP."""

    local_comm_id: int
    remote_comm_id: int
    local_qkey: int = 0
    local_qpn: int
    vendor_id: int = 0
    local_eecn: int = 0
    starting_psn: int
    responder_resources: int = 0
    initiator_depth: int = 0
    target_ack_delay: int = 0
    failover_accepted: int = 0
    end_to_end_flow_control: bool = False
    rnr_retry_count: int = 7
    srq: bool = False
    local_ca_guid: int = 0
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmRtu:
    """RTU (IBA 12.6.9): "ready to use": the active side's QP is in RTS."""

    local_comm_id: int
    remote_comm_id: int
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmDreq:
    """DREQ (IBA 12.6.10): a side asks to disconnect; names the QP it expects the peer to own."""

    local_comm_id: int
    remote_comm_id: int
    remote_qpn: int = 0  # "remote QPN/EECN": the receiver's QP
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmDrep:
    """DREP (IBA 12.6.11): the answer to a DREQ."""

    local_comm_id: int
    remote_comm_id: int
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmSidrReq:
    """SIDR_REQ (IBA 12.11.1): which UD QP serves ``service_id``?"""

    request_id: int
    partition_key: int = _PKEY
    service_id: int
    private_data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CmSidrRep:
    """SIDR_REP (IBA 12.11.2): the UD QP and Q_Key of a service, or why not (``status``)."""

    request_id: int
    status: int = 0  # 0: QP valid
    vendor_id: int = 0
    qpn: int = 0
    service_id: int = 0
    qkey: int = 0
    additional_info: bytes = b""  # up to 72 bytes
    private_data: bytes = b""


CmMessage = CmReq | CmMra | CmRej | CmRep | CmRtu | CmDreq | CmDrep | CmSidrReq | CmSidrRep


class _Bits(NamedTuple):
    """An integer (or bool) field: its ranges of (byte offset, bit from the byte's MSB, width)."""

    name: str
    ranges: tuple[tuple[int, int, int], ...]

    @property
    def width(self) -> int:
        return sum(width for _, _, width in self.ranges)


class _Blob(NamedTuple):
    """A bytes field: a GID (``exact``: always ``size`` bytes), private data (padded to ``size``)
    or a counted blob whose length goes in the bits at ``length_at`` (byte, bit, width)."""

    name: str
    offset: int
    size: int
    length_at: tuple[int, int, int] | None = None
    exact: bool = False


def _bits(name: str, byte: int, width: int, bit: int = 0) -> _Bits:
    return _Bits(name, ((byte, bit, width),))


def _req_path(prefix: str, at: int) -> tuple[_Bits | _Blob, ...]:
    """REQ's primary (at 52) and alternate (at 96) path: the same 44-byte layout."""
    return (
        _bits(f"{prefix}_local_lid", at, 16),
        _bits(f"{prefix}_remote_lid", at + 2, 16),
        _Blob(f"{prefix}_local_gid", at + 4, _GID_LEN, exact=True),
        _Blob(f"{prefix}_remote_gid", at + 20, _GID_LEN, exact=True),
        _bits(f"{prefix}_flow_label", at + 36, 20),
        _bits(f"{prefix}_packet_rate", at + 39, 6, bit=2),
        _bits(f"{prefix}_traffic_class", at + 40, 8),
        _bits(f"{prefix}_hop_limit", at + 41, 8),
        _bits(f"{prefix}_sl", at + 42, 4),
        _bits(f"{prefix}_subnet_local", at + 42, 1, bit=4),
        _bits(f"{prefix}_local_ack_timeout", at + 43, 5),
    )


def _comm_ids() -> tuple[_Bits, _Bits]:
    return _bits("local_comm_id", 0, 32), _bits("remote_comm_id", 4, 32)


def _private(attr: CmAttr, offset: int) -> _Blob:
    return _Blob("private_data", offset, PRIVATE_DATA_LEN[attr])


_LAYOUTS: dict[CmAttr, tuple[type, tuple[_Bits | _Blob, ...]]] = {
    CmAttr.REQ: (CmReq, (
        _bits("local_comm_id", 0, 32),
        _bits("vendor_id", 5, 24),
        _bits("service_id", 8, 64),
        _bits("local_ca_guid", 16, 64),
        _bits("local_qkey", 28, 32),
        _bits("local_qpn", 32, 24),
        _bits("responder_resources", 35, 8),
        _bits("local_eecn", 36, 24),
        _bits("initiator_depth", 39, 8),
        _bits("remote_eecn", 40, 24),
        _bits("remote_cm_response_timeout", 43, 5),
        _bits("transport_service_type", 43, 2, bit=5),
        _bits("end_to_end_flow_control", 43, 1, bit=7),
        _bits("starting_psn", 44, 24),
        _bits("local_cm_response_timeout", 47, 5),
        _bits("retry_count", 47, 3, bit=5),
        _bits("partition_key", 48, 16),
        _bits("path_mtu", 50, 4),
        _bits("rdc_exists", 50, 1, bit=4),
        _bits("rnr_retry_count", 50, 3, bit=5),
        _bits("max_cm_retries", 51, 4),
        _bits("srq", 51, 1, bit=4),
        _bits("extended_transport_type", 51, 3, bit=5),
        *_req_path("primary", 52),
        *_req_path("alternate", 96),
        _bits("sap_supported", 139, 1, bit=5),
        _private(CmAttr.REQ, 140),
    )),
    CmAttr.MRA: (CmMra, (
        *_comm_ids(),
        _bits("message_mraed", 8, 2),
        _bits("service_timeout", 9, 5),
        _private(CmAttr.MRA, 10),
    )),
    CmAttr.REJ: (CmRej, (
        *_comm_ids(),
        _bits("message_rejected", 8, 2),
        _bits("reason", 10, 16),
        _Blob("ari", 12, 72, length_at=(9, 0, 7)),
        _private(CmAttr.REJ, 84),
    )),
    CmAttr.REP: (CmRep, (
        *_comm_ids(),
        _bits("local_qkey", 8, 32),
        _bits("local_qpn", 12, 24),
        _Bits("vendor_id", ((15, 0, 8), (19, 0, 8), (23, 0, 8))),
        _bits("local_eecn", 16, 24),
        _bits("starting_psn", 20, 24),
        _bits("responder_resources", 24, 8),
        _bits("initiator_depth", 25, 8),
        _bits("target_ack_delay", 26, 5),
        _bits("failover_accepted", 26, 2, bit=5),
        _bits("end_to_end_flow_control", 26, 1, bit=7),
        _bits("rnr_retry_count", 27, 3),
        _bits("srq", 27, 1, bit=3),
        _bits("local_ca_guid", 28, 64),
        _private(CmAttr.REP, 36),
    )),
    CmAttr.RTU: (CmRtu, (*_comm_ids(), _private(CmAttr.RTU, 8))),
    CmAttr.DREQ: (CmDreq, (*_comm_ids(), _bits("remote_qpn", 8, 24), _private(CmAttr.DREQ, 12))),
    CmAttr.DREP: (CmDrep, (*_comm_ids(), _private(CmAttr.DREP, 8))),
    CmAttr.SIDR_REQ: (CmSidrReq, (
        _bits("request_id", 0, 32),
        _bits("partition_key", 4, 16),
        _bits("service_id", 8, 64),
        _private(CmAttr.SIDR_REQ, 16),
    )),
    CmAttr.SIDR_REP: (CmSidrRep, (
        _bits("request_id", 0, 32),
        _bits("status", 4, 8),
        _Bits("vendor_id", ((6, 0, 16), (11, 0, 8))),
        _bits("qpn", 8, 24),
        _bits("service_id", 12, 64),
        _bits("qkey", 20, 32),
        _Blob("additional_info", 24, 72, length_at=(5, 0, 8)),
        _private(CmAttr.SIDR_REP, 96),
    )),
}  # fmt: skip
_ATTRS = {cls: attr for attr, (cls, _) in _LAYOUTS.items()}


def _check_layouts() -> None:
    """Every table names exactly its class's fields and ends with private data at the MAD's end."""
    for cls, fields in _LAYOUTS.values():
        assert [f.name for f in fields] == [f.name for f in dataclasses.fields(cls)], cls
        last = fields[-1]
        assert isinstance(last, _Blob) and last.offset + last.size == CM_BODY_LEN, cls


_check_layouts()


def _shift(byte: int, bit: int, width: int) -> int:
    """How far right the big-endian body integer must move to bring this range to bit 0."""
    return _BODY_BITS - (byte * 8 + bit + width)


def _encode_body(message: CmMessage, fields: tuple[_Bits | _Blob, ...]) -> bytes:
    word = 0
    blobs: list[tuple[int, bytes]] = []
    for field in fields:
        value = getattr(message, field.name)
        if isinstance(field, _Bits):
            total = field.width
            if not 0 <= value < 1 << total:
                raise BuildError(f"{type(message).__name__}.{field.name} = {value} does not fit {total} bits")
            for byte, bit, width in field.ranges:
                total -= width
                word |= ((value >> total) & ((1 << width) - 1)) << _shift(byte, bit, width)
            continue
        if not isinstance(value, bytes | bytearray | memoryview):
            raise BuildError(f"{type(message).__name__}.{field.name} must be bytes, not {type(value).__name__}")
        data = bytes(value)
        if len(data) > field.size or (field.exact and len(data) != field.size):
            limit = "exactly" if field.exact else "at most"
            raise BuildError(f"{type(message).__name__}.{field.name} is {len(data)} bytes, {limit} {field.size} fit")
        if field.length_at is not None:
            word |= len(data) << _shift(*field.length_at)
        blobs.append((field.offset, data))
    body = bytearray(word.to_bytes(CM_BODY_LEN, "big"))
    for offset, data in blobs:
        body[offset : offset + len(data)] = data
    return bytes(body)


def _parse_body(attr: CmAttr, body: bytes) -> CmMessage:
    cls, fields = _LAYOUTS[attr]
    word = int.from_bytes(body, "big")
    values: dict[str, object] = {}
    for field in fields:
        if isinstance(field, _Bits):
            value = 0
            for byte, bit, width in field.ranges:
                value = (value << width) | ((word >> _shift(byte, bit, width)) & ((1 << width) - 1))
            values[field.name] = bool(value) if field.width == 1 else value
            continue
        size = field.size
        if field.length_at is not None:
            size = (word >> _shift(*field.length_at)) & ((1 << field.length_at[2]) - 1)
            if size > field.size:
                raise BadCmField(f"{attr.name} {field.name} length {size} exceeds its {field.size} bytes")
        values[field.name] = body[field.offset : field.offset + size]
    return cls(**values)


def encode_cm(tid: int, message: CmMessage) -> bytes:
    """The whole 256-byte MAD (method SEND) carrying ``message`` with transaction ID ``tid``.

    Raises ``BuildError`` (a ``ValueError``) for a field that does not fit, private data
    longer than ``PRIVATE_DATA_LEN`` included."""
    attr = _ATTRS[type(message)]
    header = MadHeader(MAD_BASE_VERSION, MgmtClass.CM, CM_CLASS_VERSION, MadMethod.SEND, 0, 0, tid, attr, 0)
    return header.encode() + _encode_body(message, _LAYOUTS[attr][1])


def parse_cm(data: bytes | bytearray | memoryview) -> tuple[MadHeader, CmMessage]:
    """The header and message of the CM MAD ``data``.

    Raises a ``MalformedMad`` subclass, named for the problem: ``BadMadLength``,
    ``BadMadVersion`` (base or class version), ``WrongMgmtClass``, ``UnknownAttribute`` (LAP,
    APR and ClassPortInfo included) or ``BadCmField``. The method is the caller's to judge."""
    header = MadHeader.parse(data)
    if header.base_version != MAD_BASE_VERSION:
        raise BadMadVersion(f"MAD base version {header.base_version}, expected {MAD_BASE_VERSION}")
    if header.mgmt_class != MgmtClass.CM:
        raise WrongMgmtClass(f"MAD class 0x{header.mgmt_class:02x} is not CM (0x{MgmtClass.CM:02x})")
    if header.class_version != CM_CLASS_VERSION:
        raise BadMadVersion(f"CM class version {header.class_version}, expected {CM_CLASS_VERSION}")
    if header.attr_id not in _LAYOUTS:
        raise UnknownAttribute(f"CM attribute 0x{header.attr_id:04x} is not a message pyroce reads")
    return header, _parse_body(CmAttr(header.attr_id), bytes(data[MAD_HEADER_LEN:]))

_PORT_BITS = 16


def service_id(port_space: int, port: int) -> int:
    """The service ID rdma_cm listens on for ``port`` of ``port_space``: 0x0000000001_PS_PORT,
    as Linux's ``cma_get_service_id`` makes it (rping's port 7174 over TCP: 0x1061c06)."""
    space = PortSpace(port_space)
    if not 0 <= port < 1 << _PORT_BITS:
        raise ValueError(f"port {port} does not fit 16 bits")
    return (space << _PORT_BITS) | port


def port_space_and_port(sid: int) -> tuple[PortSpace, int]:
    """The port space and port of an rdma_cm service ID; ``ValueError`` for any other service ID."""
    try:
        return PortSpace(sid >> _PORT_BITS), sid & ((1 << _PORT_BITS) - 1)
    except ValueError:
        raise ValueError(f"service ID 0x{sid:x} is not an rdma_cm IP service ID") from None


CMA_HEADER_LEN = 36
CMA_VERSION = 0
_CMA_HEADER = struct.Struct(">BBH16s16s")
assert _CMA_HEADER.size == CMA_HEADER_LEN
_ADDRESS_LEN = {4: 4, 6: 16}  # union cma_ip_addr: an IPv4 address is the last 4 of 16 bytes


@dataclass(frozen=True, slots=True)
class CmaHeader:
    """rdma_cm's header (``struct cma_hdr``), first in the private data of a REQ or SIDR_REQ
    for an IP port space: the active side's port and both IP addresses (4 or 16 bytes)."""

    ip_version: int  # 4 or 6
    port: int  # the active side's source port
    src: bytes
    dst: bytes

    def encode(self) -> bytes:
        """The 36 bytes; raises ``BuildError`` for an address that does not fit its version."""
        size = _ADDRESS_LEN.get(self.ip_version)
        if size is None or len(self.src) != size or len(self.dst) != size:
            raise BuildError(f"cma_hdr IPv{self.ip_version} wants {size}-byte addresses, got {len(self.src)} and "
                             f"{len(self.dst)}")  # fmt: skip
        pad = bytes(16 - size)
        try:
            return _CMA_HEADER.pack(CMA_VERSION, self.ip_version << 4, self.port, pad + self.src, pad + self.dst)
        except struct.error as exc:
            raise BuildError(f"cma_hdr port out of range: {exc}") from None

    @classmethod
    def parse(cls, private_data: bytes | bytearray | memoryview) -> CmaHeader:
        """The header at the start of ``private_data``; raises ``BadCmField`` when it is short,
        of another version, or of an IP version other than 4 or 6."""
        if len(private_data) < CMA_HEADER_LEN:
            raise BadCmField(f"private data of {len(private_data)} bytes holds no {CMA_HEADER_LEN}-byte cma_hdr")
        version, ip_byte, port, src, dst = _CMA_HEADER.unpack_from(private_data)
        if version != CMA_VERSION:
            raise BadCmField(f"cma_hdr version {version}, expected {CMA_VERSION}")
        ip_version = ip_byte >> 4
        size = _ADDRESS_LEN.get(ip_version)
        if size is None:
            raise BadCmField(f"cma_hdr IP version {ip_version} is neither 4 nor 6")
        return cls(ip_version, port, src[16 - size :], dst[16 - size :])
