"""Errors of the wire layer.

Contract: parsing raises only ``MalformedPacket`` subclasses, whatever the bytes; each
subclass names one problem and its message says what was wrong, so a receiver can count
drops by reason (``type(err).__name__``) and a person can read why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyroce.wire.bth import BTH


class WireError(ValueError):
    """Base class of every error raised by ``pyroce.wire``."""


class MalformedPacket(WireError):
    """Bytes received from the network that are not a valid RoCEv2 packet."""


class TruncatedPacket(MalformedPacket):
    """Fewer bytes than the headers, padding and ICRC require."""


class UnknownOpcode(MalformedPacket):
    """An opcode that is reserved or belongs to a transport pyroce does not speak."""


class BadTransportVersion(MalformedPacket):
    """BTH TVer is not 0 (IBA 9.2.6: the packet is silently dropped)."""


class BadPadCount(MalformedPacket):
    """PadCnt larger than the payload, or one that does not pad the payload to 4 bytes. For
    the latter, ``bth`` is the packet's BTH: the transport answers a request so malformed as a
    length error (an RC responder NAKs it), which it cannot do for a packet it never sees."""

    def __init__(self, message: str, bth: BTH | None = None) -> None:
        super().__init__(message)
        self.bth = bth


class LengthMismatch(MalformedPacket):
    """Lengths that disagree: IP or UDP length vs. datagram size, or a payload the opcode
    does not allow."""


class NotRoce(MalformedPacket):
    """A frame that is not IPv4/IPv6 + UDP to port 4791 (only raised by frame parsing)."""


class BuildError(WireError):
    """A packet value that cannot be built: missing or extra headers for its opcode, or a
    field out of range. This is a caller's mistake, not a network event."""


class PcapError(WireError):
    """A file that is not a pcap capture, or one cut short."""


class MalformedMad(MalformedPacket):
    """A management datagram (IBA 13.4) on QP1 that cannot be read: the base of the MAD errors."""


class BadMadLength(MalformedMad):
    """A MAD that is not exactly 256 bytes."""


class BadMadVersion(MalformedMad):
    """A MAD base version or class version this codec does not speak."""


class WrongMgmtClass(MalformedMad):
    """A MAD of another management class than the one asked for."""


class UnknownAttribute(MalformedMad):
    """A CM MAD whose attribute ID names no message pyroce reads (LAP and APR included)."""


class BadCmField(MalformedMad):
    """A CM message field with a value its layout cannot hold: an info length past its room,
    an rdma_cm header of an unknown version."""
