"""rdma-core's ``Documentation/pyverbs.md`` examples as a user types them, on device ``argv[1]``
(the document's 'mlx5_0'): the Query GID example (index 3, RoCE v2 over IPv4 on a RoCE port),
the Addressing one (an AH on GID index 0) and the QP one (a UD QP's AH on GID index 3 and a
post_send; with the two fixes pyverbs itself needs: its AH takes ``attr=``, a SendWR an SGE). It prints what each got; the tests run it with pyroce's pyverbs and with Debian's."""

import sys

import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.wr as pwr
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

name = sys.argv[1]

# Query GID
ctx = d.Context(name=name)
gid = ctx.query_gid(port_num=1, index=3)
print("gid 3", gid)

# Addressing related objects
with d.Context(name=name) as ctx:
    port_number = 1
    gid_index = 0  # GID index 0 always exists and valid
    gid = ctx.query_gid(port_number, gid_index)
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index)
    ah_attr = AHAttr(gr=gr, is_global=1, port_num=port_number)
    with PD(ctx) as pd:
        ah = AH(pd, attr=ah_attr)
    print("ah on gid 0", gid)

# QP
ctx = d.Context(name=name)
pd = PD(ctx)
cq = CQ(ctx, 100, None, None, 0)
cap = QPCap(100, 10, 1, 1, 0)
qia = QPInitAttr(cap=cap, qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq)
# A UD QP will be in RTS if a QPAttr object is provided
udqp = QP(pd, qia, QPAttr())
port_num = 1
gid_index = 3  # Hard-coded for RoCE v2 interface
gid = ctx.query_gid(port_num, gid_index)
gr = GlobalRoute(dgid=gid, sgid_index=gid_index)
ah_attr = AHAttr(gr=gr, is_global=1, port_num=port_num)
ah = AH(pd, attr=ah_attr)  # the document's AH(pd, ah_attr) is a TypeError in pyverbs itself
mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
wr = pwr.SendWR(num_sge=1, sg=[pwr.SGE(mr.buf, 8, mr.lkey)])  # the document's SendWR() has no SGE: pyverbs refuses it
wr.set_wr_ud(ah, 0x1101, 0)  # in real life, use real values
udqp.post_send(wr)
n, wcs = cq.poll()
while n == 0:
    n, wcs = cq.poll()
print("ud send on gid 3:", wcs[0].status)
