"""Fault injection: a seeded decision, per datagram, to drop, duplicate, corrupt or delay it.

The same ``FaultInjector`` sits on the in-memory fabric (tests) and on the UDP link (two
processes, ``pyroce demo --loss ...``), so a misbehaving network can be replayed exactly from a
seed. A delayed datagram is overtaken by the ones after it: that is how reordering happens.
Scripted rules hit one packet exactly ("drop the 3rd RC_RDMA_WRITE_MIDDLE").
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Final, NamedTuple

from pyroce.ib.counters import Counters
from pyroce.wire.opcodes import opcode_name

ACTIONS: Final = ("drop", "duplicate", "corrupt", "delay")
REORDER_DELAY_S: Final = 0.0005  # how long a reordered datagram is held back


class ScriptRule(NamedTuple):
    """Apply ``action`` to the ``nth`` (1-based) datagram whose opcode is named ``opcode``."""

    action: str
    nth: int
    opcode: str

    @classmethod
    def parse(cls, text: str) -> ScriptRule:
        """``"drop:3:RC_RDMA_WRITE_MIDDLE"``."""
        action, nth, opcode = text.split(":")
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r} (one of {', '.join(ACTIONS)})")
        return cls(action, int(nth), opcode)


class FaultConfig(NamedTuple):
    """Probabilities per datagram (0..1), the seed, and scripted rules."""

    loss: float = 0.0
    reorder: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    seed: int = 0
    script: tuple[ScriptRule, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.loss or self.reorder or self.duplicate or self.corrupt or self.script)

    @classmethod
    def parse(cls, text: str) -> FaultConfig:
        """``"loss=0.05,reorder=0.05,duplicate=0.01,corrupt=0.01,seed=7,script=drop:3:RC_SEND_MIDDLE"``."""
        fields: dict[str, object] = {}
        rules = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, _, value = item.partition("=")
            if key == "script":
                rules.append(ScriptRule.parse(value))
            elif key == "seed":
                fields[key] = int(value)
            elif key in cls._fields:
                probability = float(value)
                if not 0.0 <= probability <= 1.0:
                    raise ValueError(f"{key}={value} is not a probability")
                fields[key] = probability
            else:
                raise ValueError(f"unknown fault {key!r}")
        return cls(**fields, script=tuple(rules))  # type: ignore[arg-type]


class FaultInjector:
    """Decides the fate of each datagram; ``counters`` says what it did."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.random = random.Random(config.seed)
        self.seen: Counter[str] = Counter()
        self.counters: Counter[str] = Counters()

    def apply(self, data: bytes) -> list[tuple[float, bytes]]:
        """What to send for ``data`` (a UDP payload): (delay in seconds, bytes) pairs; none
        when it is dropped."""
        config = self.config
        name = opcode_name(data[0]) if data else "EMPTY"
        self.seen[name] += 1
        for rule in config.script:
            if rule.opcode == name and rule.nth == self.seen[name]:
                return self._act(rule.action, data)
        draw = self.random.random
        if draw() < config.loss:
            return self._act("drop", data)
        if draw() < config.corrupt:
            return self._act("corrupt", data)
        if draw() < config.duplicate:
            return self._act("duplicate", data)
        if draw() < config.reorder:
            return self._act("delay", data)
        return [(0.0, data)]

    def _act(self, action: str, data: bytes) -> list[tuple[float, bytes]]:
        self.counters[action] += 1
        if action == "drop":
            return []
        if action == "duplicate":
            return [(0.0, data), (0.0, data)]
        if action == "delay":
            return [(REORDER_DELAY_S, data)]
        corrupted = bytearray(data)
        bit = self.random.randrange(len(corrupted) * 8)
        corrupted[bit // 8] ^= 1 << (bit % 8)
        return [(0.0, bytes(corrupted))]
