"""``pyroce decode``: one line per packet, a summary, and one-line errors."""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path

import pytest
from conftest import DATA

from pyroce.cli import main
from pyroce.verbs.enums import ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR
from pyroce.wire import (
    BTH,
    QP1,
    CmMra,
    CmMsgResponse,
    CmRej,
    CmRtu,
    Deth,
    Frame,
    IPv4Header,
    Opcode,
    Packet,
    PcapWriter,
    Reth,
    UdpHeader,
    build_frame,
    encode_cm,
)
from tests.cli import assert_one_line_error, pyroce
from tests.peer_process import peer_process

ETH = bytes.fromhex("020000000002 020000000001 0800")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_decode_rc_pingpong():
    status, text = run("decode", str(DATA / "rc_pingpong.pcap"))
    lines = text.splitlines()
    assert status == 0
    assert lines[-1].startswith("50 RoCEv2 packets in ") and "50 icrc=ok, 0 icrc=BAD, 0 malformed" in lines[-1]
    packets = lines[:-1]
    assert len(packets) == 50 and all(line.endswith("icrc=ok") for line in packets)
    first = packets[0].split()
    assert first[1].startswith("10.77.0.") and first[2] == ">" and first[4] == "RC_SEND_FIRST"
    assert any("RC_ACKNOWLEDGE" in line and "aeth(ACK credits=31 msn=" in line for line in packets)


def test_decode_shows_reth_and_naks():
    status, text = run("decode", str(DATA / "write_bw_loss3.pcap"))
    assert status == 0
    assert "reth(va=0x7fb42d882000 rkey=0x00000a9a dlen=65536)" in text
    assert text.count("aeth(NAK PSN_SEQ_ERR") == 35


def test_bad_icrc_and_malformed_packets_are_flagged(tmp_path):
    pkt = Packet(BTH(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 0x42, ackreq=True), b"abc", reth=Reth(0x1000, 0x77, 3))
    good = bytes(build_frame(Frame(ETH, IPv4Header(b"\x0a\0\0\1", b"\x0a\0\0\2"), UdpHeader(0xC000), pkt, 0, False)))
    bad_icrc = good[:-1] + bytes([good[-1] ^ 1])
    bad_tver = good[:43] + b"\x03" + good[44:]
    path = tmp_path / "mixed.pcap"
    with open(path, "wb") as stream:
        writer = PcapWriter(stream)
        for data in (good, bad_icrc, bad_tver, b"\xff" * 20):
            writer.write(data)
    status, text = run("decode", str(path))
    lines = text.splitlines()
    assert status == 0
    assert lines[0].endswith("icrc=ok") and "RC_RDMA_WRITE_ONLY qpn=0x000011 psn=0x000042 ackreq=1" in lines[0]
    assert "icrc=BAD(0x" in lines[1]
    assert lines[2] == "     3 MALFORMED BadTransportVersion: BTH TVer is 3, must be 0"
    assert lines[3] == "2 RoCEv2 packets in 4 frames: 1 icrc=ok, 1 icrc=BAD, 1 malformed, 1 other frames"


def test_errors_are_one_line_with_a_nonzero_exit(tmp_path):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a capture\n")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((DATA / "rping.pcap").read_bytes()[:5000])
    for path, message in [
        (text_file, "not a pcap file: magic number"),
        (cut, "truncated pcap record at byte"),
        (tmp_path / "missing.pcap", "No such file or directory"),
    ]:
        proc = pyroce("decode", str(path), timeout=60)
        assert proc.returncode == 1
        assert (
            proc.stderr.count("\n") == 1 and proc.stderr.startswith("pyroce decode: error: ") and message in proc.stderr
        )
        assert "Traceback" not in proc.stderr


ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33  # Linux's: a receive buffer past net.core.rmem_max (root), which other lo traffic cannot fill


