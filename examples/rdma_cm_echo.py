"""Two programs connected by IP address with rdma_cm, as most RDMA software connects: no QP
numbers exchanged by hand. pyverbs' ``cmid`` API, on pyroce.

    PYROCE_NIC=shared python examples/rdma_cm_echo.py server 127.0.0.1 7471   # one shell
    PYROCE_NIC=shared python examples/rdma_cm_echo.py client 127.0.0.1 7471   # another

With ``PYROCE_NIC=shared`` both programs use the host's one shared NIC, so the server listens
on "this host" (127.0.0.1) and the client names it, as with a real NIC; a C program such as
``pyroce run -- rdma_client -s 127.0.0.1`` can be the client too. The client sends a line,
the server sends it back reversed, and both disconnect.
"""

from __future__ import annotations

import sys

import pyroce.verbs.cm_enums as ce
import pyroce.verbs.enums as e
from pyroce.verbs.addrinfo import AddrInfo
from pyroce.verbs.cmid import CMID
from pyroce.verbs.qp import QPCap, QPInitAttr


def qp_attr() -> QPInitAttr:
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def server(address: str, port: str) -> None:
    listener = CMID(AddrInfo(src=address, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE),
                    qp_init_attr=qp_attr())  # fmt: skip
    listener.listen()
    print(f"listening on {address} port {port}", flush=True)
    conn = listener.get_request()  # a CONNECT_REQUEST: a new id for this connection
    mr = conn.reg_msgs(64)
    conn.post_recv(mr)
    conn.accept()
    got = mr.read(conn.get_recv_comp().byte_len, 0)
    print(f"received {got.decode()!r}")
    mr.write(got[::-1], len(got))
    conn.post_send(mr, length=len(got))
    conn.get_send_comp()
    conn.disconnect()
    conn.close()
    listener.close()


def client(address: str, port: str) -> None:
    cmid = CMID(AddrInfo(dst=address, dst_service=port, port_space=ce.RDMA_PS_TCP), qp_init_attr=qp_attr())
    cmid.connect()  # address and route resolved, REQ, REP, RTU: the QP is connected
    mr = cmid.reg_msgs(64)
    cmid.post_recv(mr)
    message = b"hello over rdma_cm"
    mr.write(message, len(message))
    cmid.post_send(mr, length=len(message))
    cmid.get_send_comp()
    echo = mr.read(cmid.get_recv_comp().byte_len, 0)
    print(f"the server sent back {echo.decode()!r}")
    cmid.disconnect()
    cmid.close()


if __name__ == "__main__":
    role, host, service = sys.argv[1:4]
    {"server": server, "client": client}[role](host, service)
