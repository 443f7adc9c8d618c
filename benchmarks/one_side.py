"""What one side of pyroce costs, with no waiting on a peer: a scripted peer in the same thread
answers over real loopback UDP at once (datagrams built before the clock starts), so each
figure is pyroce's work for one side plus the system calls of the wire (the peer's sends,
which on loopback also carry the kernel's receive work, and its reads).

    python benchmarks/one_side.py [--count N] [--json FILE]

Rows (microseconds of wall time per unit, one thread, so CPU time too):
  write_2B_requester   post a 2-byte RDMA WRITE, the engine sends it, the peer's ACK comes back, poll it
  send_2B_responder    the peer's 2-byte SEND arrives, the ACK goes out, poll the receive, post it again
  write_64K_responder  a 64 KiB RDMA WRITE arrives as the peer's GSO runs ([FIRST, MIDDLE] and
                       [13 x MIDDLE, LAST], as pyroce sends it), placed, ACKed; per message and per packet
  write_64K_requester  post a 64 KiB RDMA WRITE, the engine sends its 16 packets, the peer's ACK
                       comes back, poll it
  read_64K_requester   post a 64 KiB RDMA READ, the peer answers with its 16 responses as GSO runs
                       ([FIRST, MIDDLE], [13 x MIDDLE], then the LAST), placed, poll the completion
  uc_write_64K_responder  the same 64 KiB WRITE to a UC QP, with immediate ([FIRST, MIDDLE] and
                       [13 x MIDDLE], then LAST_WITH_IMMEDIATE), placed, its receive polled; nothing
                       goes back

The two-process figures of ``run.py`` are these costs plus waiting; this benchmark is what
to profile (``py-spy record -- python benchmarks/one_side.py``) when one of them moves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import time
from collections.abc import Iterator

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.link.udp import UdpLink
from pyroce.verbs.enums import ibv_mtu, ibv_qp_type, ibv_wr_opcode
from pyroce.verbs.wr import SGE, RecvWR, SendWR
from pyroce.wire.bth import BTH
from pyroce.wire.headers import Aeth, Reth
from pyroce.wire.opcodes import Opcode, Transport
from pyroce.wire.packet import Packet, PacketRun

PEER_QPN = 0x999
REGION = 16 << 20


class ScriptedPeer:
    """A RoCEv2 peer that is only a socket on another loopback address: it sends datagrams
    built before the clock starts and reads what arrives without parsing it, so the timed
    loop holds pyroce's work and the system calls of a wire, not the peer's Python."""

    def __init__(self, address: str) -> None:
        self.link = UdpLink(address)
        self.buf = bytearray(1 << 16)

    def info(self) -> PeerInfo:
        return PeerInfo(bytes(10) + b"\xff\xff" + socket.inet_aton(self.link.address), PEER_QPN, 0, 0, 0)

    def build(self, to: str, packets: list[tuple[Packet | PacketRun, int]]) -> tuple[bytes, int]:
        """One GSO datagram: (packet, or a run's packet index) as consecutive segments, as
        pyroce's engine builds them; returns its bytes and segment size."""
        path = self.link.tx_path(to)
        view = memoryview(bytearray(1 << 16))
        end = step = 0
        for segment, (item, index) in enumerate(packets):
            if isinstance(item, PacketRun):
                size = path.build_run_into(view, end, item, index, 1, segment)
            else:
                size = path.build_into(view, end, item, segment)
            step = step or size
            end += size
        return bytes(view[:end]), step

    def send(self, to: str, datagram: tuple[bytes, int]) -> None:
        data, step = datagram
        if len(data) == step:
            self.link.send(data, to)
        else:
            self.link.send_segments(memoryview(data), step, to)

    def receive(self) -> int:
        """The opcode of the next datagram pyroce sent (waits up to a second)."""
        if not select.select([self.link.sock], [], [], 1.0)[0]:
            raise TimeoutError("pyroce sent nothing")
        got = self.link.recv_into(self.buf)
        assert got is not None
        return self.buf[0]


@contextlib.contextmanager
def _connected(peer_address: str, qp_type: int = ibv_qp_type.IBV_QPT_RC) -> Iterator[
        tuple[ScriptedPeer, RcEndpoint, str, int]]:  # fmt: skip
    """A scripted peer and an endpoint (RC or UC) connected to it: (peer, endpoint, the
    endpoint's address, its QPN); both closed afterwards."""
    peer = ScriptedPeer(peer_address)
    ep = RcEndpoint.open(REGION, max_wr=256, psn=0, qp_type=qp_type)
    try:
        ep.mr.write(bytes(REGION), REGION)  # pages in place: a first touch is not what is measured
        ep.connect(peer.info(), path_mtu=ibv_mtu.IBV_MTU_4096)
        yield peer, ep, ep.ctx.device.address, ep.qp.qp_num
    finally:
        ep.close()
        peer.link.close()


def write_requester(count: int) -> float:
    with _connected("127.98.0.1") as (peer, ep, to, qpn):
        acks = [peer.build(to, [(Packet(BTH(Opcode.RC_ACKNOWLEDGE, qpn, psn), aeth=Aeth(0x1F, psn + 1)), 0)])
                for psn in range(count)]  # fmt: skip
        start = time.perf_counter()
        for index in range(count):
            wr = SendWR(wr_id=index, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, 2, ep.mr.lkey)])
            wr.set_wr_rdma(0x1234, 0x10000)
            ep.qp.post_send(wr)
            assert peer.receive() == Opcode.RC_RDMA_WRITE_ONLY
            peer.send(to, acks[index])
            assert ep.poll(1, 5)[0].status == 0
        return (time.perf_counter() - start) / count * 1e6