def capture_write(tmp_path: Path, size: int) -> Path:
    """A real capture on ``lo`` (an AF_PACKET socket, as tcpdump's) of an RDMA WRITE of
    ``size`` bytes between two processes, as the sending host sees it: GSO sends whole."""
    if not hasattr(socket, "AF_PACKET") or os.geteuid() != 0:
        pytest.skip("needs root and AF_PACKET to capture on lo")
    tap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    tap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    tap.bind(("lo", 0))
    frames: list[bytes] = []
    try:
        with peer_process(1 << 20) as (ep, peer, _):
            ends = {socket.inet_aton(ep.ctx.device.address), peer.gid[12:]}
            ep.mr.write(os.urandom(size), size)
            wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, size, ep.mr.lkey)])
            wr.set_wr_rdma(peer.rkey, peer.addr)
            ep.qp.post_send(wr)
            (wc,) = ep.poll(1, 10)
            assert wc.status == 0
        tap.setblocking(False)
        while True:  # the tap copies each frame as it is sent: all are queued by now
            try:
                data, (_, _, kind, _, _) = tap.recvfrom(1 << 18)
            except BlockingIOError:
                break
            if kind == PACKET_OUTGOING and {data[26:30], data[30:34]} == ends:
                frames.append(data)
    finally:
        tap.close()
    path = tmp_path / "write.pcap"
    with open(path, "wb") as stream:
        writer = PcapWriter(stream)
        for data in frames:
            writer.write(data)
    return path


@pytest.mark.embedded_nic  # a capture is of one process's own NIC
def test_a_loopback_capture_of_gso_sends_decodes_packet_by_packet(tmp_path):
    """A 64 KiB WRITE at PMTU 4096 leaves in two GSO sends ([FIRST, MIDDLE] and [13 x MIDDLE,
    LAST]); a capture on lo holds each as one datagram, which decode splits, every ICRC ok."""
    path = capture_write(tmp_path, 65536)
    status, text = run("decode", str(path))
    lines = text.splitlines()
    assert status == 0
    writes = [line for line in lines if "RC_RDMA_WRITE_" in line]
    assert [line.split()[0] for line in writes] == ["1.0", "1.1"] + [f"2.{k}" for k in range(14)]
    assert all(line.endswith("icrc=ok") for line in lines[:-1])
    assert lines[-1].endswith(" 0 icrc=BAD, 0 malformed, 0 other frames, 2 GSO sends split")
    result = pyroce("decode", "--json", "-", stdin=path.read_bytes(), timeout=60)  # from stdin, as JSON
    assert result.returncode == 0, result.stderr
    *packets, summary = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(p["frame"], p["segment"]) for p in packets if p["opcode"].startswith("RC_RDMA_WRITE_")] == [
        (1, 0), (1, 1)] + [(2, k) for k in range(14)]  # fmt: skip
    assert all(p["icrc_ok"] for p in packets) and summary["icrc_bad"] == 0 and summary["gso_split"] == 2
    assert summary["roce"] == len(packets) == summary["icrc_ok"]


def test_json_output(tmp_path):
    status, text = run("decode", "--json", str(DATA / "write_bw_loss3.pcap"))
    assert status == 0
    *packets, summary = [json.loads(line) for line in text.splitlines()]
    first = next(p for p in packets if p["headers"].get("reth"))
    assert first["opcode"] == "RC_RDMA_WRITE_FIRST" and first["segment"] is None and first["icrc_ok"]
    assert first["headers"]["reth"] == {"va": 0x7FB42D882000, "rkey": 0xA9A, "dma_len": 65536}
    naks = [p for p in packets if "aeth" in p["headers"] and p["headers"]["aeth"]["text"].startswith("NAK PSN_SEQ_ERR")]
    assert len(naks) == 35
    assert summary == {"type": "summary", "frames": 4627, "roce": 4582, "icrc_bad": 0, "malformed": 0, "other": 45,
                       "gso_split": 0, "icrc_ok": 4582}  # fmt: skip


def test_an_unsupported_link_type_is_an_error(tmp_path):
    path = tmp_path / "ieee80211.pcap"
    with open(path, "wb") as stream:
        PcapWriter(stream, linktype=105).write(b"\0" * 64)
    result = pyroce("decode", str(path), timeout=60)
    assert_one_line_error(result, f"pyroce decode: error: {path}: link type 105 is not supported")
    assert result.returncode == 1 and result.stdout == ""


def test_stdin_that_is_not_a_pcap():
    result = pyroce("decode", "-", stdin=b"hello", timeout=60)
    assert_one_line_error(result, "pyroce decode: error: <stdin>: not a pcap file")


