"""The opcode table against IBA table 35 and rocev2.md."""

from __future__ import annotations

from pyroce.wire import OPCODES, Opcode, OpFlag, PayloadRule, Transport, opcode_name
from pyroce.wire.opcodes import Flag

F = OpFlag


def info(name: str):
    return OPCODES[Opcode[name]]


def test_names_are_generated_from_transport_and_operation():
    assert Opcode.RC_SEND_FIRST == 0x00 and Opcode.UC_SEND_FIRST == 0x20
    assert Opcode.UD_SEND_ONLY == 0x64 and Opcode.UD_SEND_ONLY_WITH_IMMEDIATE == 0x65
    assert Opcode.RC_ACKNOWLEDGE == 0x11 and Opcode.RC_FETCH_ADD == 0x14 and Opcode.CNP == 0x81
    assert opcode_name(0x0C) == "RC_RDMA_READ_REQUEST"
    assert opcode_name(0x15) == "UNKNOWN_0x15"
    assert opcode_name(0x40) == "UNKNOWN_0x40"  # RD is not spoken
    assert info("UC_RDMA_WRITE_ONLY").transport is Transport.UC


def test_uc_has_only_send_and_write():
    uc = [i for i in OPCODES if i is not None and i.transport is Transport.UC]
    assert len(uc) == 12
    assert all(i.flags & (F.SEND | F.WRITE) for i in uc)


def test_header_lengths_and_offsets():
    assert info("RC_SEND_MIDDLE").hdr_len == 12
    assert info("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE").offsets == ((F.RETH, 12), (F.IMMDT, 28))
    assert info("RC_ATOMIC_ACKNOWLEDGE").offsets == ((F.AETH, 12), (F.ATMACK, 16))
    assert info("RC_COMPARE_SWAP").hdr_len == 40
    assert info("UD_SEND_ONLY_WITH_IMMEDIATE").offsets == ((F.DETH, 12), (F.IMMDT, 20))
    assert info("RC_FLUSH").offsets == ((F.FETH, 12), (F.RETH, 16))
    assert info("CNP").hdr_len == 28


def test_message_position_flags():
    for i in OPCODES:
        if i is None or not i.flags & (F.REQ | F.ACK):
            continue
        first = bool(i.flags & F.START)
        last = bool(i.flags & F.END)
        middle = bool(i.flags & F.MIDDLE)
        assert middle != (first or last), i.name
        suffix = i.name.rsplit("_", 1)[-1]
        if suffix == "FIRST":
            assert first and not last and i.payload is PayloadRule.FULL
        if suffix == "MIDDLE":
            assert i.payload is PayloadRule.FULL
        if "_LAST" in i.name:
            assert last and not first and i.payload is PayloadRule.TAIL
        if "_ONLY" in i.name:
            assert first and last


def test_receive_wqe_consumers():
    """Sends and WRITE with immediate consume a receive WQE; plain WRITEs do not."""
    consumers = {i.name for i in OPCODES if i is not None and i.flags & F.RWR}
    assert "RC_SEND_FIRST" in consumers and "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE" in consumers
    assert "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE" in consumers and "UD_SEND_ONLY" in consumers
    assert "RC_RDMA_WRITE_ONLY" not in consumers and "RC_SEND_MIDDLE" not in consumers


def test_payload_rules():
    assert PayloadRule.FULL.allows(1024, 1024) and not PayloadRule.FULL.allows(1023, 1024)
    assert PayloadRule.TAIL.allows(1, 1024) and not PayloadRule.TAIL.allows(0, 1024)
    assert not PayloadRule.TAIL.allows(1025, 1024)
    assert PayloadRule.ANY.allows(0, 256) and not PayloadRule.ANY.allows(257, 256)
    assert PayloadRule.NONE.allows(0, 4096) and not PayloadRule.NONE.allows(1, 4096)
    assert PayloadRule.FIXED8.allows(8, 256) and not PayloadRule.FIXED8.allows(4, 256)


def test_flag_and_opflag_are_the_same_bits() -> None:
    """``Flag`` (plain ints for per-packet code) and ``OpFlag`` (the IntFlag of the table)
    name the same bits, every one of them distinct."""
    plain = {name: value for name, value in vars(Flag).items() if name.isupper()}
    assert plain == {name: int(member) for name, member in OpFlag.__members__.items()}
    assert len(set(plain.values())) == len(plain)
