"""Extended completion queues (pyverbs ``cq.pyx``): ``CqInitAttrEx``, ``PollCqAttr``, ``CQEX``.

``CQEX`` is a ``CQ`` (one ring, one CQE decoder): ``start_poll``/``poll_next`` step through the
same completions ``CQ.poll`` returns, one at a time, read field by field; ``end_poll`` publishes
the consumer index, as libmlx5's ``mlx5_end_poll`` does. Like ``ibv_cq_ex_to_cq``, a CQEX works
wherever a CQ does (a QP's send or receive CQ, ``poll``).
"""

from __future__ import annotations

import errno

from pyroce.verbs.cq import CQ, WC, CompChannel
from pyroce.verbs.device import Context
from pyroce.verbs.enums import IBV_WC_STANDARD_FLAGS
from pyroce.verbs.pyverbs_error import PyverbsRDMAError


class CqInitAttrEx:
    """``ibv_cq_init_attr_ex``; ``wc_flags`` are ``ibv_create_cq_wc_flags`` bits."""

    def __init__(self, cqe: int = 100, channel: CompChannel | None = None, comp_vector: int = 0,
                 wc_flags: int = 0, comp_mask: int = 0, flags: int = 0, parent_domain: object = None) -> None:  # fmt: skip
        self.cqe = cqe
        self.comp_channel = channel
        self.comp_vector = comp_vector
        self.wc_flags = wc_flags
        self.comp_mask = comp_mask
        self.flags = flags
        self.parent_domain = parent_domain


class PollCqAttr:
    """``ibv_poll_cq_attr``: only ``comp_mask``, which must be 0."""

    def __init__(self) -> None:
        self.comp_mask = 0


def check_extended(wc_flags: int, parent_domain: bool) -> None:
    """EOPNOTSUPP for what rxe's ``rxe_create_cq_ex`` does not offer."""
    if wc_flags & ~IBV_WC_STANDARD_FLAGS:
        raise PyverbsRDMAError("Failed to create extended CQ: wc_flags beyond the standard fields", errno.EOPNOTSUPP)
    if parent_domain:
        raise PyverbsRDMAError("Failed to create extended CQ: no parent domains", errno.EOPNOTSUPP)


class CQEX(CQ):
    """``CQEX(ctx, CqInitAttrEx)``. ``wc_flags`` beyond what rxe offers (the standard fields:
    byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits) are EOPNOTSUPP at creation, as
    rxe's ``rxe_create_cq_ex`` answers; the timestamp, cvlan, flow tag and tag-matching readers
    are EOPNOTSUPP for the same reason."""

    def __init__(self, context: Context, init_attr: CqInitAttrEx | None = None) -> None:
        attr = init_attr if init_attr is not None else CqInitAttrEx()
        check_extended(attr.wc_flags, attr.parent_domain is not None)
        super().__init__(context, attr.cqe, None, attr.comp_channel, attr.comp_vector)
        self.wc_flags = attr.wc_flags
        self._current: WC | None = None

    def start_poll(self, attr: PollCqAttr | None = None) -> int:
        """``ibv_start_poll``: 0 with the oldest completion current, or ENOENT when there is none
        (returned, as pyverbs returns it)."""
        self._check_open()
        self.reader.poll(0)  # a look: lets the engine run if the ring is empty; _advance reads it
        return self._advance()

    def poll_next(self) -> int:
        """``ibv_next_poll``: 0 with the next completion current, or ENOENT."""
        self._check_open()
        return self._advance()

    def end_poll(self) -> None:
        """``ibv_end_poll``: the completions read are handed back to the NIC."""
        self._check_open()
        self._current = None
        self.reader.publish()

    def _advance(self) -> int:
        self._current = self.reader.next_wc()
        return 0 if self._current is not None else errno.ENOENT

    def _wc_now(self) -> WC:
        if self._current is None:
            raise PyverbsRDMAError("No current completion: start_poll first", errno.EINVAL)
        return self._current

    @property
    def status(self) -> int:
        return self._wc_now().status

    @status.setter
    def status(self, value: int) -> None:
        self._wc_now().status = value

    @property
    def wr_id(self) -> int:
        return self._wc_now().wr_id

    @wr_id.setter
    def wr_id(self, value: int) -> None:
        self._wc_now().wr_id = value

    def read_opcode(self) -> int:
        return self._wc_now().opcode

    def read_vendor_err(self) -> int:
        return self._wc_now().vendor_err

    def read_byte_len(self) -> int:
        return self._wc_now().byte_len

    def read_imm_data(self) -> int:
        return self._wc_now().imm_data

    def read_qp_num(self) -> int:
        return self._wc_now().qp_num

    def read_src_qp(self) -> int:
        return self._wc_now().src_qp

    def read_wc_flags(self) -> int:
        return self._wc_now().wc_flags

    def read_slid(self) -> int:
        return self._wc_now().slid

    def read_sl(self) -> int:
        return self._wc_now().sl

    def read_dlid_path_bits(self) -> int:
        return self._wc_now().dlid_path_bits

    def read_timestamp(self) -> int:
        raise _not_offered("completion timestamps")

    def read_completion_wallclock_ns(self) -> int:
        raise _not_offered("wallclock timestamps")

    def read_cvlan(self) -> int:
        raise _not_offered("VLANs")

    def read_flow_tag(self) -> int:
        raise _not_offered("flow tags")

    def read_tm_info(self) -> object:
        raise _not_offered("tag matching")


def _not_offered(what: str) -> PyverbsRDMAError:
    return PyverbsRDMAError(f"The CQ has no {what} (not in rxe's wc_flags)", errno.EOPNOTSUPP)
