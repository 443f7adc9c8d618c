"""pyroce.transport: the sans-IO RC transport (IBA chapter 9, rxe's req/resp/comp roles).

Rule 1: no I/O. Nothing here touches a socket, a thread or a clock; time comes in as a
``now`` argument (seconds, float) and everything that leaves is returned: packets to send,
completions, the next timer deadline. So every protocol behaviour can be driven packet by
packet in a test.
Rule 2: memory is reached only through the ``MemoryTable`` passed in, which checks key, PD,
access and bounds before it hands out a view; the transport never forms an address itself.
Rule 3: this package imports only ``pyroce.wire`` and the shared vocabulary, ``pyroce.ib``.
"""

from pyroce.ib.enums import Access, QpState, WcFlag, WcOpcode, WcStatus
from pyroce.transport.completion import Completion
from pyroce.transport.memory import MemFault, MemoryTable
from pyroce.transport.rc import QpConfig, RcQp
from pyroce.transport.work import RecvWork, SendWork, Sge, WorkOp
