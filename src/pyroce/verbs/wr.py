"""Work requests (pyverbs ``wr.pyx``): ``SGE``, ``SendWR``, ``RecvWR``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyroce.verbs.enums import ibv_send_flags, ibv_wr_opcode

if TYPE_CHECKING:
    from pyroce.verbs.ah import AH
    from pyroce.verbs.mw import MW, MWBindInfo


_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_SGE_FIELDS = (("addr", _U64), ("length", _U32), ("lkey", _U32))
_SEND_FIELDS = (("remote_addr", _U64), ("rkey", _U32), ("compare_add", _U64), ("swap", _U64), ("imm_data", _U32))


def overflow_in(wr: SendWR | RecvWR) -> OverflowError | None:
    """The first of ``wr``'s values its C field cannot hold, as the OverflowError pyverbs'
    Cython classes raise when such a value is set. pyroce's WRs hold any int, so the post looks
    for it when writing the WQE failed: no check on the fast path."""
    named = [(f"sg[{index}].{name}", getattr(sge, name), top)
             for index, sge in enumerate(wr.sg) for name, top in _SGE_FIELDS]  # fmt: skip
    if isinstance(wr, SendWR):
        named += [(name, getattr(wr, name), top) for name, top in _SEND_FIELDS]
    for name, value, top in named:
        if not 0 <= value <= top:
            return OverflowError(f"{name} {value} does not fit a {'uint32_t' if top == _U32 else 'uint64_t'}")
    return None


def inc_rkey(rkey: int) -> int:
    """``ibv_inc_rkey``: the next key byte, so a stale key of the previous bind fails."""
    return (rkey & ~0xFF) | ((rkey + 1) & 0xFF)


class SGE:
    """``SGE(addr, length, lkey)``: ``length`` bytes at ``addr`` in the MR of ``lkey``."""

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr = addr
        self.length = length
        self.lkey = lkey

    def __repr__(self) -> str:
        return f"SGE(addr=0x{self.addr:x}, length={self.length}, lkey=0x{self.lkey:x})"


class RecvWR:
    def __init__(self, wr_id: int = 0, num_sge: int | None = None, sg: list[SGE] | None = None,
                 next_wr: RecvWR | None = None) -> None:  # fmt: skip
        self.wr_id = wr_id
        self.sg = list(sg or [])
        self.num_sge = len(self.sg) if num_sge is None else num_sge
        self.next_wr = next_wr


class SendWR:
    def __init__(self, wr_id: int = 0, opcode: int = ibv_wr_opcode.IBV_WR_SEND, num_sge: int | None = None,
                 imm_data: int = 0, sg: list[SGE] | None = None,
                 send_flags: int = ibv_send_flags.IBV_SEND_SIGNALED, next_wr: SendWR | None = None) -> None:  # fmt: skip
        self.wr_id = wr_id
        self.opcode = opcode
        self.sg = list(sg or [])
        self.num_sge = len(self.sg) if num_sge is None else num_sge
        self.imm_data = imm_data
        self.send_flags = send_flags
        self.next_wr = next_wr
        self.rkey = 0
        self.remote_addr = 0
        self.compare_add = 0
        self.swap = 0
        self.bind_mw: tuple[MW, int, MWBindInfo] | None = None  # window, its new rkey, range
        self.ah: AH | None = None  # a UD send's destination, with remote_qpn and remote_qkey
        self.remote_qpn = 0
        self.remote_qkey = 0

    def set_wr_ud(self, ah: AH, rqpn: int, rqkey: int) -> None:
        """A UD send to QP ``rqpn`` behind ``ah``, with Q_Key ``rqkey`` (top bit set: the
        sending QP's own)."""
        self.ah, self.remote_qpn, self.remote_qkey = ah, rqpn, rqkey

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr, self.compare_add, self.swap = rkey, addr, compare_add, swap

    def set_bind_wr(self, mw: MW, bind_info: MWBindInfo) -> None:
        """An IBV_WR_BIND_MW: ``mw`` takes ``bind_info``'s range with the next key (ibv_inc_rkey)."""
        self.bind_mw = (mw, inc_rkey(mw.rkey), bind_info)

    @property
    def invalidate_rkey(self) -> int:
        return self.imm_data

    @invalidate_rkey.setter
    def invalidate_rkey(self, rkey: int) -> None:
        self.imm_data = rkey
