"""The simulator bridge: the RC data path between two models (data and completions checked),
events as EVENT messages, and the protocol itself: its codec, a version mismatch, and bad
messages, which a model answers with an error and survives."""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyroce.verbs.enums as e
from pyroce.bridge import remote_nic
from pyroce.bridge.messages import (
    MAX_BODY,
    TYPES,
    VERSION,
    Command,
    DmaData,
    DmaRead,
    DmaWrite,
    Doorbell,
    Event,
    Frame,
    Hello,
    Message,
    Reply,
    Stream,
    Time,
    decode,
    encode,
)
from pyroce.bridge.remote_nic import RemoteNic
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from tests.bridge_pair import Models
from tests.rc_pair import Endpoint
from tests.waiting import readable, spin_until

WR = e.ibv_wr_opcode
WC = e.ibv_wc_opcode
OK = e.ibv_wc_status.IBV_WC_SUCCESS


@pytest.fixture
def models() -> Iterator[Models]:
    models = Models()
    yield models
    models.close()


@pytest.fixture
def pair(models: Models) -> Iterator[tuple[Endpoint, Endpoint]]:
    a, b = models.pair()
    yield a, b
    a.close()
    b.close()


# --- the data path ------------------------------------------------------------------------


def test_the_verbs_drive_a_model_over_the_bridge(pair: tuple[Endpoint, Endpoint]) -> None:
    """SEND/RECV, a multi-packet WRITE, a READ and both atomics between two models, every
    byte checked; the packets crossed the driver side as Ethernet frames."""
    a, b = pair
    assert isinstance(a.ctx.device, RemoteNic) and a.ctx.device is not b.ctx.device
    payload = os.urandom(5000)
    a.mr.write(payload, len(payload))
    b.qp.post_recv(RecvWR(wr_id=7, sg=[SGE(b.mr.buf, 8192, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=1, sg=[SGE(a.mr.buf, len(payload), a.mr.lkey)]))
    (sent,), (received,) = a.poll(), b.poll()
    assert (sent.status, sent.opcode, sent.wr_id) == (OK, WC.IBV_WC_SEND, 1)
    assert (received.status, received.opcode, received.wr_id, received.byte_len) == (OK, WC.IBV_WC_RECV, 7, 5000)
    assert b.mr.read(5000, 0) == payload

    block = os.urandom(300_000)  # 293 packets at the 1024-byte path MTU
    a.mr.write(block, len(block), 10_000)
    write = SendWR(wr_id=2, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf + 10_000, len(block), a.mr.lkey)])
    write.set_wr_rdma(b.mr.rkey, b.mr.buf + 20_001)
    a.qp.post_send(write)
    assert a.poll()[0].status == OK
    assert b.mr.read(len(block), 20_001) == block
    assert b.mr.read(8, 20_001 + len(block)) == bytes(8)  # nothing written past it

    read = SendWR(wr_id=3, opcode=WR.IBV_WR_RDMA_READ, sg=[SGE(a.mr.buf + 400_000, 70_000, a.mr.lkey)])
    read.set_wr_rdma(b.mr.rkey, b.mr.buf + 20_001)
    a.qp.post_send(read)
    (done,) = a.poll()
    assert (done.status, done.opcode, done.byte_len) == (OK, WC.IBV_WC_RDMA_READ, 70_000)
    assert a.mr.read(70_000, 400_000) == block[:70_000]

    word = struct.Struct("=Q")
    b.mr.write(word.pack(40), 8, 64)
    add = SendWR(wr_id=4, opcode=WR.IBV_WR_ATOMIC_FETCH_AND_ADD, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    add.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, 2)
    swap = SendWR(wr_id=5, opcode=WR.IBV_WR_ATOMIC_CMP_AND_SWP, sg=[SGE(a.mr.buf + 8, 8, a.mr.lkey)])
    swap.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, 42, 99)
    add.next_wr = swap
    a.qp.post_send(add)
    assert [(wc.wr_id, wc.status) for wc in a.poll(2)] == [(4, OK), (5, OK)]
    assert (word.unpack(a.mr.read(8, 0))[0], word.unpack(a.mr.read(8, 8))[0]) == (40, 42)
    assert word.unpack(b.mr.read(8, 64))[0] == 99
    frames = [nic.stats()["sent_pkts"] for nic in (a.ctx.device, b.ctx.device)]
    assert frames[0] >= 293 and frames[1] >= 70  # the WRITE's packets and the READ's responses


