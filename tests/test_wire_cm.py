"""IB CM MADs: the golden REQ/REP/RTU/DREQ/DREP of rping and SIDR_REQ/SIDR_REP of udaddy (Linux
rxe) parse to the values tshark shows and encode back to the same 256 bytes; every message type
round-trips; and whatever bytes arrive, parsing raises a ``MalformedMad`` or returns a message."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyroce.wire import (
    BTH,
    CMA_HEADER_LEN,
    MAD_HEADER_LEN,
    MAD_LEN,
    PRIVATE_DATA_LEN,
    BadCmField,
    BadMadLength,
    BadMadVersion,
    CmaHeader,
    CmAttr,
    CmDrep,
    CmDreq,
    CmMra,
    CmMsgResponse,
    CmRej,
    CmRep,
    CmReq,
    CmRtu,
    CmSidrRep,
    CmSidrReq,
    Deth,
    Frame,
    IPv4Header,
    MadHeader,
    MadMethod,
    MalformedMad,
    MgmtClass,
    NotRoce,
    Opcode,
    Packet,
    PcapWriter,
    PortSpace,
    UdpHeader,
    UnknownAttribute,
    WrongMgmtClass,
    build_frame,
    encode_cm,
    parse_cm,
    parse_frame,
    port_space_and_port,
    service_id,
)

RPING_PORT = 7174  # rping's and udaddy's default port
RDMA_UDP_QKEY = 0x01234567


def frames(capture_records, name):
    linktype, records = capture_records[name]
    for record in records:
        try:
            yield parse_frame(record.data, linktype)
        except NotRoce:
            continue


def cm_mads(capture_records, name) -> list[bytes]:
    """The payloads of every packet to QP1 in a capture: the CM MADs."""
    return [bytes(f.packet.payload) for f in frames(capture_records, name) if f.packet.bth.dqpn == 1]


@pytest.mark.parametrize(
    "name, attrs",
    [
        ("rping.pcap", [CmAttr.REQ, CmAttr.REP, CmAttr.RTU, CmAttr.DREQ, CmAttr.DREP]),
        ("udaddy.pcap", [CmAttr.SIDR_REQ, CmAttr.SIDR_REP]),
    ],
)
def test_golden_mads_parse_and_encode_back_byte_for_byte(capture_records, name, attrs):
    mads = cm_mads(capture_records, name)
    parsed = [parse_cm(mad) for mad in mads]
    assert [header.attr_id for header, _ in parsed] == attrs
    for mad, (header, message) in zip(mads, parsed):
        assert (header.base_version, header.mgmt_class, header.class_version) == (1, MgmtClass.CM, 2)
        assert header.method == MadMethod.SEND and header.status == 0 and header.attr_mod == 0
        assert header.encode() == mad[:MAD_HEADER_LEN]
        assert encode_cm(header.tid, message) == mad
        if isinstance(message, CmReq | CmSidrReq):
            cma = CmaHeader.parse(message.private_data)
            assert cma.encode() == message.private_data[:CMA_HEADER_LEN]
            assert not any(message.private_data[CMA_HEADER_LEN:])


def test_rping_connection_fields(capture_records):
    """The values tshark 4.0 shows for rping's exchange (``tshark -r rping.pcap -V``)."""
    parsed = [parse_cm(mad) for mad in cm_mads(capture_records, "rping.pcap")]
    assert {header.tid for header, _ in parsed} == {0x2A0083376}  # a connection's messages share the REQ's TID
    req, rep, rtu, dreq, drep = (message for _, message in parsed)
    assert isinstance(req, CmReq) and isinstance(rep, CmRep)
    assert (req.local_comm_id, req.service_id, req.local_ca_guid) == (0x763308A0, 0x1061C06, 0x505400FFFE770003)
    assert (req.local_qkey, req.local_qpn, req.starting_psn) == (0, 0x14, 0x7B91F5)
    assert (req.responder_resources, req.initiator_depth, req.transport_service_type) == (1, 1, 0)
    assert (req.remote_cm_response_timeout, req.local_cm_response_timeout) == (0x14, 0x14)
    assert (req.retry_count, req.rnr_retry_count, req.max_cm_retries) == (7, 7, 15)
    assert (req.partition_key, req.path_mtu, req.srq, req.end_to_end_flow_control) == (0xFFFF, 3, False, False)
    assert (req.primary_local_lid, req.primary_remote_lid) == (0xFFFF, 0xFFFF)
    assert req.primary_local_gid == bytes(10) + b"\xff\xff" + bytes([10, 77, 0, 3])
    assert req.primary_remote_gid == bytes(10) + b"\xff\xff" + bytes([10, 77, 0, 2])
    assert (req.primary_traffic_class, req.primary_hop_limit, req.primary_sl) == (0, 0x40, 0)
    assert req.primary_local_ack_timeout == 0x13 and req.alternate_local_gid == bytes(16)
    assert (rep.local_comm_id, rep.remote_comm_id, rep.local_qpn) == (0x69F49A45, 0x763308A0, 0x14)
    assert (rep.starting_psn, rep.responder_resources, rep.initiator_depth) == (0x2FD57F, 1, 1)
    assert (rep.target_ack_delay, rep.failover_accepted, rep.rnr_retry_count) == (0x0F, 0, 7)
    assert rep.local_ca_guid == 0x505400FFFE770002
    assert rtu == CmRtu(local_comm_id=0x763308A0, remote_comm_id=0x69F49A45, private_data=bytes(224))
    assert dreq == CmDreq(local_comm_id=0x763308A0, remote_comm_id=0x69F49A45, remote_qpn=rep.local_qpn,
                          private_data=bytes(220))  # fmt: skip
    assert drep == CmDrep(local_comm_id=0x69F49A45, remote_comm_id=0x763308A0, private_data=bytes(224))
    # the REQ's service ID is rdma_cm's TCP port space with rping's port
    assert req.service_id == service_id(PortSpace.TCP, RPING_PORT)
    assert port_space_and_port(req.service_id) == (PortSpace.TCP, RPING_PORT)
    assert CmaHeader.parse(req.private_data) == CmaHeader(4, 46422, bytes([10, 77, 0, 3]), bytes([10, 77, 0, 2]))


