"""One end of a multicast exchange between two NICs (``tests/test_multicast.py``), run in a network
namespace of its own on its own embedded NIC (``PYROCE_ADDR``).

``receive GROUP``: a UD QP attached to ``::ffff:GROUP`` prints ``ready``, then, for the first
datagram, ``got <payload> src_qp=<n> from=<IPv4 source> to=<IPv4 destination>`` (its GRH).
``send GROUP TEXT``: one datagram of TEXT to the group, QPN 0xFFFFFF; prints ``sent <status>``."""

from __future__ import annotations

import ipaddress
import sys

from pyroce.verbs.addr import GID
from tests.test_ud_datapath import GRH, RECV_AT, ah_to, post_recvs, send, ud_endpoint


def main(mode: str, group: str, text: str = "") -> None:
    ep = ud_endpoint()
    mgid = GID(f"::ffff:{group}")
    if mode == "receive":
        ep.qp.attach_mcast(mgid, 0)
        post_recvs(ep, 1)
        print("ready", flush=True)
        (wc,) = ep.poll(deadline_s=30)
        header = ep.mr.read(GRH, RECV_AT)
        source, dest = (str(ipaddress.IPv4Address(header[at : at + 4])) for at in (32, 36))
        payload = ep.mr.read(wc.byte_len - GRH, RECV_AT + GRH).decode()
        print(f"got {payload} src_qp={wc.src_qp} from={source} to={dest}", flush=True)
    else:
        ep.mr.write(text.encode(), len(text), 0)
        send(ep, ah_to(ep, mgid.raw), 0xFFFFFF, len(text))
        (wc,) = ep.poll()
        print(f"sent {wc.status} qpn={ep.qp.qp_num}", flush=True)
    ep.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
