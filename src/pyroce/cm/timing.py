"""The CM's clocks and path constants: IBA's exponential timeouts and what Linux puts in them.

Timeouts in CM MADs and QP attributes are exponents: 4.096 us * 2^n. The values are the ones
Linux's rdma_cm and ib_cm use for RoCE, so a pyroce peer waits as long as an rxe one would.
"""

from __future__ import annotations

CM_RESPONSE_TIMEOUT = 20  # 4.096 us * 2^20: how long a peer may take to answer (Linux's CMA_CM_RESPONSE_TIMEOUT)
MAX_CM_RETRIES = 15
PACKET_LIFE_TIME = 18  # RoCE's path packet lifetime (Linux's CMA_IBOE_PACKET_LIFETIME)
CA_ACK_DELAY = 15  # this NIC's ACK delay, as rxe reports it (a REP's target ACK delay)
HOP_LIMIT = 64
TIMEWAIT_S = 2.0  # how long an ended connection's comm ID answers stale messages
MRA_SERVICE_TIMEOUT = 24  # what an MRA asks the peer to add (about 69 s)


def time_of(exponent: int) -> float:
    """IBA's 4.096 us * 2^exponent timeouts, in seconds."""
    return 4.096e-6 * (1 << min(exponent, 31))


def ack_timeout(target_ack_delay: int, packet_life_time: int) -> int:
    """The QP's local ACK timeout for a path (ib_cm's ``cm_ack_timeout``)."""
    timeout = packet_life_time + 1
    if timeout >= target_ack_delay:
        timeout += target_ack_delay >= timeout - 1
    else:
        timeout = target_ack_delay + (timeout >= target_ack_delay - 1)
    return min(31, timeout)


def flow_label(source_port: int, dest_port: int) -> int:
    """RoCEv2's flow label of a connection (Linux's ``cma_get_roce_udp_flow_label``)."""
    return (source_port * 31 + dest_port) & 0xFFFFF
