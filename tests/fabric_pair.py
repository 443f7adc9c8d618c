"""Two RC QPs on the in-memory fabric with their own memory: the sans-IO transport driven
packet by packet, in virtual time (style.md: ``transfer``, ``drop``, clock from 0.0)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyroce.link.faults import FaultConfig
from pyroce.nic.memory import MemoryRegion, MrTable
from pyroce.testbench.fabric import Fabric
from pyroce.transport import Access, Completion, QpConfig, QpState, RcQp

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
PDN = 1


@dataclass
class Node:
    qp: RcQp
    memory: MrTable
    buf: bytearray
    mr: MemoryRegion
    done: list[Completion] = field(default_factory=list)

    def drain(self) -> list[Completion]:
        self.done += self.qp.completions
        self.qp.completions.clear()
        return self.done


def make_node(qpn: int, dqpn: int, size: int, base: int, **config: int) -> Node:
    memory = MrTable()
    buf = bytearray(size)
    mr = memory.register(PDN, memoryview(buf), base, ALL)
    settings = {"pmtu": 1024, "access": ALL, "max_rd_atomic": 4, "max_dest_rd_atomic": 4, "timeout": 10,
                "retry_cnt": 7, "rnr_retry": 7, "min_rnr_timer": 1, "sq_psn": 0xFFFF00, "rq_psn": 0xFFFF00}  # fmt: skip
    settings.update(config)
    qp = RcQp(QpConfig(qpn=qpn, pdn=PDN, dqpn=dqpn, **settings), memory)  # type: ignore[arg-type]
    for state in (QpState.INIT, QpState.RTR, QpState.RTS):
        qp.modify(state)
    return Node(qp, memory, buf, mr)


def fabric_pair(faults: FaultConfig | None = None, size: int = 1 << 20, **config: int) -> tuple[Fabric, Node, Node]:
    fabric = Fabric(faults)
    a = make_node(0x11, 0x22, size, 0x10000, **config)
    b = make_node(0x22, 0x11, size, 0x9000000, **config)
    fabric.attach(a.qp)
    fabric.attach(b.qp)
    return fabric, a, b