def test_req_flow_label_gives_the_connections_udp_source_port(capture_records):
    """tshark 4.0 misreads the flow label word (it shows 0x00611); Linux's layout gives 0x61170,
    and the RC packets of the connection leave from the UDP port that flow label hashes to
    (``rdma_flow_label_to_udp_sport``), in both directions."""
    req = parse_cm(cm_mads(capture_records, "rping.pcap")[0])[1]
    assert isinstance(req, CmReq) and req.primary_flow_label == 0x61170 and req.primary_packet_rate == 0
    low = (req.primary_flow_label & 0x3FFF) ^ (req.primary_flow_label >> 14)
    sport = low | 0xC000
    rc = [f for f in frames(capture_records, "rping.pcap") if f.packet.bth.dqpn == req.local_qpn]
    assert len(rc) == 60 and {f.udp.sport for f in rc} == {sport}


def test_udaddy_sidr_fields(capture_records):
    (h1, sreq), (h2, srep) = map(parse_cm, cm_mads(capture_records, "udaddy.pcap"))
    assert isinstance(sreq, CmSidrReq) and isinstance(srep, CmSidrRep)
    assert h1.tid == h2.tid and sreq.request_id == srep.request_id
    assert sreq.service_id == srep.service_id == service_id(PortSpace.UDP, RPING_PORT) == 0x1111C06
    assert sreq.partition_key == 0xFFFF and srep.status == 0 and srep.additional_info == b""
    assert CmaHeader.parse(sreq.private_data).dst == bytes([10, 77, 0, 2])
    # the client then sends its datagrams to the QP and Q_Key the SIDR_REP gave
    data = [f.packet for f in frames(capture_records, "udaddy.pcap") if f.packet.bth.dqpn != 1]
    assert srep.qkey == RDMA_UDP_QKEY
    assert any(p.bth.dqpn == srep.qpn and p.deth.qkey == srep.qkey for p in data)


# Every field at every width it has on the wire (IBA tables 106-120, ibta_vol1_c12.h): an int is its
# width in bits, FLAG one bit, GID 16 bytes, a tuple a bytes field of at most that many bytes.
FLAG, GID = "flag", "gid"


def path(prefix: str) -> dict[str, object]:
    return {
        f"{prefix}_local_lid": 16, f"{prefix}_remote_lid": 16, f"{prefix}_local_gid": GID,
        f"{prefix}_remote_gid": GID, f"{prefix}_flow_label": 20, f"{prefix}_packet_rate": 6,
        f"{prefix}_traffic_class": 8, f"{prefix}_hop_limit": 8, f"{prefix}_sl": 4, f"{prefix}_subnet_local": FLAG,
        f"{prefix}_local_ack_timeout": 5,
    }  # fmt: skip


