"""pyroce.wire: RoCEv2 packets, byte-exact, with no knowledge of QPs or sockets.

Rule: this package imports nothing else from pyroce and does no I/O but pcap files.
"""

from pyroce.wire.aeth import (
    CREDITS_UNLIMITED,
    RNR_TIMER_US,
    AethKind,
    NakCode,
    ack_syndrome,
    describe_syndrome,
    nak_syndrome,
    rnr_nak_syndrome,
    rnr_timer_from_us,
    rnr_timer_to_us,
    syndrome_kind,
    syndrome_value,
)
from pyroce.wire.bth import BTH, DEFAULT_PKEY, QP1
from pyroce.wire.cm import (
    CM_CLASS_VERSION,
    CMA_HEADER_LEN,
    PRIVATE_DATA_LEN,
    CmaHeader,
    CmAttr,
    CmDrep,
    CmDreq,
    CmMessage,
    CmMra,
    CmMsgResponse,
    CmRej,
    CmRep,
    CmReq,
    CmRtu,
    CmSidrRep,
    CmSidrReq,
    PortSpace,
    encode_cm,
    parse_cm,
    port_space_and_port,
    service_id,
)
from pyroce.wire.errors import (
    BadCmField,
    BadMadLength,
    BadMadVersion,
    BadPadCount,
    BadTransportVersion,
    BuildError,
    LengthMismatch,
    MalformedMad,
    MalformedPacket,
    NotRoce,
    PcapError,
    TruncatedPacket,
    UnknownAttribute,
    UnknownOpcode,
    WireError,
    WrongMgmtClass,
)
from pyroce.wire.framing import (
    ROCE_UDP_PORT,
    Frame,
    IPv4Header,
    IPv6Header,
    RocePath,
    UdpHeader,
    build_datagram,
    build_frame,
    locate_datagram,
    parse_frame,
)
from pyroce.wire.gso import gso_segment_size, split_gso_frame
from pyroce.wire.headers import Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Reth
from pyroce.wire.icrc import compute_icrc, icrc_from_seed, icrc_seed, verify_icrc, verify_icrc_from_seed
from pyroce.wire.mad import MAD_HEADER_LEN, MAD_LEN, MadHeader, MadMethod, MgmtClass
from pyroce.wire.mtu import Mtu, mtu_for_netdev, mtu_from_bytes, mtu_to_bytes
from pyroce.wire.opcodes import OPCODES, Opcode, OpFlag, OpInfo, PayloadRule, Transport, opcode_name
from pyroce.wire.packet import Packet, build_packet_into, packet_length, parse_packet
from pyroce.wire.pcap import PcapReader, PcapRecord, PcapWriter, read_pcap
from pyroce.wire.psn import PSN_MASK, psn_add, psn_compare, psn_diff, psn_in_range, psn_in_window

__all__ = [name for name in dir() if not name.startswith("_")]
