"""The shared NIC's command protocol: what a driver sends the NIC and what it answers.

One message is one datagram on a Unix ``SOCK_SEQPACKET`` socket (boundaries kept, so no
framing), with the file descriptors it carries beside it (``SCM_RIGHTS``). A message is one
*value*, encoded as a tag byte and a little-endian body, so a driver in any language can speak
it (the C library's is the next one to come):

=====  ==================================================================================
tag    value
=====  ==================================================================================
``N``  None
``T``  True; ``F`` False
``i``  an integer, int64; ``u`` one of 2**63 .. 2**64-1, uint64
``b``  bytes: u32 length, the bytes
``s``  text: u32 length, UTF-8
``l``  a sequence (decoded as a tuple): u32 count, the values
``d``  a mapping of text keys: u32 count, then key (as ``s``'s body) and value in turn
``r``  a record (an attribute structure such as ``ibv_port_attr``): its type name (``s``'s
       body), then its fields as ``d``'s body
``h``  a handle: u32, the NIC's number for an object of this connection (``ibv_qp`` ...)
``a``  an offset in the connection's shared memory (``nicd.arena``): u64
``f``  a file descriptor: u32, its index among the message's descriptors
=====  ==================================================================================

A request is ``(command, arguments)``; the answer is ``("ok", value)`` or ``("err", errno,
message)``. The first request of a connection is ``("hello", {"protocol": PROTOCOL, "version":
...})``: a driver and a NIC of different protocols refuse each other in one line.
"""

from __future__ import annotations

import array
import socket
import struct
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, NamedTuple

PROTOCOL = 1
MAX_MESSAGE = 1 << 17  # bytes of one message: the largest, ibv_advise_mr of 4095 SGEs (64 KiB of them), fits
MAX_FDS = 8  # descriptors one message may carry

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")


class ProtocolError(ValueError):
    """A message that does not decode: the connection is dropped."""


class CommandError(Exception):
    """A command refused with an errno, answered as ``("err", errno, message)``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Handle(int):
    """An object of the NIC named by its number on this connection."""

    def __repr__(self) -> str:
        return f"Handle({int(self)})"


class ArenaOffset(int):
    """A place in the connection's shared memory: the driver adds where it mapped it."""


class PassFd(int):
    """A file descriptor to send with the message (the receiver gets its own copy)."""


class Record:
    """A structure the NIC answers with (``ibv_device_attr``, ``ibv_qp_attr`` ...): its fields
    as attributes, as the verbs objects it stands for have them."""

    def __init__(self, kind: str, values: dict[str, Any]) -> None:
        self.kind = kind
        self.__dict__.update(values)

    def __repr__(self) -> str:
        return f"Record({self.kind}, {len(vars(self)) - 1} fields)"


class Encoder:
    """Encodes one value; ``handle`` turns an object of the NIC into its number (None: not one)."""

    def __init__(self, handle: Callable[[Any], int | None] | None = None) -> None:
        self.handle = handle
        self.out = bytearray()
        self.fds: list[int] = []

    def encode(self, value: Any) -> None:
        out = self.out
        if value is None:
            out += b"N"
        elif value is True or value is False:
            out += b"T" if value else b"F"
        elif isinstance(value, Handle):
            out += b"h" + _U32.pack(value)
        elif isinstance(value, ArenaOffset):
            out += b"a" + _U64.pack(value)
        elif isinstance(value, PassFd):
            out += b"f" + _U32.pack(len(self.fds))
            self.fds.append(int(value))
        elif isinstance(value, int):  # IntEnum and IntFlag members included
            value = int(value)
            out += b"i" + _I64.pack(value) if -(1 << 63) <= value < (1 << 63) else b"u" + _U64.pack(value)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            out += b"b" + _U32.pack(len(value)) + bytes(value)
        elif isinstance(value, str):
            raw = value.encode()
            out += b"s" + _U32.pack(len(raw)) + raw
        elif isinstance(value, (tuple, list)):
            out += b"l" + _U32.pack(len(value))
            for item in value:
                self.encode(item)
        elif isinstance(value, dict):
            out += b"d"
            self._mapping(value)
        elif isinstance(value, Enum):
            self.encode(value.value)
        else:
            number = self.handle(value) if self.handle else None
            if number is not None:
                out += b"h" + _U32.pack(number)
                return
            kind = type(value).__name__.encode()
            out += b"r" + _U32.pack(len(kind)) + kind
            self._mapping(record_fields(value))

    def _mapping(self, mapping: dict[str, Any]) -> None:
        self.out += _U32.pack(len(mapping))
        for key, item in mapping.items():
            raw = key.encode()
            self.out += _U32.pack(len(raw)) + raw
            self.encode(item)


