"""The UDP socket link: RoCEv2 on UDP port 4791 through the kernel's UDP stack.

The IPv4 trap (rocev2.md): the ICRC covers the IPv4 Identification and flags, so the socket
is unconnected and sets ``IP_PMTUDISC_DO``: Linux then sends every datagram with ID 0 and DF,
exactly the header ``pyroce.wire.framing.IPv4Header`` assumes. A receiver on a UDP socket
cannot see the sender's ID (rxe counts its IDs up, GSO segments carry 0, 1, 2, ...):
``RocePath.verify`` solves for the ID that makes the ICRC valid (``pyroce.wire.ipv4_id``).

System calls cost more than building a packet, so the link moves several packets per call
when the kernel can: UDP GSO (``UDP_SEGMENT``) sends equal-sized packets to one peer in one
``sendmsg``, each leaving as its own datagram with the IPv4 ID of its place in the send
(``RocePath`` computes each one's ICRC for it); UDP GRO (``UDP_GRO``) hands back runs of
datagrams from one sender in one ``recvmsg`` with their segment size.

The address's family is the link's: an IPv6 address makes an IPv6 socket (``IPV6_V6ONLY``),
and RoCEv2 travels over IPv6, where the ICRC covers no header field the socket hides.
Link-local IPv6 addresses are not served (a peer's address would need its scope).

Multicast: a datagram to a group leaves from the same socket, out of the interface of the
link's address (``IP_MULTICAST_IF``). To receive a group's, the link opens a socket bound to
(group, 4791) that joined the group on that interface (``join``, ``IP_ADD_MEMBERSHIP``), as rxe
joins on its netdev; its own datagrams, which the kernel loops back to every local member
(``IP_MULTICAST_LOOP``, so another NIC on this host hears them), it skips: the NIC has
delivered them to its own QPs already; unless the link is one of several engines on its
address (``link.steering``), which cannot tell their own sends from each other's, so each
hears all of them from the kernel. ``fileno`` is an epoll fd over every socket.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import ipaddress
import select
import socket
import struct
from typing import Final

from pyroce.link.base import Link
from pyroce.link.errors import LinkError
from pyroce.link.steering import Steering, steering_program
from pyroce.wire.framing import ROCE_UDP_PORT

SOCKET_BUFFER: Final = 8 << 20
IP_MTU_DISCOVER: Final = getattr(socket, "IP_MTU_DISCOVER", 10)  # <linux/in.h>; Python 3.11 lacks the names
IP_PMTUDISC_DO: Final = getattr(socket, "IP_PMTUDISC_DO", 2)
SOL_UDP: Final = 17
UDP_SEGMENT: Final = 103  # <linux/udp.h>: GSO segment size for sends (Linux 4.18)
UDP_GRO: Final = 104  # <linux/udp.h>: receive coalesced datagrams with their segment size (Linux 5.0)
_GRO_CMSG: Final = socket.CMSG_SPACE(4)
_SEGMENT_SIZE: Final = struct.Struct("=H")  # UDP_SEGMENT takes a u16
_GRO_SIZE: Final = struct.Struct("=i")  # UDP_GRO reports an int
_MREQ6_INDEX: Final = struct.Struct("@I")  # struct ipv6_mreq's interface index
SO_ATTACH_REUSEPORT_CBPF: Final = 51  # <asm-generic/socket.h> (Linux 4.5); Python 3.11 lacks the name
_BPF_INSTRUCTION: Final = struct.Struct("=HBBI")  # struct sock_filter
_BPF_PROGRAM: Final = struct.Struct("@HP")  # struct sock_fprog: its length, a pointer to its instructions
_SIOCGIFMTU: Final = 0x8921
_SIOCGIFADDR: Final = 0x8915


class UdpLink(Link):
    """A non-blocking UDP socket bound to ``address``:4791, with one ``RocePath`` per peer."""

    def __init__(self, address: str, port: int = ROCE_UDP_PORT, batching: bool = True,
                 steering: Steering | None = None) -> None:  # fmt: skip
        """``batching=False`` turns UDP GSO and GRO off: every packet is a datagram of its own
        on the host too (captures, raw-socket receivers on this host; ``PYROCE_GSO=0``).
        ``steering``: the link is one engine's of several on ``address`` (``link.steering``):
        it joins their ``SO_REUSEPORT`` group, and engine 0 gives the group its program."""
        super().__init__(address, port)
        self.steering = steering
        ipv6 = is_ipv6(address)
        sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if ipv6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            else:
                sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
            for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            if steering is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((address, port))
            if steering is not None and steering.index == 0:
                attach_steering(sock, steering.engines)
            _multicast_from(sock, address)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRNOTAVAIL:
                raise LinkError(exc.errno, f"{address} is not an address of this host") from None
            if exc.errno == errno.EADDRINUSE:
                raise LinkError(exc.errno, f"UDP {address}:{port} is already in use") from None
            raise
        sock.setblocking(False)
        self.sock = sock
        # what the kernel granted: SOCKET_BUFFER at most ``net.core.rmem_max``, doubled for its
        # bookkeeping (416 KiB on a host left at the default 208 KiB)
        self.receive_buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self.gso = batching and _enable(sock, UDP_SEGMENT, 0)  # probe: sends may carry a segment size
        self.gro = batching and _enable(sock, UDP_GRO, 1)
        self._poll = select.epoll()
        self._poll.register(sock.fileno(), select.EPOLLIN)
        self._ready = self._poll.poll
        self._fd = sock.fileno()
        self._groups: dict[int, tuple[socket.socket, str]] = {}  # fd -> a joined group's socket, its address
        self._group_fds: dict[str, int] = {}  # a joined group's address -> its socket's fd

    def fileno(self) -> int:
        """Readable while any of the link's sockets has a datagram (the epoll fd over them)."""
        return self._poll.fileno()

    def join(self, group: str) -> None:
        """Receive the datagrams sent to multicast address ``group`` on the interface of the
        link's address (OSError if the host refuses: no descriptor left, no such interface)."""
        ipv6 = is_ipv6(self.address)
        sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # other NICs of this host may join too
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            if ipv6:
                index = interface_index(self.address)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((group, ROCE_UDP_PORT, 0, index))
                membership = socket.inet_pton(socket.AF_INET6, group) + _MREQ6_INDEX.pack(index)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, membership)
            else:
                sock.bind((group, ROCE_UDP_PORT))
                membership = socket.inet_aton(group) + socket.inet_aton(self.address)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._groups[sock.fileno()] = (sock, group)
        self._group_fds[group] = sock.fileno()
        self._poll.register(sock.fileno(), select.EPOLLIN)

    def leave(self, group: str) -> None:
        """Stop receiving ``group`` (closing its socket drops the membership)."""
        fd = self._group_fds.pop(group, None)
        if fd is not None:
            self._poll.unregister(fd)
            self._groups.pop(fd)[0].close()

    def send(self, data: memoryview | bytes, peer: str) -> bool:
        """Send one datagram; False when it could not leave (the socket buffer is full, the
        peer has no route, a firewall refused it): the packet is lost, as on a wire, and the
        transport's retransmission or timeout deals with it."""
        try:
            self.sock.sendto(data, (peer, ROCE_UDP_PORT))
        except OSError:
            return False
        return True

    def send_segments(self, data: memoryview, segment_size: int, peer: str) -> bool:
        """Send ``data`` as datagrams of ``segment_size`` bytes (the last may be shorter) in one
        GSO call; the packets must have been built as segments 0, 1, ... (``RocePath``)."""
        try:
            self.sock.sendmsg([data], [(SOL_UDP, UDP_SEGMENT, _SEGMENT_SIZE.pack(segment_size))], 0,
                              (peer, ROCE_UDP_PORT))  # fmt: skip
        except OSError:  # as ``send``: the packets are lost
            return False
        return True

    def recv_into(self, buf: bytearray) -> tuple[int, tuple[str, int], int, str] | None:
        """Datagrams from one sender into ``buf``: their total length, the sender, the size of
        each (all but the last; the total when GRO gave one) and the address they were sent to
        (the link's, or a group it joined), or None when none is waiting.

        An engine pass ends with a read that finds nothing: asking epoll first costs 0.4 µs,
        where a ``recvmsg`` that fails costs 1.9 (its exception) on this machine."""
        for fd, _ in self._ready(0):
            got = self._receive(buf) if fd == self._fd else self._receive_group(buf, *self._groups[fd])
            if got is not None:
                return got
        return None

    def _receive(self, buf: bytearray) -> tuple[int, tuple[str, int], int, str] | None:
        try:
            if not self.gro:
                size, sender = self.sock.recvfrom_into(buf)
                return size, sender[:2], size, self.address
            size, ancillary, _, sender = self.sock.recvmsg_into([buf], _GRO_CMSG)
        except (BlockingIOError, InterruptedError):
            return None
        for level, kind, value in ancillary:
            if level == SOL_UDP and kind == UDP_GRO:
                return size, sender[:2], _GRO_SIZE.unpack_from(value)[0], self.address
        return size, sender[:2], size, self.address  # an IPv6 sender comes with flow info and scope: not needed

    def _receive_group(self, buf: bytearray, sock: socket.socket, group: str
                       ) -> tuple[int, tuple[str, int], int, str] | None:  # fmt: skip
        """The next datagram sent to ``group`` by another NIC, or by any engine of a steered
        link (the link's own come back too)."""
        while True:
            try:
                size, sender = sock.recvfrom_into(buf)
            except (BlockingIOError, InterruptedError):
                return None
            if sender[0] != self.address or self.steering is not None:  # (an engine hears its peers' sends)
                return size, sender[:2], size, group

    def close(self) -> None:
        for sock, _ in self._groups.values():
            sock.close()
        self._groups.clear()
        self._group_fds.clear()
        self._poll.close()
        self.sock.close()