def write_64k_requester(count: int) -> float:
    """Post a 64 KiB WRITE, the engine sends its 16 packets, the peer reads them and ACKs the
    last, poll the completion; per message."""
    with _connected("127.98.0.4") as (peer, ep, to, qpn):
        acks = [peer.build(to, [(Packet(BTH(Opcode.RC_ACKNOWLEDGE, qpn, psn), aeth=Aeth(0x1F, index + 1)), 0)])
                for index, psn in enumerate(range(15, 16 * count, 16))]  # fmt: skip
        start = time.perf_counter()
        for index in range(count):
            wr = SendWR(wr_id=index, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, 65536, ep.mr.lkey)])
            wr.set_wr_rdma(0x1234, 0x10000)
            ep.qp.post_send(wr)
            while peer.receive() != Opcode.RC_RDMA_WRITE_MIDDLE:  # the run that ends with the LAST
                pass
            peer.send(to, acks[index])
            assert ep.poll(1, 5)[0].status == 0
        return (time.perf_counter() - start) / count * 1e6


def read_64k_requester(count: int) -> float:
    """Post a 64 KiB READ, the peer reads the request and answers with the responses, poll the
    completion; per message. The bytes of the last READ are checked."""
    with _connected("127.98.0.6") as (peer, ep, to, qpn):
        data = memoryview(os.urandom(65536))
        answers = []
        for index in range(count):
            psn, msn = index * 16, index + 1
            first = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_FIRST, qpn, psn), data[:4096], aeth=Aeth(0x1F, msn))
            opcode = Opcode.RC_RDMA_READ_RESPONSE_MIDDLE
            middle = PacketRun(opcode, qpn, psn + 1, 0xFFFF, data[4096:61440], 4096, False, opcode, opcode)
            last = Packet(BTH(Opcode.RC_RDMA_READ_RESPONSE_LAST, qpn, psn + 15), data[61440:], aeth=Aeth(0x1F, msn))
            answers.append((peer.build(to, [(first, 0), (middle, 0)]), peer.build(to, [(middle, i) for i in range(1, 14)]),
                            peer.build(to, [(last, 0)])))  # the LAST, 4 bytes longer, cannot end a GSO run  # fmt: skip
        start = time.perf_counter()
        for index, (head, middles, tail) in enumerate(answers):
            offset = (index % (REGION // 65536)) * 65536
            wr = SendWR(wr_id=index, opcode=ibv_wr_opcode.IBV_WR_RDMA_READ, sg=[SGE(ep.mr.buf + offset, 65536, ep.mr.lkey)])
            wr.set_wr_rdma(0x1234, 0x10000)
            ep.qp.post_send(wr)
            assert peer.receive() == Opcode.RC_RDMA_READ_REQUEST
            peer.send(to, head)
            peer.send(to, middles)
            peer.send(to, tail)
            assert ep.poll(1, 5)[0].status == 0
        elapsed = time.perf_counter() - start
        if ep.mr.read(65536, ((count - 1) % (REGION // 65536)) * 65536) != bytes(data):
            raise SystemExit("read_64K_requester: the bytes placed differ from the bytes sent")
        return elapsed / count * 1e6


def send_responder(count: int) -> float:
    with _connected("127.98.0.2") as (peer, ep, to, qpn):
        sends = [peer.build(to, [(Packet(BTH(Opcode.RC_SEND_ONLY, qpn, psn, True), b"hi"), 0)]) for psn in range(count)]
        ep.qp.post_recv(RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, 64, ep.mr.lkey)]))
        start = time.perf_counter()
        for index in range(count):
            peer.send(to, sends[index])
            assert ep.poll(1, 5)[0].byte_len == 2
            ep.qp.post_recv(RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, 64, ep.mr.lkey)]))
            assert peer.receive() == Opcode.RC_ACKNOWLEDGE
        return (time.perf_counter() - start) / count * 1e6


