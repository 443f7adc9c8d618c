"""The shared NIC's message format (``pyroce.nicd.protocol``): every kind of value survives a
round trip through a real socket pair, descriptors travel as descriptors, and bytes that are
not a message are refused as such, never anything worse."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyroce.nicd.protocol import (
    ArenaOffset,
    Decoder,
    Encoder,
    Handle,
    PassFd,
    ProtocolError,
    Record,
    receive,
    send,
)
from pyroce.verbs.addr import GID
from pyroce.verbs.device import PortAttr


@pytest.fixture
def sockets():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield a, b
    a.close()
    b.close()


def roundtrip(value, sockets, handle=None, arena=None):
    a, b = sockets
    send(a, value, handle)
    return receive(b, arena)


@pytest.mark.parametrize("value", [None, True, False, 0, -1, 1 << 62, -(1 << 63), (1 << 64) - 1, b"", b"\x00\xff" * 300,
                                   "pyroce0", "ünïcode", (), (1, (2, "three"), None), {"a": 1, "b": {"c": b"d"}}])
def test_plain_values_survive(value, sockets):
    message = roundtrip(value, sockets)
    assert message.value == (tuple(value) if isinstance(value, list) else value)
    assert message.fds == []


def test_lists_come_back_as_tuples(sockets):
    assert roundtrip([1, [2, 3]], sockets).value == (1, (2, 3))


def test_handles_offsets_and_records(sockets):
    class Verb:
        pass

    verb = Verb()
    message = roundtrip((verb, Handle(9), ArenaOffset(4096), PortAttr(), GID(bytes(range(16)))), sockets,
                        handle=lambda obj: 7 if obj is verb else None, arena=lambda offset: 0x1000_0000 + offset)
    named, handle, address, port, gid = message.value
    assert (named, type(named), handle) == (7, Handle, 9)
    assert address == 0x1000_0000 + 4096
    assert isinstance(port, Record) and port.kind == "PortAttr"
    assert port.active_mtu == PortAttr().active_mtu and port.max_msg_sz == PortAttr().max_msg_sz
    assert gid.raw == bytes(range(16))


def test_descriptors_travel_as_descriptors(sockets):
    read_end, write_end = os.pipe()
    try:
        message = roundtrip(("fd", PassFd(write_end)), sockets)
        received = message.value[1]
        assert received != write_end and message.fds == [received]
        os.write(received, b"x")
        assert os.read(read_end, 1) == b"x"
        os.close(received)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_closed_peer_reads_as_none(sockets):
    a, b = sockets
    a.close()
    assert receive(b) is None


def test_an_object_that_is_no_value_is_refused():
    @dataclass
    class Fine:
        x: int = 1

    Encoder().encode(Fine())  # a dataclass is a record
    with pytest.raises(ProtocolError):
        Encoder().encode(object())


@pytest.mark.parametrize("data", [b"", b"i\x00", b"s\xff\xff\xff\xff", b"l\x02\x00\x00\x00N", b"f\x00\x00\x00\x00",
                                  b"Z", b"s\x02\x00\x00\x00\xff\xfe", b"r\x01\x00\x00\x00X\x01\x00\x00\x00"])
def test_malformed_messages_are_protocol_errors(data):
    with pytest.raises(ProtocolError):
        Decoder(data, []).decode()


def test_trailing_bytes_are_refused(sockets):
    a, b = sockets
    a.send(b"NN")
    with pytest.raises(ProtocolError):
        receive(b)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_refused(data):
    try:
        Decoder(data, []).decode()
    except ProtocolError:
        pass


values = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.binary(max_size=20)
                      | st.text(max_size=10),
                      lambda inner: st.lists(inner, max_size=4).map(tuple)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)  # fmt: skip


@given(values)
def test_any_value_roundtrips(value):
    encoder = Encoder()
    encoder.encode(value)
    decoder = Decoder(bytes(encoder.out), [])
    assert decoder.decode() == value
    assert decoder.at == len(encoder.out)
