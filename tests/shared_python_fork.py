"""``fork()`` on the shared NIC (``PYROCE_NIC=shared``): the parent's connected pair works
before and after; the child's use of the parent's objects is EIO in one line, and the child's
own Context (a connection of its own) moves data. Prints what each side saw."""

from __future__ import annotations

import os
import sys

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.verbs.enums import ibv_wr_opcode
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE, SendWR


def pair() -> tuple[RcEndpoint, RcEndpoint]:
    a, b = RcEndpoint.open(4096), RcEndpoint.open(4096)
    a.connect(b.info())
    b.connect(a.info())
    return a, b


def write(a: RcEndpoint, b: RcEndpoint, value: bytes) -> bytes:
    """``value`` RDMA-written from a's MR into b's; what b's MR then holds."""
    a.mr.write(value, len(value))
    wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg=[SGE(a.mr.buf, len(value), a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    status = a.poll(1)[0].status
    return f"{status} {b.mr.read(len(value), 0).decode()}".encode()


def main() -> None:
    a, b = pair()
    print("parent before", write(a, b, b"before").decode(), flush=True)
    child = os.fork()
    if child == 0:
        try:
            PD(a.ctx)
            print("child: the parent's context worked", flush=True)
        except PyverbsRDMAError as exc:
            print(f"child parent-object errno {exc.error_code} lines {len(str(exc).splitlines())}", flush=True)
        c, d = pair()
        print("child own", write(c, d, b"child!").decode(), flush=True)
        c.close()
        d.close()
        os._exit(0)
    _, status = os.waitpid(child, 0)
    print("child exit", os.waitstatus_to_exitcode(status), flush=True)
    print("parent after", write(a, b, b"after!").decode(), flush=True)
    a.close()
    b.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