def _multicast_from(sock: socket.socket, address: str) -> None:
    """Datagrams to multicast groups leave by the interface holding ``address``."""
    if is_ipv6(address):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, interface_index(address))
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))


def attach_steering(sock: socket.socket, engines: int) -> ctypes.Array[ctypes.c_char]:
    """Give the ``SO_REUSEPORT`` group ``sock`` belongs to the program that steers each
    datagram by its DestQP (``link.steering``); OSError if the kernel refuses it. Returns the
    instructions' buffer, used after the call so that it lives until the kernel has copied it
    (compiled, a local is freed after its last use: here, the taking of its address)."""
    program = steering_program(engines)
    code = ctypes.create_string_buffer(b"".join(_BPF_INSTRUCTION.pack(*instruction) for instruction in program))
    sock.setsockopt(
        socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, _BPF_PROGRAM.pack(len(program), ctypes.addressof(code))
    )
    return code


def _enable(sock: socket.socket, option: int, value: int) -> bool:
    """Set a UDP socket option the running kernel may not have; whether it took."""
    try:
        sock.setsockopt(SOL_UDP, option, value)
    except OSError:
        return False
    return True


def is_ipv6(address: str) -> bool:
    return ":" in address


def _interface_of(address: str) -> str | None:
    """The name of the interface that holds ``address`` (``lo`` for 127/8 and ::1), if any."""
    if address.startswith("127.") or address == "::1":
        return "lo"
    if is_ipv6(address):
        return _ipv6_interface_of(address)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                got = fcntl.ioctl(probe, _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    finally:
        probe.close()
    return None


def _ipv6_interface_of(address: str) -> str | None:
    """The interface holding an IPv6 address, from the kernel's table (/proc/net/if_inet6)."""
    wanted = ipaddress.IPv6Address(address).packed.hex()
    try:
        with open("/proc/net/if_inet6") as table:
            for line in table:
                fields = line.split()
                if len(fields) >= 6 and fields[0] == wanted:
                    return fields[5]
    except OSError:
        return None
    return None


def interface_mtu(address: str) -> int:
    """The MTU of the interface that holds ``address`` (65536 for loopback addresses,
    1500 if no interface holds it)."""
    name = _interface_of(address)
    if name is None:
        return 1500
    if name == "lo":
        return 65536
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        mtu = fcntl.ioctl(probe, _SIOCGIFMTU, struct.pack("256s", name.encode()[:15]))
    return int(struct.unpack_from("i", mtu, 16)[0])


def interface_name(address: str) -> str | None:
    """The name of the interface that holds ``address`` (None if none does)."""
    return _interface_of(address)


def interface_index(address: str) -> int:
    """The ifindex of the interface that holds ``address`` (0 if none does): a GID
    entry's ``ndev_ifindex``."""
    name = _interface_of(address)
    try:
        return socket.if_nametoindex(name) if name is not None else 0
    except OSError:
        return 0
