"""How ``pyroce decode`` shows a CM MAD: a UD packet to QP1 whose payload parses with
``wire.parse_cm`` (rdma_cm's connection setup and teardown), or why its payload does not."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyroce.wire import (
    QP1,
    BadCmField,
    CmaHeader,
    CmAttr,
    CmDrep,
    CmDreq,
    CmMessage,
    CmMra,
    CmMsgResponse,
    CmRej,
    CmRep,
    CmReq,
    CmRtu,
    CmSidrRep,
    CmSidrReq,
    MadHeader,
    MalformedMad,
    Packet,
    PortSpace,
    parse_cm,
    port_space_and_port,
)
from pyroce.wire.framing import format_address

_COMM = (("comm", "local_comm_id"), ("remote", "remote_comm_id"))
_KEY_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {
    CmReq: (("comm", "local_comm_id"), ("sid", "service_id"), ("qpn", "local_qpn"), ("psn", "starting_psn")),
    CmRep: (*_COMM, ("qpn", "local_qpn"), ("psn", "starting_psn")),
    CmRtu: _COMM,
    CmDreq: (*_COMM, ("qpn", "remote_qpn")),
    CmDrep: _COMM,
    CmRej: _COMM,
    CmMra: (*_COMM, ("timeout", "service_timeout")),
    CmSidrReq: (("req", "request_id"), ("sid", "service_id")),
    CmSidrRep: (("req", "request_id"), ("status", "status"), ("qpn", "qpn"), ("qkey", "qkey")),
}
"""The fields each message shows in a line, as ``label=0x...``; the rest are in ``--json``."""

CmResult = tuple[MadHeader, CmMessage] | MalformedMad


def cm_of(pkt: Packet) -> CmResult | None:
    """The CM MAD a UD packet to QP1 carries, the error that says why its payload is none,
    or None for any other packet."""
    if pkt.bth.dqpn != QP1 or pkt.deth is None:
        return None
    try:
        return parse_cm(pkt.payload)
    except MalformedMad as exc:
        return exc


def _cma(message: CmMessage) -> CmaHeader | None:
    """rdma_cm's header in a REQ or SIDR_REQ for an IP port space, when its private data holds one."""
    if not isinstance(message, CmReq | CmSidrReq):
        return None
    try:
        if port_space_and_port(message.service_id)[0] is PortSpace.IB:
            return None
        return CmaHeader.parse(message.private_data)
    except (ValueError, BadCmField):
        return None


def describe_cm(result: CmResult) -> str:
    """``cm REQ tid=0x2a0083376 comm=0x763308a0 sid=0x1061c06 ...``, or ``cm? Error: reason``."""
    if isinstance(result, MalformedMad):
        return f"cm? {type(result).__name__}: {result}"
    header, message = result
    parts = ["cm", CmAttr(header.attr_id).name, f"tid=0x{header.tid:x}"]
    parts.extend(f"{label}=0x{getattr(message, name):x}" for label, name in _KEY_FIELDS[type(message)])
    if isinstance(message, CmRej):
        parts.append(f"reason={message.reason} rejected={_response(message.message_rejected)}")
    if isinstance(message, CmMra):
        parts.append(f"mraed={_response(message.message_mraed)}")
    cma = _cma(message)
    if cma is not None:
        parts.append(f"cma({format_address(cma.src)}:{cma.port} > {format_address(cma.dst)})")
    return " ".join(parts)


def _response(value: int) -> str:
    try:
        return CmMsgResponse(value).name
    except ValueError:
        return str(value)


def cm_document(result: CmResult) -> dict[str, Any]:
    """The ``cm`` entry of a packet's JSON headers: every field (bytes as hex), or the error."""
    if isinstance(result, MalformedMad):
        return {"error": type(result).__name__, "reason": str(result)}
    header, message = result
    fields = {f.name: _json_value(getattr(message, f.name)) for f in dataclasses.fields(message)}
    document = {"message": CmAttr(header.attr_id).name, "tid": header.tid, "method": header.method, **fields}
    cma = _cma(message)
    if cma is not None:
        document["cma"] = {"ip_version": cma.ip_version, "port": cma.port, "src": format_address(cma.src),
                           "dst": format_address(cma.dst)}  # fmt: skip
    return document


def _json_value(value: object) -> object:
    return value.hex() if isinstance(value, bytes) else value