def test_rping_cm_mads_show_by_name():
    status, text = run("decode", str(DATA / "rping.pcap"))
    assert status == 0
    cm = [line.split(" cm ", 1)[1] for line in text.splitlines() if " cm " in line]
    assert cm == [
        "REQ tid=0x2a0083376 comm=0x763308a0 sid=0x1061c06 qpn=0x14 psn=0x7b91f5 cma(10.77.0.3:46422 > 10.77.0.2) icrc=ok",
        "REP tid=0x2a0083376 comm=0x69f49a45 remote=0x763308a0 qpn=0x14 psn=0x2fd57f icrc=ok",
        "RTU tid=0x2a0083376 comm=0x763308a0 remote=0x69f49a45 icrc=ok",
        "DREQ tid=0x2a0083376 comm=0x763308a0 remote=0x69f49a45 qpn=0x14 icrc=ok",
        "DREP tid=0x2a0083376 comm=0x69f49a45 remote=0x763308a0 icrc=ok",
    ]
    assert all("qpn=0x000001 " in line for line in text.splitlines() if " cm " in line)
    status, text = run("decode", str(DATA / "udaddy.pcap"))
    assert "cm SIDR_REQ tid=0x2a0083377 req=0x773308a0 sid=0x1111c06 cma(10.77.0.3:34852 > 10.77.0.2)" in text
    assert "cm SIDR_REP tid=0x2a0083377 req=0x773308a0 status=0x0 qpn=0x18 qkey=0x1234567" in text


def qp1_capture(tmp_path: Path, payloads: list[bytes]) -> Path:
    """A capture of UD SEND_ONLY packets to QP1 carrying ``payloads``."""
    path = tmp_path / "qp1.pcap"
    with open(path, "wb") as stream:
        writer = PcapWriter(stream)
        for psn, payload in enumerate(payloads):
            pkt = Packet(BTH(Opcode.UD_SEND_ONLY, QP1, psn), payload, deth=Deth(0x80010000, QP1))
            ip = IPv4Header(b"\x0a\0\0\1", b"\x0a\0\0\2")
            writer.write(bytes(build_frame(Frame(ETH, ip, UdpHeader(0xC000), pkt, 0, False))))
    return path


def test_qp1_payloads_that_are_not_cm_mads_say_why(tmp_path):
    lap = bytearray(encode_cm(5, CmRtu(local_comm_id=1, remote_comm_id=2)))
    lap[16:18] = b"\x00\x19"
    rej = CmRej(local_comm_id=1, remote_comm_id=2, reason=28, message_rejected=CmMsgResponse.REP)
    mra = CmMra(local_comm_id=3, remote_comm_id=4, service_timeout=17)
    path = qp1_capture(tmp_path, [encode_cm(1, rej), encode_cm(2, mra), b"\x01\x07\x02" + bytes(9), bytes(lap)])
    status, text = run("decode", str(path))
    lines = text.splitlines()
    assert status == 0 and len(lines) == 5
    assert lines[0].endswith(" cm REJ tid=0x1 comm=0x1 remote=0x2 reason=28 rejected=REP icrc=ok")
    assert lines[1].endswith(" cm MRA tid=0x2 comm=0x3 remote=0x4 timeout=0x11 mraed=REQ icrc=ok")
    assert lines[2].endswith(" cm? BadMadLength: MAD is 12 bytes, must be 256 icrc=ok")
    assert lines[3].endswith(" cm? UnknownAttribute: CM attribute 0x0019 is not a message pyroce reads icrc=ok")
    assert lines[4].endswith("4 icrc=ok, 0 icrc=BAD, 0 malformed, 0 other frames")  # not malformed RoCE packets
    status, text = run("decode", "--json", str(path))
    *packets, _ = [json.loads(line) for line in text.splitlines()]
    assert packets[0]["headers"]["cm"]["message"] == "REJ" and packets[0]["headers"]["cm"]["reason"] == 28
    assert packets[2]["headers"]["cm"] == {"error": "BadMadLength", "reason": "MAD is 12 bytes, must be 256"}


def test_json_cm_fields():
    status, text = run("decode", "--json", str(DATA / "rping.pcap"))
    assert status == 0
    cm = [p["headers"]["cm"] for p in map(json.loads, text.splitlines()) if "cm" in p.get("headers", {})]
    assert [doc["message"] for doc in cm] == ["REQ", "REP", "RTU", "DREQ", "DREP"]
    req = cm[0]
    assert (req["tid"], req["local_qpn"], req["service_id"], req["primary_flow_label"]) == (
        0x2A0083376, 0x14, 0x1061C06, 0x61170)  # fmt: skip
    assert req["primary_local_gid"] == "00000000000000000000ffff0a4d0003" and len(req["private_data"]) == 2 * 92
    assert req["cma"] == {"ip_version": 4, "port": 46422, "src": "10.77.0.3", "dst": "10.77.0.2"}