COMM_IDS = {"local_comm_id": 32, "remote_comm_id": 32}
FIELDS: dict[CmAttr, tuple[type, dict[str, object]]] = {
    CmAttr.REQ: (CmReq, {
        "local_comm_id": 32, "vendor_id": 24, "service_id": 64, "local_ca_guid": 64, "local_qkey": 32,
        "local_qpn": 24, "responder_resources": 8, "local_eecn": 24, "initiator_depth": 8, "remote_eecn": 24,
        "remote_cm_response_timeout": 5, "transport_service_type": 2, "end_to_end_flow_control": FLAG,
        "starting_psn": 24, "local_cm_response_timeout": 5, "retry_count": 3, "partition_key": 16, "path_mtu": 4,
        "rdc_exists": FLAG, "rnr_retry_count": 3, "max_cm_retries": 4, "srq": FLAG, "extended_transport_type": 3,
        **path("primary"), **path("alternate"), "sap_supported": FLAG, "private_data": (92,),
    }),
    CmAttr.MRA: (CmMra, {**COMM_IDS, "message_mraed": 2, "service_timeout": 5, "private_data": (222,)}),
    CmAttr.REJ: (CmRej, {**COMM_IDS, "message_rejected": 2, "reason": 16, "ari": (72,), "private_data": (148,)}),
    CmAttr.REP: (CmRep, {
        **COMM_IDS, "local_qkey": 32, "local_qpn": 24, "vendor_id": 24, "local_eecn": 24, "starting_psn": 24,
        "responder_resources": 8, "initiator_depth": 8, "target_ack_delay": 5, "failover_accepted": 2,
        "end_to_end_flow_control": FLAG, "rnr_retry_count": 3, "srq": FLAG, "local_ca_guid": 64,
        "private_data": (196,),
    }),
    CmAttr.RTU: (CmRtu, {**COMM_IDS, "private_data": (224,)}),
    CmAttr.DREQ: (CmDreq, {**COMM_IDS, "remote_qpn": 24, "private_data": (220,)}),
    CmAttr.DREP: (CmDrep, {**COMM_IDS, "private_data": (224,)}),
    CmAttr.SIDR_REQ: (CmSidrReq, {"request_id": 32, "partition_key": 16, "service_id": 64, "private_data": (216,)}),
    CmAttr.SIDR_REP: (CmSidrRep, {
        "request_id": 32, "status": 8, "vendor_id": 24, "qpn": 24, "service_id": 64, "qkey": 32,
        "additional_info": (72,), "private_data": (136,),
    }),
}  # fmt: skip


def strategy(spec: object) -> st.SearchStrategy:
    if spec == FLAG:
        return st.booleans()
    if spec == GID:
        return st.binary(min_size=16, max_size=16)
    if isinstance(spec, tuple):
        return st.binary(max_size=spec[0])
    assert isinstance(spec, int)
    return st.integers(0, (1 << spec) - 1)


def all_ones(spec: object) -> object:
    if spec == FLAG:
        return True
    if spec == GID:
        return b"\xff" * 16
    if isinstance(spec, tuple):
        return b"\xff" * spec[0]
    assert isinstance(spec, int)
    return (1 << spec) - 1


def zero(spec: object) -> object:
    return False if spec == FLAG else bytes(16) if spec == GID else b"" if isinstance(spec, tuple) else 0


messages = st.sampled_from(sorted(FIELDS)).flatmap(
    lambda attr: st.tuples(
        st.just(attr), st.builds(FIELDS[attr][0], **{name: strategy(spec) for name, spec in FIELDS[attr][1].items()})
    )
)


@pytest.mark.parametrize("attr", sorted(FIELDS), ids=lambda attr: attr.name)
def test_each_field_has_bits_of_its_own(attr):
    """Every field is listed here; all ones in one field sets at least its width of bits (REJ's ARI
    and SIDR_REP's info also set their length), and no two fields share a bit."""
    cls, fields = FIELDS[attr]
    assert list(fields) == [field.name for field in dataclasses.fields(cls)]
    empty = {name: zero(spec) for name, spec in fields.items()}
    assert encode_cm(0, cls(**empty))[MAD_HEADER_LEN:] == bytes(MAD_LEN - MAD_HEADER_LEN)
    seen = 0
    for name, spec in fields.items():
        bits = int.from_bytes(encode_cm(0, cls(**{**empty, name: all_ones(spec)}))[MAD_HEADER_LEN:], "big")
        width = 1 if spec == FLAG else 128 if spec == GID else 8 * spec[0] if isinstance(spec, tuple) else spec
        assert bits.bit_count() >= width, name
        assert not bits & seen, f"{attr.name}.{name} shares bits with an earlier field"
        seen |= bits


