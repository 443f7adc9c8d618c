#!/usr/bin/env python3
# Copied unchanged from the workplace's shared/bench/udp_ceiling.py so the benchmark runs from a clean clone.
"""Measure what plain Python UDP on loopback can do on this machine, between two processes.

These are the ceilings a Python RoCEv2 stack is measured against, in the same run:
  lat_us     half of the round-trip time of a 64-byte datagram, both sides busy-polling
  bw_plain   one-way throughput, one sendto() per 4 KiB datagram (no offload)
  bw_gso     one-way throughput with UDP GSO on send and GRO on receive (64 KiB calls)
  roce_pipe  the bare Python RoCEv2 data path over GSO/GRO: the sender builds BTH + 4 KiB payload +
             ICRC per packet (15 packets per system call), the receiver parses the BTH, verifies
             the ICRC and copies the payload into a memory region. No QPs, ACKs or retries: the
             per-packet work any Python RoCEv2 stack must do, so a stack's WRITE bandwidth can be
             compared with it. Uses the `isal` CRC-32 when installed (key "crc" says which).

Usage: python3 udp_ceiling.py [--json] [--seconds S]
Only loopback addresses are used.
"""
import argparse
import json
import os
import socket
import sys
import time

UDP_SEGMENT = 103
UDP_GRO = 104


def _pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 << 20)
        s.bind(("127.0.0.1", 0))
    return a, b


def latency(iters=20000):
    a, b = _pair()
    a.setblocking(False)
    b.setblocking(False)
    pa, pb = a.getsockname(), b.getsockname()

    def rcv(s):
        while True:
            try:
                return s.recv(2048)
            except BlockingIOError:
                pass

    pid = os.fork()
    if pid == 0:
        for _ in range(iters + 200):
            b.sendto(rcv(b), pa)
        os._exit(0)
    msg = bytes(64)
    for _ in range(200):
        a.sendto(msg, pb)
        rcv(a)
    t0 = time.perf_counter()
    for _ in range(iters):
        a.sendto(msg, pb)
        rcv(a)
    dt = time.perf_counter() - t0
    os.waitpid(pid, 0)
    return dt / iters / 2 * 1e6


def throughput(seconds, gso):
    a, b = _pair()
    seg = 4096 + 32
    pb = b.getsockname()
    if gso:
        b.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        a.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, seg)
        payload = os.urandom(seg * 15)
    else:
        payload = os.urandom(seg)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # receiver: count bytes until the sender's end marker
        os.close(r)
        buf = bytearray(1 << 16)
        got = 0
        b.settimeout(2.0)
        t_first = None
        try:
            while True:
                n = b.recv_into(buf)
                if n == 1:
                    break
                if t_first is None:
                    t_first = time.perf_counter()
                got += n
        except socket.timeout:
            pass
        t_last = time.perf_counter()
        os.write(w, json.dumps({"bytes": got, "secs": t_last - (t_first or t_last)}).encode())
        os._exit(0)
    os.close(w)
    time.sleep(0.1)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(64):
            a.sendto(payload, pb)
    a.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 0) if gso else None
    time.sleep(0.05)
    a.sendto(b"x", pb)
    res = json.loads(os.read(r, 4096).decode())
    os.waitpid(pid, 0)
    return res["bytes"] / max(res["secs"], 1e-9) / 1e6


try:
    from isal.isal_zlib import crc32 as _crc32
    CRC_NAME = "isal"
except ImportError:  # same values, slower
    from zlib import crc32 as _crc32
    CRC_NAME = "zlib"


def roce_pipe(seconds):
    """Delivered MB/s of the bare BTH + payload + ICRC pipeline (see the module docstring)."""
    import struct
    pmtu, batch = 4096, 15
    seg = 12 + pmtu + 4
    bth = struct.Struct(">BBHII")
    icrc = struct.Struct("<I")
    prefix = _crc32(b"\xff" * 8 + bytes(28))  # stands in for the masked IPv4 + UDP headers
    a, b = _pair()
    b.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    pb = b.getsockname()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # receiver: parse, verify, place
        os.close(r)
        region = bytearray(64 << 20)
        rv = memoryview(region)
        buf = bytearray(seg * 64)
        bv = memoryview(buf)
        slots = len(region) // pmtu
        got = bad = 0
        t_first = None
        b.settimeout(2.0)
        try:
            while True:
                n, anc, _, _ = b.recvmsg_into([buf], socket.CMSG_SPACE(4))
                if n == 1:
                    break
                if t_first is None:
                    t_first = time.perf_counter()
                step = seg
                for _lvl, typ, data in anc:
                    if typ == UDP_GRO:
                        step = int.from_bytes(data[:2], sys.byteorder)
                for o in range(0, n, step):
                    end = min(o + step, n)
                    _op, _f, _pk, _qpn, psn = bth.unpack_from(buf, o)
                    if _crc32(bv[o:end - 4], prefix) != icrc.unpack_from(buf, end - 4)[0]:
                        bad += 1
                        continue
                    at = (psn % slots) * pmtu
                    rv[at:at + end - o - 16] = bv[o + 12:end - 4]
                    got += end - o - 16
        except socket.timeout:
            pass
        t_last = time.perf_counter()
        os.write(w, json.dumps({"bytes": got, "bad": bad, "secs": t_last - (t_first or t_last)}).encode())
        os._exit(0)
    os.close(w)
    a.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, seg)
    src = memoryview(os.urandom(pmtu * batch))
    out = bytearray(seg * batch)
    ov = memoryview(out)
    time.sleep(0.1)
    psn = 0
    end_t = time.perf_counter() + seconds
    while time.perf_counter() < end_t:
        for i in range(batch):
            o = i * seg
            bth.pack_into(out, o, 0x0A, 0, 0xFFFF, 0x11, psn & 0xFFFFFF)
            ov[o + 12:o + 12 + pmtu] = src[i * pmtu:(i + 1) * pmtu]
            icrc.pack_into(out, o + 12 + pmtu, _crc32(ov[o:o + 12 + pmtu], prefix))
            psn += 1
        a.sendto(out, pb)
    a.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 0)
    time.sleep(0.05)
    a.sendto(b"x", pb)
    res = json.loads(os.read(r, 4096).decode())
    os.waitpid(pid, 0)
    assert res["bad"] == 0, "ICRC mismatch in the pipeline ceiling"
    return res["bytes"] / max(res["secs"], 1e-9) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    out = {
        "lat_us": round(latency(), 2),
        "bw_plain_MBps": round(throughput(args.seconds, gso=False), 1),
        "bw_gso_MBps": round(throughput(args.seconds, gso=True), 1),
        "roce_pipe_MBps": round(roce_pipe(args.seconds), 1),
        "crc": CRC_NAME,
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:16s} {v}")


if __name__ == "__main__":
    sys.exit(main())
