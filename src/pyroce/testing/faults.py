"""Fault plans at the verbs level: make the NIC or a verb fail on purpose, so an application's
error paths run in its tests (a CQ overrun, an RNR storm, a port going down, a verb that
returns ENOMEM) with the real completions, statuses, reasons and async events.

    plan = FaultPlan(ctx.device, seed=7)
    plan.fail_verb("post_send", errno.ENOMEM, nth=3)        # the 3rd post_send raises ENOMEM
    plan.fail_verb("reg_mr", errno.ENOMEM, probability=0.2)  # each reg_mr fails 1 time in 5
    plan.force_rnr(qp, count=2)    # the next two SENDs to this QP are refused: receiver not ready
    plan.qp_error(qp)              # the QP goes to ERROR now (QP_FATAL, oldest WR fails)
    plan.cq_overrun(cq)            # the next completion for this CQ is lost (CQ_ERR)
    plan.port_down(); plan.port_up()
    plan.clear()

Verbs are named as in libibverbs: ``post_send``, ``post_recv``, ``reg_mr``, ``create_cq``,
``create_qp``, ``modify_qp``. Probabilistic rules draw from the plan's seed in call order: the
same seed and the same calls give the same faults in the same order.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import NamedTuple

from pyroce.nic.device import NicDevice
from pyroce.verbs.cq import CQ
from pyroce.verbs.qp import QP

VERBS = frozenset({"post_send", "post_recv", "reg_mr", "create_cq", "create_qp", "modify_qp"})


class VerbRule(NamedTuple):
    """Fail calls of ``verb`` with ``errno``: the ``nth`` call (1-based), or each call with
    ``probability``; at most ``times`` times (None: no limit)."""

    verb: str
    errno: int
    nth: int | None
    probability: float
    times: int | None


class FaultPlan:
    """Faults for one device (the ``NicDevice`` every context of pyroce0 in this process shares)."""

    def __init__(self, device: NicDevice, seed: int = 0) -> None:
        self.device = device
        self.rng = random.Random(seed)
        self.rules: list[VerbRule] = []
        self.calls: Counter[str] = Counter()  # calls seen per verb
        self.injected: list[tuple[str, int, int]] = []  # (verb, call number, errno) in order
        device.verb_faults = self._verb

    def fail_verb(self, verb: str, errno: int, *, nth: int | None = None, probability: float = 0.0,
                  times: int | None = None) -> None:  # fmt: skip
        if verb not in VERBS:
            raise ValueError(f"no verb {verb!r} to fail (one of {', '.join(sorted(VERBS))})")
        if (nth is None) == (not probability):
            raise ValueError("give either nth (the call to fail) or a probability")
        self.rules.append(VerbRule(verb, errno, nth, probability, times))

    def force_rnr(self, qp: QP, count: int = 1) -> None:
        self.device.inject_rnr(qp.qp_num, count)

    def qp_error(self, qp: QP, detail: str = "a fault plan moved the QP to the error state") -> None:
        self.device.inject_qp_error(qp.qp_num, detail)

    def cq_overrun(self, cq: CQ, count: int = 1) -> None:
        self.device.inject_cq_overrun(cq.hw, count)

    def port_down(self) -> None:
        self.device.set_port_state(False)

    def port_up(self) -> None:
        self.device.set_port_state(True)

    def clear(self) -> None:
        """No more verb faults, and the port back up."""
        self.rules.clear()
        self.device.verb_faults = None
        self.port_up()

    def _verb(self, verb: str) -> int:
        """The errno this call of ``verb`` fails with, or 0."""
        self.calls[verb] += 1
        call = self.calls[verb]
        for index, rule in enumerate(self.rules):
            if rule.verb != verb or rule.times == 0:
                continue
            hit = call == rule.nth if rule.nth is not None else self.rng.random() < rule.probability
            if hit:
                if rule.times is not None:
                    self.rules[index] = rule._replace(times=rule.times - 1)
                self.injected.append((verb, call, rule.errno))
                return rule.errno
        return 0
