"""Hypothesis strategies for RoCEv2 packet values: every opcode, every header field."""

from __future__ import annotations

from hypothesis import strategies as st

from pyroce.wire import (
    BTH,
    OPCODES,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Deth,
    Feth,
    OpFlag,
    Packet,
    PayloadRule,
    Reth,
)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u24 = st.integers(0, 0xFFFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)

SUPPORTED = [info for info in OPCODES if info is not None]

HEADER_VALUES = {
    OpFlag.DETH: st.builds(Deth, u32, u24),
    OpFlag.FETH: st.builds(Feth, st.integers(0, 15), st.integers(0, 3)),
    OpFlag.RETH: st.builds(Reth, u64, u32, u32),
    OpFlag.ATMETH: st.builds(AtomicEth, u64, u32, u64, u64),
    OpFlag.AETH: st.builds(Aeth, u8, u24),
    OpFlag.ATMACK: st.builds(AtomicAckEth, u64),
    OpFlag.IMMDT: u32,
    OpFlag.IETH: u32,
    OpFlag.CNP: st.binary(min_size=16, max_size=16),
}
FIELD = {
    OpFlag.DETH: "deth",
    OpFlag.FETH: "feth",
    OpFlag.RETH: "reth",
    OpFlag.ATMETH: "atomiceth",
    OpFlag.AETH: "aeth",
    OpFlag.ATMACK: "atomicacketh",
    OpFlag.IMMDT: "immdt",
    OpFlag.IETH: "ieth",
    OpFlag.CNP: "cnp",
}


def bths(opcode: int) -> st.SearchStrategy[BTH]:
    return st.builds(
        BTH, st.just(opcode), u24, u24, st.booleans(), st.booleans(), st.booleans(), u16, st.booleans(), st.booleans()
    )


def payloads(rule: PayloadRule) -> st.SearchStrategy[bytes]:
    if rule is PayloadRule.NONE:
        return st.just(b"")
    if rule is PayloadRule.FIXED8:
        return st.binary(min_size=8, max_size=8)
    return st.binary(max_size=300)


@st.composite
def packets(draw, opcodes=SUPPORTED) -> Packet:
    """A valid packet of any supported opcode with arbitrary field values."""
    info = draw(st.sampled_from(opcodes))
    headers = {FIELD[flag]: draw(HEADER_VALUES[flag]) for flag, _ in info.offsets}
    return Packet(draw(bths(info.opcode)), draw(payloads(info.payload)), **headers)
