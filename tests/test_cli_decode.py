"""``pyroce decode``: one line per packet, a summary, and one-line errors."""

from __future__ import annotations

import io
import subprocess
import sys

from conftest import DATA

from pyroce.cli import main
from pyroce.wire import BTH, Frame, IPv4Header, Opcode, Packet, PcapWriter, Reth, UdpHeader, build_frame

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
        proc = subprocess.run(
            [sys.executable, "-m", "pyroce", "decode", str(path)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 1
        assert (
            proc.stderr.count("\n") == 1 and proc.stderr.startswith("pyroce decode: error: ") and message in proc.stderr
        )
        assert "Traceback" not in proc.stderr