def record_fields(value: Any) -> dict[str, Any]:
    """The fields a record carries: a dataclass's fields, else the object's public attributes."""
    if isinstance(value, Record):
        return {key: item for key, item in vars(value).items() if key != "kind"}
    if is_dataclass(value):
        return {field.name: getattr(value, field.name) for field in fields(value)}
    try:
        attributes = vars(value)
    except TypeError:
        raise ProtocolError(f"cannot send a {type(value).__name__}") from None
    return {key: item for key, item in attributes.items() if not key.startswith("_")}


class Decoder:
    """Decodes one value; ``arena`` turns an offset into what the driver uses (an address)."""

    def __init__(self, data: bytes, fds: list[int], arena: Callable[[int], int] | None = None) -> None:
        self.data = memoryview(data)
        self.at = 0
        self.fds = fds
        self.arena = arena

    def _take(self, count: int) -> memoryview:
        end = self.at + count
        if end > len(self.data):
            raise ProtocolError("message cut short")
        piece = self.data[self.at : end]
        self.at = end
        return piece

    def _u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def _text(self) -> str:
        try:
            return str(self._take(self._u32()), "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("text is not UTF-8") from None

    def decode(self) -> Any:
        tag = bytes(self._take(1))
        if tag == b"N":
            return None
        if tag in (b"T", b"F"):
            return tag == b"T"
        if tag == b"i":
            return _I64.unpack(self._take(8))[0]
        if tag == b"u":
            return _U64.unpack(self._take(8))[0]
        if tag == b"b":
            return bytes(self._take(self._u32()))
        if tag == b"s":
            return self._text()
        if tag == b"l":
            return tuple(self.decode() for _ in range(self._u32()))
        if tag == b"d":
            return self._mapping()
        if tag == b"r":
            kind = self._text()
            return Record(kind, self._mapping())
        if tag == b"h":
            return Handle(self._u32())
        if tag == b"a":
            offset = _U64.unpack(self._take(8))[0]
            return self.arena(offset) if self.arena else ArenaOffset(offset)
        if tag == b"f":
            index = self._u32()
            if index >= len(self.fds):
                raise ProtocolError("a descriptor the message does not carry")
            return PassFd(self.fds[index])  # (an int: sent on as it came, by an engine that passes answers on)
        raise ProtocolError(f"unknown tag {tag!r}")

    def _mapping(self) -> dict[str, Any]:
        return {self._text(): self.decode() for _ in range(self._u32())}


class Message(NamedTuple):
    value: Any
    fds: list[int]


def send(sock: socket.socket, value: Any, handle: Callable[[Any], int | None] | None = None) -> None:
    """Send ``value`` (and the descriptors it names) as one message."""
    encoder = Encoder(handle)
    encoder.encode(value)
    if len(encoder.out) > MAX_MESSAGE:
        raise ProtocolError(f"a {len(encoder.out)}-byte message is over the limit")
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", encoder.fds))] if encoder.fds else []
    sock.sendmsg([encoder.out], ancillary)


def receive(sock: socket.socket, arena: Callable[[int], int] | None = None, peek: bool = False) -> Message | None:
    """The next message, or None when the peer has closed the connection. Descriptors that came
    with it are the receiver's to close. ``peek``: look at it and leave it to be received (a
    request carrying descriptors cannot be peeked at: they would be received twice)."""
    data, ancillary, flags, _ = sock.recvmsg(MAX_MESSAGE, 0 if peek else socket.CMSG_SPACE(MAX_FDS * 4),
                                             socket.MSG_PEEK if peek else 0)  # fmt: skip
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            held = array.array("i")
            held.frombytes(payload[: len(payload) - len(payload) % 4])
            fds.extend(held)
    if not data and not fds:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            socket.close(fd)
        raise ProtocolError("message or its descriptors cut short")
    decoder = Decoder(data, fds, arena)
    value = decoder.decode()
    if decoder.at != len(data):
        raise ProtocolError("bytes after the message's value")
    return Message(value, fds)
