"""``pyroce uc_pingpong`` and ``srq_pingpong`` between two processes, as ``ibv_uc_pingpong`` and
``ibv_srq_pingpong`` run (the server waits on a TCP port, the client connects, both print their
QPs' addresses and the rate lines), and the out-of-band exchange of all three tools, recorded by a
relay between them, byte for byte as the C tools write it."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.cli import ROOT, assert_one_line_error, cli_env, pyroce
from tests.pingpong_pair import ADDRESS, BYTES, ITERS, LOCAL, REMOTE, addresses, free_port, run_pair

MSG = 52  # sizeof "0000:000000:000000:00000000000000000000000000000000"
EMPTY = b"0000:000000:000000:" + b"0" * 32 + b"\0"  # srq_pingpong's unused address slots


def qps_of(tool: str, options: tuple[str, ...]) -> int:
    """How many QPs ``tool`` opens with ``options`` (srq_pingpong's -q, default 16)."""
    if tool != "srq_pingpong":
        return 1
    return int(options[options.index("-q") + 1]) if "-q" in options else 16


def wire(address: str) -> bytes:
    """The message the C tools send for a printed address (``LID 0x0000, QPN 0x000011, ...``):
    ``"%04x:%06x:%06x:%s"`` with the GID's 16 bytes as 32 hex digits, and the NUL."""
    fields = dict(part.split(" ", 1) for part in address.split(", "))
    gid = socket.inet_pton(socket.AF_INET6, fields["GID"]).hex()
    return b"%04x:%06x:%06x:%s\0" % (int(fields["LID"], 16), int(fields["QPN"], 16), int(fields["PSN"], 16),
                                     gid.encode())  # fmt: skip


def counters_of(err: str) -> dict[str, int]:
    """``--stats``' line on stderr: ``pyroce0 counters: sent_pkts N, rcvd_pkts N, ...``."""
    (line,) = (line for line in err.splitlines() if line.startswith("pyroce0 counters: "))
    return {name: int(value) for name, value in (part.split() for part in line.split(": ", 1)[1].split(", "))}


@pytest.mark.parametrize(("tool", "size", "options", "offset"), [
    ("uc_pingpong", 1, (), 3), ("uc_pingpong", 4096, (), 4), ("uc_pingpong", 10000, ("-m", "512"), 5),
    ("srq_pingpong", 1, ("-q", "4"), 6), ("srq_pingpong", 4096, (), 7), ("srq_pingpong", 10000, ("-q", "3"), 8),
])  # fmt: skip
@pytest.mark.embedded_nic  # --stats: the packets of the program's own NIC (a shared one counts both ends)
def test_server_and_client_print_the_c_tools_lines(tool, size, options, offset):
    iters = 60
    server_out, server_err, client_out, client_err, _ = run_pair(tool, free_port(offset), "-n", str(iters), "-s",
                                                                 str(size), "--stats", *options)  # fmt: skip
    qps = qps_of(tool, options)
    mtu = int(options[options.index("-m") + 1]) if "-m" in options else 1024
    for err in (server_err, client_err):
        counters = counters_of(err)
        assert counters["icrc_errors"] == 0, err
        if tool == "uc_pingpong":  # UC: each side's messages, in MTU packets, and no ACKs
            assert counters["sent_pkts"] == counters["rcvd_pkts"] == iters * -(-size // mtu), err
    for out in (server_out, client_out):
        lines = out.splitlines()
        assert len(lines) == 2 * qps + 2, out
        assert all(line.startswith(LOCAL) and ADDRESS.match(line) for line in lines[:qps]), out
        assert all(line.startswith(REMOTE) and ADDRESS.match(line) for line in lines[qps : 2 * qps]), out
        assert int(BYTES.fullmatch(lines[-2])[1]) == 2 * iters * size, out
        assert int(ITERS.fullmatch(lines[-1])[1]) == iters, out
        assert len({line.split(", ")[1] for line in lines[:qps]}) == qps, "QP numbers repeat"
    assert addresses(server_out, LOCAL) == addresses(client_out, REMOTE)
    assert addresses(client_out, LOCAL) == addresses(server_out, REMOTE)


@pytest.mark.parametrize(("tool", "offset"), [("uc_pingpong", 9), ("srq_pingpong", 10)])
def test_check_finds_the_clients_pattern_on_both_sides(tool, offset):
    server_out, _, client_out, _, _ = run_pair(tool, free_port(offset), "-n", "20", "-s", "10000", "-c")
    for out in (server_out, client_out):
        assert "invalid data" not in out, out
        assert ITERS.search(out), out


@pytest.mark.parametrize(("tool", "slots", "options", "offset"), [
    ("rc_pingpong", 1, (), 11), ("uc_pingpong", 1, (), 13), ("srq_pingpong", 256, ("-q", "5"), 15),
])  # fmt: skip
def test_the_exchange_is_the_c_tools_bytes(tool, slots, options, offset):
    """Each side writes ``slots`` messages (srq_pingpong: always MAX_QP, 256), its QPs' addresses
    first and empty ones after; the client then writes ``done`` and its NUL."""
    server_out, _, client_out, _, relay = run_pair(tool, free_port(offset), "-n", "10", *options,
                                                   relay_port=free_port(offset + 1))  # fmt: skip
    assert relay is not None
    assert len(relay.to_server) == slots * MSG + 5 and relay.to_server.endswith(b"done\0"), relay.to_server[-8:]
    assert len(relay.to_client) == slots * MSG
    for sent, out in ((bytes(relay.to_server[:-5]), client_out), (bytes(relay.to_client), server_out)):
        msgs = [sent[i * MSG : (i + 1) * MSG] for i in range(slots)]
        ours = [wire(address) for address in addresses(out, LOCAL)]
        assert len(ours) == qps_of(tool, options)
        assert msgs[: len(ours)] == ours
        assert msgs[len(ours) :] == [EMPTY] * (slots - len(ours))


def test_a_client_with_fewer_qps_is_refused_in_one_line_on_both_sides():
    server_out, server_err, _, client_err, _ = run_pair("srq_pingpong", free_port(17), "-n", "10", "-q", "8",
                                                        client_options=("-q", "4"), ok=False)  # fmt: skip
    for err in (server_err, client_err):
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert server_err.startswith("pyroce srq_pingpong: error: ") and "no address for QP[4]" in server_err
    assert client_err.startswith("pyroce srq_pingpong: error: Couldn't read/write remote address"), client_err
    assert "iters" not in server_out


@pytest.mark.parametrize(("tool", "option", "words"), [
    ("uc_pingpong", ("-m", "100"), ("--mtu", "100")), ("uc_pingpong", ("-p", "70000"), ("--port",)),
    ("srq_pingpong", ("-q", "0"), ("--num-qp", "0 is less than 1")),
    ("srq_pingpong", ("-q", "256"), ("--num-qp", "256 is more than 255")),
    ("srq_pingpong", ("-s", "0"), ("--size",)), ("srq_pingpong", ("-r", "0x8"), ("rx_depth 8 is too small for 16 QPs",)),
    ("srq_pingpong", ("-n", "x"), ("--iters", "invalid number 'x'")),
])  # fmt: skip
def test_bad_options_are_one_line(tool, option, words):
    assert_one_line_error(pyroce(tool, *option, timeout=30), f"pyroce {tool}: error: ", *words)


@pytest.mark.parametrize("tool", ["uc_pingpong", "srq_pingpong"])
def test_a_missing_gid_index_is_named(tool):
    assert_one_line_error(pyroce(tool, "-g", "16", "127.0.0.1", timeout=30), "can't read sgid of index 16")


@pytest.mark.parametrize("tool", ["uc_pingpong", "srq_pingpong", "ud_pingpong"])
def test_tools_wrapper_runs_the_tool_it_is_named_for(tool):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / f"{tool}.py"), "-r", "0"], env=cli_env(),
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith(f"pyroce {tool}: error: argument -r/--rx-depth"), done


