"""``pyroce corpus``: the golden corpus of RC exchanges, as a NIC developer replays it. Every
exchange's pcap decodes with every ICRC right, its JSON marks exactly the responder's packets as
expected, and each exchange shows the responder behaviour it is named for."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pyroce.sim.corpus import MR_SIZE, SCENARIOS
from pyroce.wire.framing import LINKTYPE_RAW, parse_frame
from pyroce.wire.pcap import PcapReader
from tests.cli import assert_one_line_error, pyroce


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    done = pyroce("corpus", str(folder))
    assert done.returncode == 0, done
    assert len(done.stdout.splitlines()) == len(SCENARIOS)
    return folder


def packets(corpus: Path, name: str) -> list[dict]:
    return json.loads((corpus / f"{name}.json").read_text())["packets"]


def expected(corpus: Path, name: str) -> list[str]:
    """The responder's packets: opcode, and the AETH's meaning where there is one."""
    return [" ".join(filter(None, (p["opcode"], p["headers"].get("aeth", {}).get("text"))))
            for p in packets(corpus, name) if p["direction"] == "expected"]  # fmt: skip


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_exchange_is_a_pcap_and_its_index(corpus: Path, name: str) -> None:
    index = json.loads((corpus / f"{name}.json").read_text())
    with (corpus / f"{name}.pcap").open("rb") as stream:
        frames = [parse_frame(record.data, LINKTYPE_RAW) for record in PcapReader(stream)]
    assert len(frames) == len(index["packets"]) > 0
    assert all(frame.icrc_ok for frame in frames)
    responder = index["setup"]["responder"]
    for packet, frame in zip(index["packets"], frames):
        assert packet["psn"] == frame.packet.bth.psn
        assert (packet["direction"] == "expected") == (packet["src"] == responder["address"])
        assert packet["qpn"] == (index["setup"]["requester"]["qpn"] if packet["direction"] == "expected"
                                 else responder["qpn"])  # fmt: skip
    assert index["description"]


def test_the_responders_answers(corpus: Path) -> None:
    assert expected(corpus, "rc_send") == ["RC_ACKNOWLEDGE ACK credits=31"]
    assert expected(corpus, "rc_write") == ["RC_ACKNOWLEDGE ACK credits=31"]
    assert [p["opcode"] for p in packets(corpus, "rc_write")].count("RC_RDMA_WRITE_MIDDLE") == 6
    assert [op.split()[0] for op in expected(corpus, "rc_read")] == [
        "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_MIDDLE",
        "RC_RDMA_READ_RESPONSE_LAST"]  # fmt: skip
    atomic_acks = [p for p in packets(corpus, "rc_atomics") if p["direction"] == "expected"]
    assert [p["headers"]["atomicacketh"]["orig"] for p in atomic_acks] == [0, 5]  # the add's old value, then the swap's
    assert expected(corpus, "rc_receiver_not_ready") == ["RC_ACKNOWLEDGE RNR_NAK timer=12 (0.64 ms)",
                                                         "RC_ACKNOWLEDGE ACK credits=31"]  # fmt: skip
    assert expected(corpus, "rc_bad_rkey") == ["RC_ACKNOWLEDGE NAK REMOTE_ACCESS_ERR"]
    assert expected(corpus, "rc_lost_packet") == ["RC_ACKNOWLEDGE NAK PSN_SEQ_ERR", "RC_ACKNOWLEDGE ACK credits=31"]
    lost = [p["psn"] - 0x100 for p in packets(corpus, "rc_lost_packet") if p["direction"] == "stimulus"]
    assert lost == [0, 2, 3, 1, 2, 3]  # PSN 1 lost on the wire, then sent again from it


def test_the_setup_says_what_the_responders_memory_holds_after(corpus: Path) -> None:
    written = bytes(i * 13 % 256 for i in range(8192)) + bytes(MR_SIZE - 8192)
    setup = json.loads((corpus / "rc_write.json").read_text())["setup"]
    assert setup["responder_memory_sha256"] == hashlib.sha256(written).hexdigest()
    assert setup["responder"]["mr"]["length"] == MR_SIZE


def test_an_unknown_exchange_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(pyroce("corpus", str(tmp_path), "rc_nothing"), "no exchange named rc_nothing")
