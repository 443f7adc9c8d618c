"""``link.ethernet``: RoCEv2 as whole Ethernet frames, for a wire modelled frame by frame (an RTL
simulation's MAC). The frames are what a kernel would send (scapy reads them back), foreign
and broken frames are dropped and counted, and two NICs whose frames a host moves by hand run
an RC WRITE in simulated time."""

from __future__ import annotations

from scapy.contrib.roce import BTH as ScapyBTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.host.assembly import build_device
from pyroce.ib.addressing import mac_of
from pyroce.link.ethernet import EthernetLink
from pyroce.verbs.device import Context
from pyroce.verbs.enums import ibv_wc_status, ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR

A, B = "10.2.0.1", "10.2.0.2"


def test_a_frame_is_what_a_kernel_would_send() -> None:
    link = EthernetLink(A)
    payload = bytes(range(32))  # any UDP payload: the link does not read it
    link.send(payload, B)
    frame = Ether(link.frames.popleft())
    assert (frame.dst, frame.src) == (":".join(f"{b:02x}" for b in mac_of(B)), ":".join(f"{b:02x}" for b in mac_of(A)))
    ip = frame[IP]
    assert (ip.src, ip.dst, ip.flags, ip.id, ip.ttl) == (A, B, "DF", 0, 64)
    fresh = IP(bytes(ip))
    del fresh.chksum  # scapy computes it anew
    assert IP(bytes(fresh)).chksum == ip.chksum
    assert (frame[UDP].dport, bytes(frame[UDP].payload)) == (4791, payload)
    link.close()


def test_foreign_and_broken_frames_are_dropped_and_counted() -> None:
    sender, receiver = EthernetLink(B), EthernetLink(A)
    sender.send(bytes(32), "10.2.0.9")  # for another address
    receiver.receive_frame(sender.frames.popleft())
    receiver.receive_frame(b"\x01" * 10)  # shorter than an Ethernet header
    receiver.receive_frame(bytes(Ether(dst="02:00:0a:02:00:01") / IP(dst=A) / UDP(dport=53)))  # not RoCEv2
    assert receiver.recv_into(bytearray(64)) is None
    assert receiver.counters == {"drop_not_ours": 1, "drop_TruncatedPacket": 1, "drop_NotRoce": 1}
    sender.send(bytes(32), A)
    receiver.receive_frame(sender.frames.popleft())
    assert receiver.recv_into(bytearray(64)) == (32, (B, 4791), 32, A)
    sender.close()
    receiver.close()


def test_a_multicast_groups_frames_are_taken_once_joined() -> None:
    """To a group: Ethernet's multicast MAC for it (01:00:5e and its low 23 bits, as rxe's
    ip_eth_mc_map), taken only by a link that joined the group, with the group as destination."""
    sender, receiver = EthernetLink(B), EthernetLink(A)
    sender.send(bytes(32), "239.130.1.2")
    frame = sender.frames.popleft()
    assert Ether(frame).dst == "01:00:5e:02:01:02" and Ether(frame)[IP].dst == "239.130.1.2"
    receiver.receive_frame(frame)
    assert receiver.recv_into(bytearray(64)) is None and receiver.counters == {"drop_not_ours": 1}
    receiver.join("239.130.1.2")
    receiver.receive_frame(frame)
    assert receiver.recv_into(bytearray(64)) == (32, (B, 4791), 32, "239.130.1.2")
    receiver.leave("239.130.1.2")
    receiver.receive_frame(frame)
    assert receiver.recv_into(bytearray(64)) is None and receiver.counters["drop_not_ours"] == 2
    sender.close()
    receiver.close()


def test_two_nics_whose_frames_a_host_moves_run_an_rc_write() -> None:
    links = {address: EthernetLink(address) for address in (A, B)}
    devices = [build_device(f"eth-{address}", link, progress="host") for address, link in links.items()]
    writer, target = (RcEndpoint.open(1 << 16, context=Context(device=device)) for device in devices)
    writer.connect(target.info())
    target.connect(writer.info())
    writer.mr.write(bytes(range(256)) * 40, 10240, 0)
    wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(writer.mr.buf, 10240, writer.mr.lkey)])
    wr.set_wr_rdma(target.mr.rkey, target.mr.buf)
    writer.qp.post_send(wr)
    for step in range(20):
        for device in devices:
            device.step(step * 1e-5)
        for address, link in links.items():
            peer = links[B if address == A else A]
            while link.frames:
                frame = link.frames.popleft()
                assert Ether(frame).haslayer(ScapyBTH)
                peer.receive_frame(frame)
    count, wcs = writer.cq.poll(1)
    assert count == 1 and wcs[0].status == ibv_wc_status.IBV_WC_SUCCESS, wcs
    assert target.mr.read(10240, 0) == bytes(range(256)) * 40
    assert links[A].counters["frames_sent"] == 10 and links[B].counters["frames_received"] == 10
    for endpoint in (writer, target):
        endpoint.close()
    for device in devices:
        device.close()