UD_LOCAL = re.compile(r"^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:127\.")


@pytest.mark.embedded_nic  # --stats: the packets of the program's own NIC (a shared one counts both ends)
@pytest.mark.parametrize(("size", "offset"), [(1, 20), (2048, 21), (4096, 22)])
def test_ud_pingpong_prints_the_c_tools_lines_and_sends_one_packet_per_message(size, offset):
    iters = 60
    server_out, server_err, client_out, client_err, _ = run_pair("ud_pingpong", free_port(offset), "-n", str(iters),
                                                                 "-s", str(size), "--stats")  # fmt: skip
    for err in (server_err, client_err):
        counters = counters_of(err)
        assert counters["icrc_errors"] == 0 and counters["sent_pkts"] == counters["rcvd_pkts"] == iters, err
    for out in (server_out, client_out):
        lines = out.splitlines()
        assert len(lines) == 4, out
        assert UD_LOCAL.match(lines[0]), out  # ud_pingpong.c prints "PSN 0x...: GID" on its local line
        assert lines[1].startswith(REMOTE) and ADDRESS.match(lines[1]), out
        assert int(BYTES.fullmatch(lines[2])[1]) == 2 * iters * size, out
        assert int(ITERS.fullmatch(lines[3])[1]) == iters, out
    local = [line[len(LOCAL) :].replace(": GID", ", GID") for line in (server_out, client_out)
             for line in line.splitlines()[:1]]  # fmt: skip
    assert local == [addresses(client_out, REMOTE)[0], addresses(server_out, REMOTE)[0]]


def test_ud_pingpong_exchange_is_the_c_tools_bytes():
    _, _, client_out, _, relay = run_pair("ud_pingpong", free_port(23), "-n", "10", relay_port=free_port(24))
    assert relay is not None and bytes(relay.to_server[MSG:]) == b"done\0"
    local = client_out.splitlines()[0][len(LOCAL) :].replace(": GID", ", GID")
    assert bytes(relay.to_server[:MSG]) == wire(local)


@pytest.mark.parametrize(("option", "words"), [
    (("-s", "4097"), ("pyroce ud_pingpong: error: Requested size larger than port MTU (4096)",)),
    (("-m", "1024"), ("error: unrecognized arguments: -m",)),  # ud_pingpong.c has no -m and no -c
    (("-c",), ("error: unrecognized arguments: -c",)),
])  # fmt: skip
def test_ud_pingpong_bad_options_are_one_line(option, words):
    assert_one_line_error(pyroce("ud_pingpong", *option, "127.0.0.1", timeout=30), *words)


def test_ud_pingpong_sends_1024_bytes_by_default_as_rdma_core_44s_tool():
    _, _, client_out, _, _ = run_pair("ud_pingpong", free_port(25), "-n", "10")
    assert int(BYTES.search(client_out)[1]) == 2 * 10 * 1024, client_out
