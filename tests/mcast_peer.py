"""One end of a multicast exchange (``tests/test_multicast.py``), in a network namespace of its
own on its own embedded NIC (``PYROCE_ADDR``); groups by MGID text (``::ffff:239.1.1.9``).

``receive MGID``: a UD QP attached to the group prints ``ready``, then, for the first datagram,
``got <payload> src_qp=<n> from=<source> to=<destination>`` (the addresses of its GRH).
``send MGID TEXT``: one datagram of TEXT to the group, QPN 0xFFFFFF; prints ``sent <status> qpn=<n>``.
``both MGID TEXT``: a receiver and a sender on the one NIC: the receiver's line, then the
NIC's counters as JSON."""

from __future__ import annotations

import ipaddress
import json
import sys

from pyroce.verbs.addr import GID, AHAttr, GlobalRoute
from pyroce.verbs.ah import AH
from tests.rc_pair import Endpoint
from tests.test_ud_datapath import GRH, RECV_AT, post_recvs, send, ud_endpoint


def attach(mgid: GID) -> Endpoint:
    ep = ud_endpoint()
    ep.qp.attach_mcast(mgid, 0)
    post_recvs(ep, 1)
    return ep


def send_to(ep: Endpoint, mgid: GID, text: str) -> int:
    ep.mr.write(text.encode(), len(text), 0)
    ah = AH(ep.pd, attr=AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=mgid, sgid_index=3)))
    send(ep, ah, 0xFFFFFF, len(text))
    (wc,) = ep.poll()
    return wc.status


def received(ep: Endpoint) -> str:
    (wc,) = ep.poll(deadline_s=30)
    header = ep.mr.read(GRH, RECV_AT)
    ipv4 = header[20] >> 4 == 4  # RoCEv2/IPv4: 20 zero bytes, then the IPv4 header; else the IPv6 header
    size, at = (4, (32, 36)) if ipv4 else (16, (8, 24))
    source, dest = (str(ipaddress.ip_address(header[start : start + size])) for start in at)
    payload = ep.mr.read(wc.byte_len - GRH, RECV_AT + GRH).decode()
    return f"got {payload} src_qp={wc.src_qp} from={source} to={dest}"


def main(mode: str, group: str, text: str = "") -> None:
    mgid = GID(group)
    if mode == "receive":
        ep = attach(mgid)
        print("ready", flush=True)
        print(received(ep), flush=True)
    elif mode == "send":
        ep = ud_endpoint()
        print(f"sent {send_to(ep, mgid, text)} qpn={ep.qp.qp_num}", flush=True)
    else:
        ep, sender = attach(mgid), ud_endpoint()
        send_to(sender, mgid, text)
        print(received(ep))
        print(json.dumps(ep.ctx.device.stats()))
        sender.close()
    ep.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