def test_a_bad_rkey_fails_the_request_and_the_qp(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    before = b.mr.read(64, 0)
    write = SendWR(wr_id=9, opcode=WR.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, 64, a.mr.lkey)])
    write.set_wr_rdma(b.mr.rkey ^ 0x100, b.mr.buf)  # another MR's index: no such key
    a.qp.post_send(write)
    (failed,) = a.poll()
    assert (failed.wr_id, failed.status) == (9, e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR)
    assert b.mr.read(64, 0) == before
    assert a.qp.query(e.ibv_qp_attr_mask.IBV_QP_STATE)[0].qp_state == e.ibv_qp_state.IBV_QPS_ERR


def test_completion_and_async_events_come_as_event_messages(models: Models) -> None:
    a, b = models.pair(events=True)
    try:
        assert a.channel is not None
        a.cq.req_notify()  # a DOORBELL (arm), posted
        b.qp.post_recv(RecvWR(wr_id=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
        a.qp.post_send(SendWR(wr_id=2, sg=[SGE(a.mr.buf, 64, a.mr.lkey)]))
        assert not readable(a.channel.fd, 0)  # nothing runs until the fabric does
        spin_until(lambda: readable(a.channel.fd, 0), "the completion event", a.ctx.device.kick)
        a.channel.get_cq_event(a.cq)
        a.cq.ack_events(1)
        assert a.cq.poll()[1][0].wr_id == 2  # the CQE was written before its event came
        assert b.poll()[0].wr_id == 1

        a.ctx.device.set_port_state(False)  # a command: its events come before its REPLY
        event = a.ctx.get_async_event()
        assert (event.event_type, event.element) == (e.ibv_event_type.IBV_EVENT_PORT_ERR, 1)
        a.ctx.device.set_port_state(True)
        assert a.ctx.get_async_event().event_type == e.ibv_event_type.IBV_EVENT_PORT_ACTIVE
    finally:
        a.close()
        b.close()


# --- the protocol ---------------------------------------------------------------------------

u32 = st.integers(0, 0xFFFFFFFF)
values = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text() | st.binary(),
                      lambda inner: st.lists(inner, max_size=3).map(tuple)
                      | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8)  # fmt: skip
MESSAGES = st.one_of(
    st.builds(Hello, st.integers(0, 0xFFFF), st.dictionaries(st.text(), values, max_size=3)),
    st.builds(Command, u32, st.text(), st.lists(values, max_size=4).map(tuple)),
    st.builds(Reply, u32, st.just("ok").flatmap(lambda ok: values.map(lambda value: (ok, value)))),
    st.builds(Reply, u32, st.tuples(st.just("err"), st.integers(0, 200), st.text())),
    st.builds(Doorbell, st.integers(0, 0xFF), u32, u32),
    st.builds(DmaRead, u32, u32, st.integers(0, (1 << 64) - 1), u32),
    st.builds(DmaData, u32, u32, st.binary()),
    st.builds(DmaWrite, u32, st.integers(0, (1 << 64) - 1), st.binary()),
    st.builds(Event, u32, values),
    st.builds(Frame, st.binary()),
    st.builds(Time, u32, st.integers(0, (1 << 64) - 1)),
)


@given(MESSAGES)
def test_every_message_decodes_to_itself(message: Message) -> None:
    raw = encode(message)
    length, kind = struct.unpack_from("<IB", raw)
    assert length == len(raw) - 4 and kind == TYPES[type(message)]
    assert decode(kind, memoryview(raw)[5:]) == message


def test_a_version_mismatch_is_one_clear_error(models: Models, monkeypatch: pytest.MonkeyPatch) -> None:
    driver, model = socket.socketpair()
    thread = models.serve(model, "bridge0", "10.0.0.1")
    monkeypatch.setattr(remote_nic, "VERSION", VERSION + 1)
    with pytest.raises(PyverbsRDMAError) as refused:
        RemoteNic(driver, models.fabric)
    assert refused.value.error_code == errno.EPROTONOSUPPORT
    assert f"version {VERSION + 1}, this model {VERSION}" in str(refused.value)
    thread.join(10)
    assert not thread.is_alive()  # the model ended the bridge with its refusal
    driver.close()


def test_a_model_of_another_version_is_refused(models: Models) -> None:
    driver, model = socket.socketpair()
    Stream(model).send(Hello(VERSION + 1, {"name": "x", "address": "10.0.0.9"}))
    with pytest.raises(PyverbsRDMAError) as refused:
        RemoteNic(driver, models.fabric)
    assert refused.value.error_code == errno.EPROTONOSUPPORT
    driver.close()
    model.close()


class RawDriver:
    """A driver that speaks the bridge by hand to a model in a thread (after a good HELLO)."""

    def __init__(self, models: Models) -> None:
        self.sock, model = socket.socketpair()
        self.thread = models.serve(model, f"fuzz{len(models.threads)}", "10.0.0.1")
        self.stream = Stream(self.sock)
        self.stream.send(Hello(VERSION, {}))
        assert isinstance(self.stream.receive(), Hello)

    def until_reply(self, seq: int) -> list[Reply]:
        """The error REPLYs (seq 0) before REPLY ``seq``, then that one; DMA is refused (EFAULT)."""
        replies = []
        while True:
            message = self.stream.receive()
            assert message is not None, "the model hung up"
            if isinstance(message, DmaRead):
                self.stream.send(DmaData(message.tag, errno.EFAULT, b""))
            elif isinstance(message, Reply):
                replies.append(message)
                if message.seq == seq:
                    return replies

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 16), st.binary(max_size=48)), min_size=1, max_size=6))
def test_bad_messages_get_an_error_reply_never_a_crash(garbage: list[tuple[int, bytes]]) -> None:
    """Whole messages of any type with any body: each COMMAND or TIME is answered, each message
    the model cannot use with an error REPLY, and a good COMMAND after them still runs."""
    models = Models()
    driver = RawDriver(models)
    try:
        for kind, body in garbage:
            driver.sock.sendall(struct.pack("<IB", len(body) + 1, kind) + body)
        driver.stream.send(Command(0xFFFFFFFF, "alloc_pd", ()))
        *errors, answer = driver.until_reply(0xFFFFFFFF)
        assert answer.answer[0] == "ok" and isinstance(answer.answer[1], int)
        for reply in errors:  # a well-formed COMMAND or TIME among them is answered as any
            assert reply.answer[0] == "ok" or (reply.answer[1] > 0 and isinstance(reply.answer[2], str)), reply
    finally:
        driver.close()
        models.close()


