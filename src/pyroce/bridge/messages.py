"""The bridge's messages and their one codec: what the driver side and a NIC model say over a
byte stream (docs/architecture.md, "The simulator bridge", is the spec).

A message is ``u32 length | u8 type | body``, little-endian, ``length`` counting the type byte
and the body. Fixed fields are packed as below; the control path's structured values (HELLO's
details, a COMMAND's arguments, a REPLY's answer, an EVENT's item) are one value of the shared
NIC's self-describing value encoding (``pyroce.nicd.protocol``: a tag byte, then the body).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from pyroce.nicd.protocol import Decoder, Encoder, ProtocolError

VERSION = 1
MAGIC = b"pyrb"  # HELLO's first bytes: a stream that is not the bridge is told apart at once
MAX_BODY = 64 << 20  # the largest message: a DMA of up to MAX_DMA bytes and its header fit easily
MAX_DMA = 1 << 20  # the most bytes one DMA_READ asks for, or one DMA_WRITE carries

_HEADER = struct.Struct("<IB")
_HELLO = struct.Struct("<4sH")
_SEQ = struct.Struct("<I")
_DOORBELL = struct.Struct("<BII")
_DMA_READ = struct.Struct("<IIQI")
_DMA_DATA = struct.Struct("<II")
_DMA_WRITE = struct.Struct("<IQ")
_TIME = struct.Struct("<IQ")


@dataclass(frozen=True)
class Hello:
    """Both ends' first message: the protocol version, and the model's device (``name``,
    ``address``) in its answer."""

    version: int
    details: dict[str, Any]


@dataclass(frozen=True)
class Command:
    """Driver to model: run the device command ``name`` (``nicd.commands``) on ``arguments``."""

    seq: int
    name: str
    arguments: tuple[Any, ...]


@dataclass(frozen=True)
class Reply:
    """Model to driver: the answer to COMMAND or TIME ``seq`` (0: to a message the model could
    not read): ``("ok", value)`` or ``("err", errno, text)``."""

    seq: int
    answer: tuple[Any, ...]


SEND, RECV, ARM_CQ = 0, 1, 2  # DOORBELL kinds: a send or receive producer counter, a CQ arm


@dataclass(frozen=True)
class Doorbell:
    """Driver to model, unanswered (a register write): ``SEND``/``RECV``: QP ``number``'s
    producer counter is ``value``; ``ARM_CQ``: arm CQ ``number`` (``value`` 1: solicited only)."""

    kind: int
    number: int
    value: int


@dataclass(frozen=True)
class DmaRead:
    """Model to driver: ``length`` bytes at ``offset`` of region ``region``, answered by DMA_DATA ``tag``."""

    tag: int
    region: int
    offset: int
    length: int


@dataclass(frozen=True)
class DmaData:
    """Driver to model: the bytes DMA_READ ``tag`` asked for, or ``status`` (an errno) and none."""

    tag: int
    status: int
    data: bytes


@dataclass(frozen=True)
class DmaWrite:
    """Model to driver, unanswered (a posted write): ``data`` at ``offset`` of region ``region``."""

    region: int
    offset: int
    data: bytes


@dataclass(frozen=True)
class Event:
    """Model to driver (an interrupt): ``item`` for event queue ``queue`` (a completion
    channel's CQN, or an async event as ``(type, element, reason)``)."""

    queue: int
    item: Any


@dataclass(frozen=True)
class Frame:
    """Either way: one Ethernet frame (destination MAC first, no FCS) for or from the model's port."""

    data: bytes


@dataclass(frozen=True)
class Time:
    """Driver to model: run to simulated time ``now`` (nanoseconds); REPLY ``seq`` says when
    the step is done, with ``(busy, next_deadline)``: whether the model has work left without
    anything new arriving, and the nanosecond its next timer is due (None: no timer)."""

    seq: int
    now: int


Message = Hello | Command | Reply | Doorbell | DmaRead | DmaData | DmaWrite | Event | Frame | Time
TYPES: dict[type, int] = {Hello: 1, Command: 2, Reply: 3, Doorbell: 4, DmaRead: 5, DmaData: 6, DmaWrite: 7,
                          Event: 8, Frame: 9, Time: 10}  # fmt: skip
_KINDS = {number: kind for kind, number in TYPES.items()}


def _value(value: Any) -> bytes:
    encoder = Encoder()
    encoder.encode(value)
    return bytes(encoder.out)


def _decode_value(body: memoryview) -> Any:
    decoder = Decoder(bytes(body), [])
    try:
        value = decoder.decode()
    except RecursionError:
        raise ProtocolError("a value nested too deep") from None
    if decoder.at != len(body):
        raise ProtocolError("bytes after the message's value")
    return value


def encode(message: Message) -> bytes:
    """The message with its length and type, ready for the stream."""
    if isinstance(message, Hello):
        body = _HELLO.pack(MAGIC, message.version) + _value(message.details)
    elif isinstance(message, Command):
        body = _SEQ.pack(message.seq) + _value((message.name, message.arguments))
    elif isinstance(message, Reply):
        body = _SEQ.pack(message.seq) + _value(message.answer)
    elif isinstance(message, Doorbell):
        body = _DOORBELL.pack(message.kind, message.number, message.value)
    elif isinstance(message, DmaRead):
        body = _DMA_READ.pack(message.tag, message.region, message.offset, message.length)
    elif isinstance(message, DmaData):
        body = _DMA_DATA.pack(message.tag, message.status) + message.data
    elif isinstance(message, DmaWrite):
        body = _DMA_WRITE.pack(message.region, message.offset) + message.data
    elif isinstance(message, Event):
        body = _SEQ.pack(message.queue) + _value(message.item)
    elif isinstance(message, Frame):
        body = bytes(message.data)
    else:
        body = _TIME.pack(message.seq, message.now)
    if len(body) + 1 > MAX_BODY:
        raise ProtocolError(f"a {len(body)}-byte message is over the limit")
    return _HEADER.pack(len(body) + 1, TYPES[type(message)]) + body


def _fixed(layout: struct.Struct, body: memoryview, exact: bool = True) -> tuple[Any, ...]:
    if len(body) < layout.size or (exact and len(body) != layout.size):
        raise ProtocolError(f"a body of {len(body)} bytes, not {layout.size}")
    return layout.unpack_from(body)


def decode(kind: int, body: memoryview) -> Message:
    """The message of type ``kind`` whose body is ``body``; ``ProtocolError`` if it is not one."""
    message_type = _KINDS.get(kind)
    if message_type is None:
        raise ProtocolError(f"unknown message type {kind}")
    if message_type is Hello:
        magic, version = _fixed(_HELLO, body, exact=False)
        if magic != MAGIC:
            raise ProtocolError("not a bridge HELLO")
        details = _decode_value(body[_HELLO.size :])
        if not isinstance(details, dict):
            raise ProtocolError("HELLO's details are not a mapping")
        return Hello(version, details)
    if message_type is Command:
        (seq,) = _fixed(_SEQ, body, exact=False)
        request = _decode_value(body[_SEQ.size :])
        if not (isinstance(request, tuple) and len(request) == 2 and isinstance(request[0], str)
                and isinstance(request[1], tuple)):  # fmt: skip
            raise ProtocolError("a COMMAND is (name, arguments)")
        return Command(seq, request[0], request[1])
    if message_type is Reply:
        (seq,) = _fixed(_SEQ, body, exact=False)
        answer = _decode_value(body[_SEQ.size :])
        if not (isinstance(answer, tuple) and answer and answer[0] in ("ok", "err")):
            raise ProtocolError("a REPLY is ('ok', value) or ('err', errno, text)")
        return Reply(seq, answer)
    if message_type is Doorbell:
        return Doorbell(*_fixed(_DOORBELL, body))
    if message_type is DmaRead:
        return DmaRead(*_fixed(_DMA_READ, body))
    if message_type is DmaData:
        tag, status = _fixed(_DMA_DATA, body, exact=False)
        return DmaData(tag, status, bytes(body[_DMA_DATA.size :]))
    if message_type is DmaWrite:
        region, offset = _fixed(_DMA_WRITE, body, exact=False)
        return DmaWrite(region, offset, bytes(body[_DMA_WRITE.size :]))
    if message_type is Event:
        (queue,) = _fixed(_SEQ, body, exact=False)
        return Event(queue, _decode_value(body[_SEQ.size :]))
    if message_type is Frame:
        return Frame(bytes(body))
    return Time(*_fixed(_TIME, body))


class Stream:
    """One end of the bridge: messages over a connected stream socket (a Unix socket, a
    socketpair, a TCP connection to a simulator)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Message) -> None:
        self.sock.sendall(encode(message))

    def _exactly(self, count: int) -> bytes | None:
        """``count`` bytes, or None if the stream ended before the first (``ProtocolError`` mid-way)."""
        data = bytearray()
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                if data:
                    raise ProtocolError("the stream ended inside a message")
                return None
            data += chunk
        return bytes(data)

    def receive(self) -> Message | None:
        """The next message, None at the end of the stream. A body that does not decode is
        ``BadMessage`` (read whole: the stream is still in step); a length over the limit is
        ``ProtocolError`` (it is not)."""
        header = self._exactly(_HEADER.size)
        if header is None:
            return None
        length, kind = _HEADER.unpack(header)
        if not 1 <= length <= MAX_BODY:
            raise ProtocolError(f"a message of {length} bytes")
        body = self._exactly(length - 1) if length > 1 else b""
        if body is None:
            raise ProtocolError("the stream ended inside a message")
        try:
            return decode(kind, memoryview(body))
        except ProtocolError as exc:
            raise BadMessage(str(exc), _seq_of(kind, body)) from None

    def close(self) -> None:
        self.sock.close()


class BadMessage(ProtocolError):
    """A whole message that does not decode; ``seq``: the COMMAND or TIME it was, if it says (else 0)."""

    def __init__(self, text: str, seq: int) -> None:
        super().__init__(text)
        self.seq = seq


def _seq_of(kind: int, body: bytes) -> int:
    """The sequence number a malformed COMMAND or TIME carries, to answer it by."""
    if _KINDS.get(kind) in (Command, Time) and len(body) >= _SEQ.size:
        return int(_SEQ.unpack_from(body)[0])
    return 0
