"""A pyverbs program on rdma_cm (rdma-core's idioms, ``pyverbs`` names only), one side of a test
between two processes, each with its own NIC (``PYROCE_ADDR``):

    cm_peer.py server ADDRESS PORT accept|reject   synchronous listener (rdma_create_ep)
    cm_peer.py client ADDRESS PORT                 synchronous client: SEND, echo, disconnect
    cm_peer.py rejected ADDRESS PORT               asynchronous client expecting REJECTED
    cm_peer.py hold ADDRESS PORT                   synchronous client: connect, then wait to be
                                                   killed or for its stdin to end (then exit, connected)
    cm_peer.py watch ADDRESS PORT                  asynchronous server: accept, then name the next event

It prints one line per step; the test reads them. Exit status 0 when every check passed.
"""

from __future__ import annotations

import sys

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap, QPInitAttr

MESSAGE = b"a message between two NICs"
REJECT_MSG = b"connection rejected"


def say(*words: object) -> None:
    print(*words, flush=True)


def qp_init_attr() -> QPInitAttr:
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=2, max_recv_wr=2))


def server(address: str, port: str, mode: str) -> None:
    listener = CMID(creator=AddrInfo(src=address, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE),
                    qp_init_attr=qp_init_attr())  # fmt: skip
    listener.listen()
    say("listening")
    conn = listener.get_request()
    if mode == "reject":
        conn.reject(REJECT_MSG)
        say("rejected")
        return
    conn.accept()
    say("established")
    mr = conn.reg_msgs(64)
    conn.post_recv(mr)
    wc = conn.get_recv_comp()
    got = mr.read(wc.byte_len, 0)
    say("received", got.decode())
    mr.write(got[::-1], len(got))
    conn.post_send(mr, length=len(got))
    assert conn.get_send_comp().status == e.IBV_WC_SUCCESS
    conn.disconnect()  # waits for DISCONNECTED
    say("disconnected")
    conn.close()
    listener.close()


def client(address: str, port: str) -> None:
    cmid = CMID(creator=AddrInfo(dst=address, dst_service=port, port_space=ce.RDMA_PS_TCP),
                qp_init_attr=qp_init_attr())  # fmt: skip
    cmid.connect()
    say("established")
    mr = cmid.reg_msgs(64)
    cmid.post_recv(mr)
    mr.write(MESSAGE, len(MESSAGE))
    cmid.post_send(mr, length=len(MESSAGE))
    assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = cmid.get_recv_comp()
    echo = mr.read(wc.byte_len, 0)
    assert echo == MESSAGE[::-1], echo
    say("echoed", echo.decode())
    cmid.disconnect()
    say("disconnected")
    cmid.close()


def rejected(address: str, port: str) -> None:
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
    cmid.resolve_addr(AddrInfo(dst=address, dst_service=port))
    for expected in (ce.RDMA_CM_EVENT_ADDR_RESOLVED, ce.RDMA_CM_EVENT_ROUTE_RESOLVED, ce.RDMA_CM_EVENT_REJECTED):
        event = CMEvent(channel)
        assert event.event_type == expected, event.event_str()
        if expected == ce.RDMA_CM_EVENT_ADDR_RESOLVED:
            cmid.resolve_route()
        elif expected == ce.RDMA_CM_EVENT_ROUTE_RESOLVED:
            cmid.create_qp(qp_init_attr())
            cmid.connect(ConnParam())
        else:
            assert event.private_data[: len(REJECT_MSG)] == REJECT_MSG, event.private_data
        event.ack_cm_event()
    say("rejected", event.private_data[: len(REJECT_MSG)].decode())
    cmid.close()
    channel.close()


def hold(address: str, port: str) -> None:
    cmid = CMID(creator=AddrInfo(dst=address, dst_service=port, port_space=ce.RDMA_PS_TCP),
                qp_init_attr=qp_init_attr())  # fmt: skip
    cmid.connect()
    say("established")
    sys.stdin.read()  # until killed, or the test closes stdin: then the program ends, still connected


def watch(address: str, port: str) -> None:
    channel = CMEventChannel()
    listener = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
    listener.bind_addr(AddrInfo(src=address, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))
    listener.listen()
    say("listening")
    request = CMEvent(channel)
    conn = CMID(creator=request, listen_id=listener)
    request.ack_cm_event()
    conn.create_qp(qp_init_attr())
    conn.accept(ConnParam())
    for _ in range(2):  # ESTABLISHED, then whatever the peer's end brings
        event = CMEvent(channel)
        say(event.event_str())
        event.ack_cm_event()


if __name__ == "__main__":
    role, *arguments = sys.argv[1:]
    try:
        {"server": server, "client": client, "rejected": rejected, "hold": hold, "watch": watch}[role](*arguments)
    except PyverbsRDMAError as exc:
        say("error", exc.error_code, exc)
        sys.exit(1)