@settings(max_examples=500)
@given(messages, strategy(64))
def test_every_message_round_trips(attr_and_message, tid):
    attr, message = attr_and_message
    mad = encode_cm(tid, message)
    assert len(mad) == MAD_LEN
    header, parsed = parse_cm(mad)
    assert header == MadHeader(1, MgmtClass.CM, 2, MadMethod.SEND, 0, 0, tid, attr, 0)
    padded = message.private_data.ljust(PRIVATE_DATA_LEN[attr], b"\0")  # the wire carries no length
    assert parsed == dataclasses.replace(message, private_data=padded)
    assert encode_cm(tid, parsed) == mad


@pytest.mark.parametrize(
    "message",
    [
        CmRtu(local_comm_id=1, remote_comm_id=2, private_data=bytes(225)),
        CmReq(local_comm_id=1, service_id=2, local_qpn=1 << 24, starting_psn=0),
        CmReq(local_comm_id=1, service_id=2, local_qpn=3, starting_psn=0, primary_local_gid=bytes(4)),
        CmRej(local_comm_id=1, remote_comm_id=2, reason=28, ari=bytes(73)),
        CmSidrRep(request_id=-1),
        CmDrep(local_comm_id=1, remote_comm_id=2, private_data=5),  # type: ignore[arg-type]  # not 5 zero bytes
    ],
)
def test_values_that_do_not_fit_are_value_errors(message):
    with pytest.raises(ValueError, match=type(message).__name__):
        encode_cm(1, message)


def test_private_data_pads_to_its_fixed_length():
    mad = encode_cm(7, CmDrep(local_comm_id=1, remote_comm_id=2, private_data=b"bye"))
    assert mad[MAD_HEADER_LEN + 8 :] == b"bye" + bytes(221)
    assert {attr: PRIVATE_DATA_LEN[attr] for attr in FIELDS} == {
        CmAttr.REQ: 92, CmAttr.MRA: 222, CmAttr.REJ: 148, CmAttr.REP: 196, CmAttr.RTU: 224, CmAttr.DREQ: 220,
        CmAttr.DREP: 224, CmAttr.SIDR_REQ: 216, CmAttr.SIDR_REP: 136,
    }  # fmt: skip
    rej = parse_cm(encode_cm(1, CmRej(local_comm_id=1, remote_comm_id=2, reason=28, ari=b"\x01\x02")))[1]
    assert isinstance(rej, CmRej) and rej.ari == b"\x01\x02" and rej.message_rejected == CmMsgResponse.REQ


# Bad bytes: always the wire error, named for the problem.

GOOD = encode_cm(0x2A, CmReq(local_comm_id=1, service_id=0x1061C06, local_qpn=0x14, starting_psn=5))


@pytest.mark.parametrize("size", [*range(MAD_LEN), MAD_LEN + 1, 2 * MAD_LEN])
def test_every_truncation_and_extension_is_bad_mad_length(size):
    data = (GOOD * 2)[:size]
    with pytest.raises(BadMadLength, match=f"MAD is {size} bytes, must be 256"):
        parse_cm(data)


def patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    "data, error, reason",
    [
        (patched(GOOD, 0, b"\x02"), BadMadVersion, "MAD base version 2, expected 1"),
        (patched(GOOD, 1, b"\x03"), WrongMgmtClass, "MAD class 0x03 is not CM"),
        (patched(GOOD, 2, b"\x01"), BadMadVersion, "CM class version 1, expected 2"),
        (patched(GOOD, 16, b"\x00\x19"), UnknownAttribute, "CM attribute 0x0019"),  # LAP
        (patched(GOOD, 16, b"\x00\x01"), UnknownAttribute, "CM attribute 0x0001"),  # ClassPortInfo
        (patched(GOOD, 16, b"\x12\x34"), UnknownAttribute, "CM attribute 0x1234"),
        (patched(encode_cm(1, CmRej(local_comm_id=1, remote_comm_id=2, reason=1)), MAD_HEADER_LEN + 9, b"\xfe"),
         BadCmField, "REJ ari length 127 exceeds its 72 bytes"),
        (patched(encode_cm(1, CmSidrRep(request_id=1)), MAD_HEADER_LEN + 5, b"\x49"),
         BadCmField, "SIDR_REP additional_info length 73 exceeds its 72 bytes"),
    ],
)  # fmt: skip
def test_corruptions_raise_the_wire_error(data, error, reason):
    with pytest.raises(error, match=reason):
        parse_cm(data)