def test_each_bad_message_is_answered(models: Models) -> None:
    driver = RawDriver(models)
    try:
        for message, code in [(Command(5, "no_such_command", ()), errno.EOPNOTSUPP),
                              (Command(6, "alloc_mw", (1, 1, 1, 1)), errno.EIO),  # too many arguments
                              (Command(7, "create_cq", ((99, 4096), 64, (98, 4), None, None)), errno.EFAULT)]:  # fmt: skip
            driver.stream.send(message)
            (reply,) = driver.until_reply(message.seq)
            assert reply.answer[:2] == ("err", code), reply
        driver.stream.send(Doorbell(0, 0x99, 1))  # no such QP: told at the next exchange
        driver.stream.send(Time(8, 1000))
        complaint, done = driver.until_reply(8)
        assert complaint.seq == 0 and complaint.answer[:2] == ("err", errno.EINVAL)
        assert done.answer == ("ok", (False, None))
        driver.sock.sendall(struct.pack("<IB", 9, 10) + b"12345678")  # a TIME cut short: its seq answered
        (short,) = driver.until_reply(0x34333231)
        assert short.answer[:2] == ("err", errno.EPROTO)
        driver.sock.sendall(struct.pack("<IB", MAX_BODY + 1, 2))  # a length over the limit: the end
        (last,) = driver.until_reply(0)
        assert last.answer[:2] == ("err", errno.EPROTO)
        assert driver.stream.receive() is None
    finally:
        driver.close()
