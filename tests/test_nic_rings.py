"""Device-model layouts: mlx5 WQE segments, CQEs with owner bits, rings that wrap."""

from __future__ import annotations

import ctypes
import mmap
import platform
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import u32, u64

from pyroce.nic.cqe import CQE_SIZE, Cqe, CqeOpcode, CqeSyndrome
from pyroce.nic.rings import COUNTER_MASK, CqRing, DoorbellRecord, RecvRing, SendRing
from pyroce.nic.wqe import (
    CTRL_DS_AT,
    MLX5_INVALID_LKEY,
    WQEBB,
    AddressVector,
    FmCeSe,
    MwBindSeg,
    SendWqe,
    Sge,
    WqeError,
    WqeOpcode,
    decode_recv_wqe,
    decode_send_wqe,
    decode_send_wqe_at,
    encode_send_wqe,
    write_recv_wqe,
)
from tests.waiting import DEADLINE_S

sges = st.lists(st.builds(Sge, u64, st.integers(0, 0x7FFFFFFF), u32), max_size=8).map(tuple)


address_vectors = st.builds(AddressVector, u32, st.integers(0, 0xFFFFFF), st.binary(min_size=16, max_size=16),
                            st.integers(0, 0xFF), st.integers(0, 0xFFFFF), st.integers(0, 0xFF), st.integers(0, 0xFF),
                            st.integers(0, 7), st.integers(0, 0xFFFF))  # fmt: skip


@st.composite
def send_wqes(draw, datagram=False):
    opcode = draw(st.sampled_from(list(WqeOpcode)))
    rdma = opcode in (WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_IMM, WqeOpcode.RDMA_READ)
    atomic = opcode in (WqeOpcode.ATOMIC_CS, WqeOpcode.ATOMIC_FA)
    inline = draw(st.none() | st.binary(max_size=200)) if opcode not in (WqeOpcode.RDMA_READ,) and not atomic else None
    return SendWqe(
        opcode,
        draw(st.integers(0, 0xFFFF)),
        draw(st.integers(0, 0xFFFFFF)),
        FmCeSe(draw(st.sampled_from([0, 0x02, 0x08, 0x0A, 0x88]))),
        draw(u32),
        draw(u64) if rdma or atomic else None,
        draw(u32) if rdma or atomic else None,
        draw(u64) if atomic else None,
        draw(u64) if atomic else None,
        () if inline is not None else draw(sges),
        inline,
        bind=draw(st.builds(MwBindSeg, u64, u64, u32, u32)) if opcode is WqeOpcode.BIND_MW else None,
        av=draw(address_vectors) if datagram else None,
    )


@given(send_wqes())
def test_send_wqe_round_trip(wqe):
    data = encode_send_wqe(wqe)
    assert len(data) % WQEBB == 0 and len(data) // WQEBB == -(-(data[7] & 0x3F) * 16 // WQEBB)  # ds fills the last block
    assert decode_send_wqe(data) == wqe


@given(send_wqes() | send_wqes(datagram=True), st.integers(0, 3))
def test_a_send_wqe_decodes_in_place_among_other_bytes(wqe, blocks):
    """What a ring's fetch does for a WQE that does not wrap: decode it where it lies, other
    bytes before and after it; a UD QP's with its datagram segment (``av``)."""
    data = encode_send_wqe(wqe)
    ring = memoryview(bytearray(b"\xa5" * blocks * WQEBB) + data + bytearray(b"\x5a" * WQEBB))
    assert decode_send_wqe_at(ring, blocks * WQEBB, data[CTRL_DS_AT] & 0x3F, wqe.av is not None) == wqe


def test_control_and_data_segments_are_mlx5_bytes():
    wqe = SendWqe(WqeOpcode.RDMA_WRITE_IMM, wqe_index=0x1234, qpn=0xABCDEF, fm_ce_se=FmCeSe.CQ_UPDATE | FmCeSe.FENCE,
                  imm=0x11223344, raddr=0x7F0000001000, rkey=0x1F03, sges=(Sge(0x5000, 4096, 0x2A01),))  # fmt: skip
    data = encode_send_wqe(wqe)
    assert data[:16] == bytes.fromhex("00123409 abcdef03 00 0000 88 11223344")
    assert data[16:32] == bytes.fromhex("00007f0000001000 00001f03 00000000")
    assert data[32:48] == bytes.fromhex("00001000 00002a01 0000000000005000")
    assert len(data) == 64


