"""A program whose pyroce0 writes to a peer process's (``tests.peer_process``) in a loop, over
real UDP (GSO sends, GRO receives), until its stdin closes or a minute passes: the device
``pyroce capture`` records in the tests. Prints ``ready`` once connected."""

from __future__ import annotations

import select
import sys
import time

from pyroce.verbs.enums import ibv_wr_opcode
from pyroce.verbs.wr import SGE, SendWR
from tests.peer_process import peer_process

REGION = 1 << 20
WRITE_SIZE = 16384  # four 4096-byte packets: one GSO send
RUN_FOR_S = 60.0


def main() -> None:
    with peer_process(REGION) as (ep, peer, _):
        print("ready", flush=True)
        end = time.monotonic() + RUN_FOR_S
        while time.monotonic() < end and not select.select([sys.stdin], [], [], 0)[0]:
            wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(ep.mr.buf, WRITE_SIZE, ep.mr.lkey)])
            wr.set_wr_rdma(peer.rkey, peer.addr)
            ep.qp.post_send(wr)
            ep.poll()
            time.sleep(0.001)


if __name__ == "__main__":
    main()