def write_packets(data: memoryview, qpn: int, index: int, addr: int, rkey: int,
                  transport: Transport) -> tuple[Packet, PacketRun, Packet]:  # fmt: skip
    """Message ``index`` of a 64 KiB RDMA WRITE in 4096-byte packets: FIRST, the run of MIDDLEs, and
    LAST (RC: with AckReq; UC: with immediate ``index``, so it completes a receive)."""
    psn = index * 16
    first = Packet(BTH(transport | Opcode.RC_RDMA_WRITE_FIRST, qpn, psn), data[:4096], reth=Reth(addr, rkey, 65536))
    opcode = transport | Opcode.RC_RDMA_WRITE_MIDDLE
    middle = PacketRun(opcode, qpn, psn + 1, 0xFFFF, data[4096:61440], 4096, False, opcode, opcode)
    if transport is Transport.RC:
        last = Packet(BTH(Opcode.RC_RDMA_WRITE_LAST, qpn, psn + 15, True), data[61440:])
    else:
        last = Packet(BTH(Opcode.UC_RDMA_WRITE_LAST_WITH_IMMEDIATE, qpn, psn + 15), data[61440:], immdt=index)
    return first, middle, last


def write_responder(count: int) -> float:
    with _connected("127.98.0.3") as (peer, ep, to, qpn):
        data = memoryview(os.urandom(65536))
        messages = []
        for index in range(count):
            offset = (index % (REGION // 65536)) * 65536
            first, middle, last = write_packets(data, qpn, index, ep.mr.buf + offset, ep.mr.rkey, Transport.RC)
            messages.append((peer.build(to, [(first, 0), (middle, 0)]),
                             peer.build(to, [*((middle, i) for i in range(1, 14)), (last, 0)])))  # fmt: skip
        start = time.perf_counter()
        for head, tail in messages:
            peer.send(to, head)
            peer.send(to, tail)
            ep.cq.poll()  # an empty CQ: the poll runs the engine, which places the packets and ACKs
            assert peer.receive() == Opcode.RC_ACKNOWLEDGE
        elapsed = time.perf_counter() - start
        if ep.mr.read(65536, ((count - 1) % (REGION // 65536)) * 65536) != bytes(data):
            raise SystemExit("write_64K_responder: the bytes placed differ from the bytes sent")
        return elapsed / count * 1e6


def uc_write_responder(count: int) -> float:
    """A 64 KiB UC RDMA WRITE with immediate arrives; poll its receive completion; per message."""
    with _connected("127.98.0.5", ibv_qp_type.IBV_QPT_UC) as (peer, ep, to, qpn):
        data = memoryview(os.urandom(65536))
        messages = []
        for index in range(count):
            offset = (index % (REGION // 65536)) * 65536
            first, middle, last = write_packets(data, qpn, index, ep.mr.buf + offset, ep.mr.rkey, Transport.UC)
            messages.append((peer.build(to, [(first, 0), (middle, 0)]),
                             peer.build(to, [(middle, i) for i in range(1, 14)]), peer.build(to, [(last, 0)])))  # fmt: skip
        receive = RecvWR(wr_id=0, sg=[SGE(ep.mr.buf, 0, ep.mr.lkey)], num_sge=0)
        for _ in range(min(count, 200)):
            ep.qp.post_recv(receive)
        start = time.perf_counter()
        for index, (head, middles, tail) in enumerate(messages):
            peer.send(to, head)
            peer.send(to, middles)
            peer.send(to, tail)
            assert ep.poll(1, 5)[0].status == 0
            ep.qp.post_recv(receive)
        elapsed = time.perf_counter() - start
        if ep.mr.read(65536, ((count - 1) % (REGION // 65536)) * 65536) != bytes(data):
            raise SystemExit("uc_write_64K_responder: the bytes placed differ from the bytes sent")
        return elapsed / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3000, help="messages per row")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    count = max(10, args.count)
    write_64k = write_responder(max(10, count // 10))
    write_64k_requester_us = write_64k_requester(max(10, count // 10))
    uc_write_64k = uc_write_responder(max(10, count // 10))
    read_64k_requester_us = read_64k_requester(max(10, count // 10))
    rows = {
        "write_2B_requester_us": write_requester(count),
        "send_2B_responder_us": send_responder(count),
        "write_64K_responder_us": write_64k,
        "write_64K_responder_us_per_packet": write_64k / 16,
        "write_64K_requester_us": write_64k_requester_us,
        "uc_write_64K_responder_us": uc_write_64k,
        "uc_write_64K_responder_us_per_packet": uc_write_64k / 16,
        "read_64K_requester_us": read_64k_requester_us,
    }
    for name, value in rows.items():
        print(f"{name:36} {value:8.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
