"""A Python program on the shared NIC for tests (``PYROCE_NIC=shared`` in its environment): an
RC endpoint that prints its numbers, connects to the peer numbers it reads, and then obeys one
line at a time: ``write`` (its pid, as 8 bytes, RDMA-written to the peer's MR; prints the WC
status), ``show`` (the first 8 bytes of its own MR, as an int), ``recv`` (posts a receive, says
``posted``, polls until it completes; prints its status and the NIC's ``poller_wakeups``), ``send``
(8 bytes; prints the WC status), ``exit``."""

from __future__ import annotations

import json
import os
import sys

from pyroce.apps.rc_endpoint import PeerInfo, RcEndpoint
from pyroce.verbs.enums import ibv_wr_opcode
from pyroce.verbs.wr import SGE, RecvWR, SendWR


def main() -> None:
    ep = RcEndpoint.open(1 << 16)
    print(json.dumps({"pid": os.getpid(), "qpn": ep.qp.qp_num, "nic": ep.ctx.nic,
                      "info": [ep.info().gid.hex(), *ep.info()[1:]]}), flush=True)  # fmt: skip
    fields = json.loads(sys.stdin.readline())
    peer = PeerInfo(bytes.fromhex(fields[0]), *fields[1:])
    ep.connect(peer, timeout=8)  # 1 ms: a peer that is gone fails soon
    print("connected", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "write":
            ep.mr.write(os.getpid().to_bytes(8, "little"), 8)
            wr = SendWR(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, 8, ep.mr.lkey)])
            wr.set_wr_rdma(peer.rkey, peer.addr)
            ep.qp.post_send(wr)
            print("status", ep.poll(1, deadline_s=60)[0].status, flush=True)
        elif command == "recv":
            ep.qp.post_recv(RecvWR(wr_id=2, sg=[SGE(ep.mr.buf + 64, 8, ep.mr.lkey)]))
            print("posted", flush=True)
            status = ep.poll(1, deadline_s=60)[0].status
            print("received", status, ep.ctx.device.stats().get("poller_wakeups", 0), flush=True)
        elif command == "send":
            ep.qp.post_send(SendWR(wr_id=3, opcode=ibv_wr_opcode.IBV_WR_SEND, sg=[SGE(ep.mr.buf, 8, ep.mr.lkey)]))
            print("status", ep.poll(1, deadline_s=60)[0].status, flush=True)
        elif command == "show":
            print("value", int.from_bytes(ep.mr.read(8, 0), "little"), flush=True)
        elif command == "exit":
            break
    ep.close()


if __name__ == "__main__":
    main()