def test_inline_segment_layout():
    data = encode_send_wqe(SendWqe(WqeOpcode.SEND, 0, 0x11, inline=b"hello"))
    assert struct.unpack_from(">I", data, 16)[0] == 0x80000005
    assert data[20:25] == b"hello"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b.__setitem__(3, 0x42), "unknown WQE opcode 0x42"),
        (lambda b: b.__setitem__(7, 0x3F), "ds 63 does not fit the 64-byte WQE"),
        (lambda b: b.__setitem__(7, 0x00), "ds 0 does not fit the 64-byte WQE"),
        (lambda b: struct.pack_into(">I", b, 16, 0x80000100), "inline length 256 overruns the 32-byte WQE"),
    ],
)
def test_bad_wqes_are_refused(mutate, message):
    data = bytearray(encode_send_wqe(SendWqe(WqeOpcode.SEND, 0, 0x11, inline=b"hi")))
    mutate(data)
    with pytest.raises(WqeError) as info:
        decode_send_wqe(bytes(data))
    assert str(info.value) == message


def test_a_wqe_of_more_segments_than_ds_counts_is_refused():
    sges = tuple(Sge(index, 1, 1) for index in range(63))  # with the control segment: 64
    with pytest.raises(WqeError, match="WQE of 64 segments exceeds the 63 a control segment can count"):
        encode_send_wqe(SendWqe(WqeOpcode.SEND, 0, 0x11, sges=sges))
    assert len(encode_send_wqe(SendWqe(WqeOpcode.SEND, 0, 0x11, sges=sges[:62]))) == 16 * WQEBB


def recv_wqe(sges: list[Sge], stride: int) -> bytes:
    buf = bytearray(stride)
    write_recv_wqe(buf, 0, sges, stride)
    return bytes(buf)


def test_recv_wqe_with_terminator():
    stride = 64
    data = recv_wqe([Sge(0x1000, 100, 7), Sge(0x2000, 50, 8)], stride)
    assert struct.unpack_from(">IIQ", data, 32) == (0, MLX5_INVALID_LKEY, 0)
    assert decode_recv_wqe(data) == (Sge(0x1000, 100, 7), Sge(0x2000, 50, 8))
    full = recv_wqe([Sge(i, i, i) for i in range(4)], stride)
    assert len(decode_recv_wqe(full)) == 4
    with pytest.raises(WqeError):
        recv_wqe([Sge(0, 0, 0)] * 5, stride)


def test_a_recv_slot_written_again_in_place_holds_only_the_new_wqe():
    """The ring's WQEs are written in place: a slot that held four entries and now holds one
    reads as one (the terminator ends it; the old entries behind it are not looked at)."""
    ring = RecvRing(memoryview(bytearray(2 * 64)), 2, 64)
    ring.post(0, [Sge(i, i, i) for i in range(4)])
    assert len(ring.fetch(0)) == 4
    ring.post(2, [Sge(0x9000, 9, 9)])  # the same slot, its next lap
    assert ring.fetch(2) == (Sge(0x9000, 9, 9),)


def test_send_ring_wraps_and_decodes_from_a_copy():
    """WQEs are written in place over the bytes of earlier laps (or in two parts across the
    ring's end): each WQE's basic blocks then hold exactly ``encode_send_wqe``'s bytes, zero
    padding included, and decode back to what was posted."""
    buf = bytearray(b"\xa5" * 4 * WQEBB)
    ring = SendRing(memoryview(buf), 4)
    sges = tuple(Sge(i, i, i) for i in range(5))  # with them, 6 segments: 2 WQEBBs
    producer = consumer = 0
    for index in range(10):  # wraps the 4-block ring five times, with a WQE split across the end
        posted = SendWqe(WqeOpcode.SEND, index, 0x11, sges=sges if index % 2 else ())
        start = producer % 4 * WQEBB
        producer = ring.post(producer, posted, 4)
        expected = encode_send_wqe(posted)
        assert (buf + buf)[start : start + len(expected)] == expected
        got, consumer = ring.fetch(consumer)
        assert got == posted
    assert producer == consumer