@settings(max_examples=1000)
@given(st.binary(min_size=MAD_LEN, max_size=MAD_LEN), st.sampled_from(sorted(FIELDS)))
def test_any_bytes_parse_or_raise_a_malformed_mad(data, attr):
    data = bytes([1, MgmtClass.CM, 2]) + data[3:16] + attr.to_bytes(2, "big") + data[18:]
    try:
        header, message = parse_cm(data)
    except MalformedMad:
        return
    assert header.attr_id == attr and encode_cm(header.tid, message)  # what parsed encodes again


def test_cma_header_codec():
    v6 = CmaHeader(6, 0xBEEF, bytes(range(16)), bytes(range(16, 32)))
    assert CmaHeader.parse(v6.encode() + b"rest") == v6
    v4 = CmaHeader(4, 7174, b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02")
    assert v4.encode() == b"\x00\x40\x1c\x06" + bytes(12) + v4.src + bytes(12) + v4.dst
    for data, reason in [
        (v4.encode()[:35], "private data of 35 bytes holds no 36-byte cma_hdr"),
        (b"\x01" + v4.encode()[1:], "cma_hdr version 1, expected 0"),
        (b"\x00\x50" + v4.encode()[2:], "cma_hdr IP version 5 is neither 4 nor 6"),
    ]:
        with pytest.raises(BadCmField, match=reason):
            CmaHeader.parse(data)
    with pytest.raises(ValueError, match="IPv4 wants 4-byte addresses"):
        CmaHeader(4, 1, bytes(16), bytes(16)).encode()


def test_service_ids():
    assert service_id(PortSpace.IB, 1) == 0x13F0001
    assert port_space_and_port(0x1110002) == (PortSpace.UDP, 2)
    for bad in (0x2000001, 0x1_0000_0106_0001, 0):
        with pytest.raises(ValueError, match="is not an rdma_cm IP service ID"):
            port_space_and_port(bad)
    assert service_id(PortSpace.IPOIB, 1) == 0x20001  # (ps << 16) + port for every space, as Linux's cma_get_service_id
    with pytest.raises(ValueError):
        service_id(0x0200, 1)  # not a port space
    with pytest.raises(ValueError, match="port 65536 does not fit 16 bits"):
        service_id(PortSpace.TCP, 65536)


@given(st.builds(MadHeader, *map(strategy, (8, 8, 8, 8, 16, 16, 64, 16, 32))))
def test_mad_header_round_trips(header):
    mad = header.encode() + bytes(MAD_LEN - MAD_HEADER_LEN)
    assert len(header.encode()) == MAD_HEADER_LEN and MadHeader.parse(mad) == header


def test_tshark_reads_what_we_encode(tmp_path: Path):
    """REJ, REP and DREQ with every small field set, as tshark's InfiniBand dissector reads them
    (the captures hold no REJ, and their REP flags are all zero)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    messages = [
        CmRej(local_comm_id=0x11, remote_comm_id=0x22, message_rejected=CmMsgResponse.REP, reason=28, ari=b"abc"),
        CmRep(local_comm_id=0x33, remote_comm_id=0x44, local_qpn=0x123, starting_psn=0xABCDEF, target_ack_delay=9,
              failover_accepted=1, end_to_end_flow_control=True, rnr_retry_count=6, srq=True,
              local_ca_guid=0x1122334455667788),
        CmDreq(local_comm_id=0x55, remote_comm_id=0x66, remote_qpn=0x789),
    ]  # fmt: skip
    path = tmp_path / "cm.pcap"
    with open(path, "wb") as stream:
        writer = PcapWriter(stream)
        for psn, message in enumerate(messages):
            pkt = Packet(BTH(Opcode.UD_SEND_ONLY, 1, psn), encode_cm(psn, message), deth=Deth(0x80010000, 1))
            ip = IPv4Header(b"\x0a\0\0\1", b"\x0a\0\0\2")
            writer.write(bytes(build_frame(Frame(bytes(12) + b"\x08\x00", ip, UdpHeader(0xC000), pkt, 0, False))))
    fields = ["rej.msgrej", "rej.rejinfolen", "rej.reason", "rep.localqpn", "rep.startpsn", "rep.tgtackdelay",
              "rep.failoveracc", "rep.e2eflowctrl", "rep.rnrretrcount", "rep.srq", "rep.localcaguid",
              "req.remoteqpneecn", "dreq.remotecommid"]  # fmt: skip
    argv = ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=,"]
    for field in fields:
        argv += ["-e", f"infiniband.cm.{field}"]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert shown == [
        "0x01,0x03,0x001c,,,,,,,,,,",
        ",,,0x000123,0xabcdef,0x09,0x01,0x01,0x06,0x01,0x1122334455667788,,",
        ",,,,,,,,,,,0x000789,0x00000066",  # tshark files DREQ's remote QPN under "req"
    ]