def test_a_wqe_the_ring_has_no_room_for_is_not_written():
    """``post`` writes nothing and answers -1 when the WQE needs more basic blocks than are
    free, in place or across the ring's end (the send queue then refuses it as full)."""
    buf = bytearray(b"\xa5" * 4 * WQEBB)
    ring = SendRing(memoryview(buf), 4)
    two_blocks = SendWqe(WqeOpcode.SEND, 0, 0x11, sges=tuple(Sge(i, i, i) for i in range(5)))
    assert ring.post(0, two_blocks, 1) == -1 and ring.post(3, two_blocks, 1) == -1
    assert buf == b"\xa5" * 4 * WQEBB
    assert ring.post(3, two_blocks, 2) == 5


def test_cqe_round_trip_and_owner_bit():
    """A one-entry ring: counter 1 writes owner 1 (its second lap), counter 2 owner 0; each CQE
    reads back whole only at its own counter."""
    buf = bytearray(CQE_SIZE)
    ring = CqRing(memoryview(buf), 1)
    cqe = Cqe(CqeOpcode.RESP_SEND_IMM, 0x11, 7, byte_cnt=4096, imm_inval=0xDEADBEEF, flags_rqpn=0x1234, timestamp=99)
    assert ring.produce(1, cqe) == 2
    assert ring.poll(1) == cqe and ring.poll(0) is None
    assert buf[63] == 0x31 and struct.unpack_from(">I", buf, 44)[0] == 4096
    err = Cqe(CqeOpcode.REQ_ERR, 0x11, 3, s_wqe_opcode=WqeOpcode.RDMA_WRITE, syndrome=CqeSyndrome.REMOTE_ACCESS_ERR,
              vendor_err=0x42)  # fmt: skip
    ring.produce(2, err)
    assert ring.poll(2) == err and ring.poll(1) is None
    assert buf[54:56] == b"\x42\x13" and buf[56] == WqeOpcode.RDMA_WRITE


def test_cq_ring_validity_across_wraps():
    ring = CqRing(memoryview(bytearray(4 * CQE_SIZE)), 4)
    assert ring.poll(0) is None  # initialised INVALID
    producer = 0
    for consumer in range(11):  # wraps the 4-entry ring almost three times
        assert ring.poll(consumer) is None  # nothing new yet, even where an old pass's CQE sits
        producer = ring.produce(producer, Cqe(CqeOpcode.REQ, 0x11, consumer))
        got = ring.poll(consumer)
        assert got is not None and got.wqe_counter == consumer


def test_doorbell_record_counters():
    record = DoorbellRecord(memoryview(bytearray(DoorbellRecord.SIZE)))
    record.publish(DoorbellRecord.SEND, 0x12345)
    record.publish(DoorbellRecord.RECV, 3)
    assert record.read(DoorbellRecord.SEND) == 0x2345 and record.read(DoorbellRecord.RECV) == 3
    assert bytes(record.buf) == bytes.fromhex("00000003 00002345")
    with pytest.raises(ValueError, match="power of two"):
        SendRing(memoryview(bytearray(3 * WQEBB)), 3)


def test_doorbell_record_reads_aligned_words_across_the_counter_range() -> None:
    record = DoorbellRecord(memoryview(bytearray(DoorbellRecord.SIZE)))
    assert record.words.format == "I" and record.words.itemsize == 4 and len(record.words) == 2
    for counter in (0, 1, 0xFF, 0x100, 0x1234, 0xFF00, 0xFFFF, 0x10000, 0x1FFFF):
        send, recv = counter & COUNTER_MASK, ~counter & COUNTER_MASK
        record.publish(DoorbellRecord.SEND, counter)
        record.publish(DoorbellRecord.RECV, recv)
        assert bytes(record.buf) == recv.to_bytes(4, "big") + send.to_bytes(4, "big")
        assert (record.read(DoorbellRecord.SEND), record.read(DoorbellRecord.RECV)) == (send, recv)
        assert record.producers() == (recv, send)  # a fetch's one call for both
    with pytest.raises(ValueError, match="aligned"):
        DoorbellRecord(memoryview(bytearray(DoorbellRecord.SIZE + 1))[1:])


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64" or not shutil.which("cc"),
                    reason="tests/c/watch_loads.c traps loads on x86-64 Linux, built with cc")  # fmt: skip
def test_a_doorbell_record_is_read_with_one_load(tmp_path: Path) -> None:
    """C stores a record at once, whenever the engine reads it. With each load of the record
    trapped and a new value stored after each (tests/c/watch_loads.c), the read is one load and
    returns the value it found; read a byte at a time, 0x00ff then 0x0100, 0xff00, 0x0001 gave
    0xff01, a value never written (the engine would have fetched 65026 stale WQEs)."""
    library = tmp_path / "libwatch_loads.so"
    source = Path(__file__).parent / "c" / "watch_loads.c"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True, capture_output=True)
    watch = ctypes.CDLL(str(library))
    page = mmap.mmap(-1, mmap.PAGESIZE)
    record = DoorbellRecord(memoryview(page)[: DoorbellRecord.SIZE])
    record.publish(DoorbellRecord.SEND, 0x00FF)
    stores = (ctypes.c_uint32 * 3)(*(socket.htonl(value) for value in (0x0100, 0xFF00, 0x0001)))
    address = ctypes.addressof(ctypes.c_char.from_buffer(page)) + DoorbellRecord.SEND
    assert watch.watch(ctypes.c_void_p(address), stores, len(stores)) == 0
    try:
        value = record.read(DoorbellRecord.SEND)
    finally:
        loads = watch.unwatch()
    assert (hex(value), loads) == (hex(0x00FF), 1)


def test_a_doorbell_record_stored_by_another_thread_is_read_whole() -> None:
    """A thread storing whole words with no GIL (numpy's copy) while the engine's read runs: every
    value read was stored (read a byte at a time, 0x0000 or 0xffff came in 4 runs of 5 here)."""
    numpy = pytest.importorskip("numpy")
    buf = bytearray(DoorbellRecord.SIZE)
    record = DoorbellRecord(memoryview(buf))
    record.publish(DoorbellRecord.SEND, 0x00FF)
    values = numpy.tile(numpy.array([0xFF00, 0x00FF], dtype=">u4"), 1 << 20)
    word = numpy.frombuffer(buf, dtype=">u4")[1:]
    stores = numpy.lib.stride_tricks.as_strided(word, shape=values.shape, strides=(0,), writeable=True)
    done = threading.Event()

    def store() -> None:
        while not done.is_set():
            numpy.copyto(stores, values)

    writer = threading.Thread(target=store)
    writer.start()
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            seen.update([record.read(DoorbellRecord.SEND) for _ in range(10000)])
    finally:
        done.set()
        writer.join()
    assert seen <= {0x00FF, 0xFF00}, [hex(value) for value in seen]


def test_a_polled_cqe_is_never_torn_by_a_concurrent_writer() -> None:
    """The engine thread writes CQEs while an application thread polls: every CQE the poller
    accepts must carry the body written with it (rxe interop found torn reads)."""
    import threading

    count = 8
    ring = CqRing(memoryview(bytearray(count * CQE_SIZE)), count)
    total = 3000
    consumed = [0]
    deadline = time.monotonic() + DEADLINE_S  # for both sides: a bug fails the test, not hangs it

    def produce() -> None:
        producer = 0
        while producer < total:
            if producer - consumed[0] < count:
                producer = ring.produce(producer, Cqe(CqeOpcode.REQ, producer & 0xFFFFFF, producer & 0xFFFF,
                                                      byte_cnt=producer))  # fmt: skip
            elif time.monotonic() > deadline:
                return
            else:
                time.sleep(0)  # the ring is full: let the poller run (not a whole GIL switch interval)

    writer = threading.Thread(target=produce)
    writer.start()
    index = 0
    while index < total:
        cqe = ring.poll(index)
        if cqe is None:
            assert time.monotonic() < deadline, f"CQE {index} of {total} never came"
            time.sleep(0)  # let the writer run
            continue
        assert (cqe.qpn, cqe.byte_cnt, cqe.wqe_counter) == (index, index, index & 0xFFFF)
        index += 1
        consumed[0] = index
    writer.join()
