"""Python programs on the shared NIC (``PYROCE_NIC=shared``): with a C program on one address,
two Python programs on one address, a killed one cleaned up (its peer's retries fail), a
forked child on a connection of its own, and QPNs numbered by the one NIC. Real processes,
a real ``pyroce nicd`` of the test's own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyroce.nicd.client import ask as ask_nic
from pyroce.wire import parse_frame
from pyroce.wire.framing import LINKTYPE_RAW
from pyroce.wire.opcodes import Opcode
from pyroce.wire.pcap import read_pcap
from tests.cli import ROOT, SRC, free_port
from tests.shared_nic import shared_nic
from tests.test_c_driver import C_TOOL, ITERS, PYTHON_TOOL, driver_env, needs_tools  # noqa: F401 - a fixture
from tests.test_shared_nic_programs import start_server
from tests.waiting import spin_until

RETRY_EXC_ERR = 12  # IBV_WC_RETRY_EXC_ERR


@pytest.fixture
def nic(tmp_path: Path):
    """A shared NIC of the test's own and the environment of Python programs on it."""
    with shared_nic(tmp_path / "stats") as (place, env, process):
        path = os.pathsep.join((str(SRC), str(ROOT), env.get("PYTHONPATH", "")))
        yield place, {**env, "PYROCE_NIC": "shared", "PYTHONPATH": path}, process


def python_program(env: dict[str, str], script: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / script)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip


def pingpong(server_argv: list[str], client_argv: list[str], server_env: dict[str, str],
             client_env: dict[str, str], port: int) -> tuple[str, str]:  # fmt: skip
    server = start_server([*server_argv, "-p", str(port), "-n", "200", "-s", "4096"], server_env, port)
    try:
        client = subprocess.run([*client_argv, "-p", str(port), "-n", "200", "-s", "4096", "127.0.0.1"],
                                env=client_env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        server_out = server.communicate(timeout=120)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0 and server.returncode == 0, (client.stdout, client.stderr, server_out)
    return server_out, client.stdout


def assert_one_address(place, *outputs: str) -> None:
    for out in outputs:
        assert f"GID ::ffff:{place.address}" in out, out  # every end: the NIC's one address
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]


@needs_tools
@pytest.mark.parametrize("python_side", ["client", "server"])
def test_python_and_c_programs_exchange_on_one_address(nic, driver_env, python_side: str) -> None:  # noqa: F811
    place, env, _ = nic
    c_env = {**driver_env, "PYROCE_STATS_DIR": env["PYROCE_STATS_DIR"], "PYROCE_ADDR": place.address}
    c_argv, py_argv = [*C_TOOL, "-g", "3"], [*PYTHON_TOOL, "-g", "3"]
    if python_side == "client":
        outputs = pingpong(c_argv, py_argv, c_env, env, free_port(41))
    else:
        outputs = pingpong(py_argv, c_argv, env, c_env, free_port(42))
    assert_one_address(place, *outputs)


def test_two_python_programs_share_one_address(nic) -> None:
    place, env, _ = nic
    argv = [*PYTHON_TOOL, "-g", "3"]
    assert_one_address(place, *pingpong(argv, argv, env, env, free_port(43)))


def connected_peers(env: dict[str, str]) -> tuple[list[subprocess.Popen[str]], list[dict]]:
    """Two ``shared_python_peer`` programs, connected to each other."""
    peers = [python_program(env, "shared_python_peer.py") for _ in range(2)]
    hello = [json.loads(peer.stdout.readline()) for peer in peers]  # type: ignore[union-attr]
    for peer, other in zip(peers, reversed(hello)):
        peer.stdin.write(json.dumps(other["info"]) + "\n")  # type: ignore[union-attr]
        peer.stdin.flush()  # type: ignore[union-attr]
    for peer in peers:
        assert peer.stdout.readline().strip() == "connected"  # type: ignore[union-attr]
    return peers, hello


def ask(peer: subprocess.Popen[str], command: str) -> str:
    peer.stdin.write(command + "\n")  # type: ignore[union-attr]
    peer.stdin.flush()  # type: ignore[union-attr]
    return peer.stdout.readline().split()[-1]  # type: ignore[union-attr]


def test_two_programs_get_an_engine_each_and_meet_through_the_kernel(nic) -> None:
    """The second program goes to a second engine process, whose QPNs are odd where the
    first's are even: their WRITEs reach each other only as the kernel steers them."""
    place, env, process = nic
    peers, hello = connected_peers(env)
    try:
        for writer, reader, who in ((0, 1, hello[0]), (1, 0, hello[1])):
            assert ask(peers[writer], "write") == "0"
            assert ask(peers[reader], "show") == str(who["pid"])
        engines = ask_nic(place, "status")["engines"]
        engine_of = {pid: engine["index"] for engine in engines for pid in engine["programs"]}
        assert sorted(engine_of.values()) == [0, 1] and set(engine_of) == {h["pid"] for h in hello}
        assert engines[0]["pid"] == process.pid and engines[1]["pid"] != process.pid
        assert all(int(h["qpn"]) % 2 == engine_of[h["pid"]] for h in hello)
    finally:
        for peer in peers:
            peer.kill()
    spin_until(lambda: not ask_nic(place, "status")["programs"], "both programs gone from their engines")


def test_a_capture_records_both_engines_each_packet_once(nic, tmp_path: Path) -> None:
    """Each engine records its own programs' packets; one between two engines of the address
    is in the merged file once, as its sender sent it."""
    _, env, _ = nic
    peers, hello = connected_peers(env)
    pcap = tmp_path / "engines.pcap"
    try:
        spin_until(lambda: len(engine_documents(env)) == 2, "both engines' counters files")
        capture = subprocess.Popen([sys.executable, "-m", "pyroce", "capture", "-w", str(pcap), "--timeout", "3"],
                                   env=env, text=True, stdout=subprocess.PIPE)  # fmt: skip
        first = capture.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("capturing pyroce0 of its 2 engines (pids "), first
        for peer in peers:
            assert ask(peer, "write") == "0"
        rest = capture.communicate(timeout=30)[0]
    finally:
        for peer in peers:
            peer.kill()
    _, records = read_pcap(pcap)
    assert capture.returncode == 0 and rest.strip() == f"{len(records)} frames written to {pcap}"
    packets = [parse_frame(record.data, LINKTYPE_RAW) for record in records]
    assert all(frame.icrc_ok for frame in packets)
    seen = {(frame.packet.bth.opcode, frame.packet.bth.dqpn) for frame in packets}
    qpns = [int(h["qpn"]) for h in hello]
    assert seen == {(opcode, qpn) for qpn in qpns for opcode in (Opcode.RC_RDMA_WRITE_ONLY, Opcode.RC_ACKNOWLEDGE)}
    assert [record.timestamp for record in records] == sorted(record.timestamp for record in records)
    # every packet the engines sent (a resend too, on a busy host), each recorded once
    spin_until(lambda: sum(document["counters"].get("sent_pkts", 0) for document in engine_documents(env))
               == len(records), "the engines' counters of what they sent")  # fmt: skip


def engine_documents(env: dict[str, str]) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "pyroce", "stats", "--json"], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return json.loads(done.stdout)


def test_python_programs_write_into_each_other_with_qpns_of_one_nic(nic) -> None:
    _, env, _ = nic
    peers, hello = connected_peers(env)
    try:
        assert [h["nic"] for h in hello] == ["shared", "shared"]
        assert hello[0]["qpn"] != hello[1]["qpn"]  # numbered by the one NIC
        for writer, reader, who in ((0, 1, hello[0]), (1, 0, hello[1])):
            assert ask(peers[writer], "write") == "0"
            assert ask(peers[reader], "show") == str(who["pid"])
    finally:
        for peer in peers:
            peer.kill()
            peer.communicate()


def test_a_killed_python_program_is_cleaned_up_and_its_peer_retries_fail(nic, tmp_path: Path) -> None:
    place, env, _ = nic
    peers, hello = connected_peers(env)
    victim, survivor = peers
    try:
        os.kill(victim.pid, signal.SIGKILL)
        victim.communicate()
        log = Path(place.folder) / "nicd.log"  # tests.shared_nic: the NIC in the foreground logs there
        spin_until(lambda: f"pid {hello[0]['pid']} gone" in log.read_text(), "the NIC saw the program go")
        assert re.search(rf"pid {hello[0]['pid']} gone: destroyed what it left: .*1 QP", log.read_text())
        assert ask(survivor, "write") == str(RETRY_EXC_ERR)  # nobody answers for the destroyed QP
    finally:
        for peer in peers:
            peer.kill()
            peer.communicate()


def test_a_forked_child_opens_the_device_anew_and_the_parents_objects_stay_the_parents(nic) -> None:
    _, env, _ = nic
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "shared_python_fork.py")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["parent before 0 before", "child parent-object errno 5 lines 1",
                                        "child own 0 child!", "child exit 0", "parent after 0 after!"]  # fmt: skip


def test_a_bad_pyroce_nic_is_einval(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyroce.verbs.device import Context
    from pyroce.verbs.pyverbs_error import PyverbsRDMAError

    monkeypatch.setenv("PYROCE_NIC", "theirs")
    with pytest.raises(PyverbsRDMAError) as failure:
        Context(name="pyroce0")
    assert failure.value.error_code == 22 and "own, shared" in str(failure.value)


ADVISE_SCRIPT = """
import errno
import pyroce.verbs.enums as e
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.pyverbs_error import PyverbsRDMAError
from pyroce.verbs.wr import SGE
with Context(name="pyroce0") as ctx:
    assert type(ctx.device).__name__ == "RemoteDevice", ctx.device
    pd = PD(ctx)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND)
    other = MR(PD(ctx), 64, e.IBV_ACCESS_LOCAL_WRITE)
    flush = e.IBV_ADVISE_MR_FLAG_FLUSH
    print("ok", pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, flush, [SGE(mr.buf, 4096, mr.lkey)]))
    for sge in (SGE(other.buf, 64, other.lkey), SGE(mr.buf, 4097, mr.lkey)):
        try:
            pd.advise_mr(e.IBV_ADVISE_MR_ADVICE_PREFETCH, flush, [sge])
        except PyverbsRDMAError as exc:
            print(errno.errorcode[exc.error_code])
"""


def test_advise_mr_checks_a_python_programs_mrs_on_the_shared_nic(nic) -> None:
    """PD.advise_mr needs no command: the program's own verbs objects answer it, as on its own NIC."""
    _, env, _ = nic
    done = subprocess.run([sys.executable, "-c", ADVISE_SCRIPT], env=env, text=True, capture_output=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "0", "EINVAL", "EFAULT"], done.stdout + done.stderr


NAP_SCRIPT = """
import types
import pyroce.nicd.remote_device as remote
import pyroce.verbs.enums as e
from pyroce.verbs.cq import CQ
from pyroce.verbs.device import Context
from pyroce.verbs.mr import MR
from pyroce.verbs.pd import PD
from pyroce.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyroce.verbs.wr import SGE, RecvWR
naps = []
# count the naps (each a select on the NIC's wake-up eventfd, NAP_S at most) instead of taking them
remote.select = types.SimpleNamespace(select=lambda r, w, x, timeout: naps.append(timeout) or ([], [], []))
with Context(name="pyroce0") as ctx:
    pd, cq = PD(ctx), CQ(ctx, 16)
    mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=1, max_recv_wr=1)))
    qp.to_init(QPAttr(port_num=1))
    for _ in range(remote.SPIN_POLLS):
        cq.poll()
    spun = len(naps)
    cq.poll()
    cq.poll()
    napped = len(naps)
    qp.post_recv(RecvWR(sg=[SGE(mr.buf, 64, mr.lkey)]))  # work posted: its polls spin again first
    for _ in range(remote.SPIN_POLLS):
        cq.poll()
    print(spun, napped, len(naps), naps[0] == remote.NAP_S)
"""


def test_a_poll_that_keeps_finding_nothing_naps(nic) -> None:
    """The NIC's engine thread delivers a shared NIC's completions: a Python program's CQ poll
    spins SPIN_POLLS empty polls, then naps on each further one, and spins again once it posts."""
    _, env, _ = nic
    done = subprocess.run([sys.executable, "-c", NAP_SCRIPT], env=env, text=True, capture_output=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "2", "2", "True"], done.stdout + done.stderr


def test_a_napping_poll_is_woken_by_its_completion(nic) -> None:
    """A program polls for a receive long past its spins, so its polls nap on the NIC's wake-up
    eventfd; the peer's SEND writes the CQE, and with it the eventfd (``poller_wakeups``). A
    CQE that lands between two naps is seen by the next look at the ring instead, so a few
    rounds are tried: each round's nap is ~50 µs of a poll cycle of a few µs."""
    _, env, _ = nic
    peers, _ = connected_peers(env)
    receiver, sender = peers
    try:
        wakeups = 0
        for _ in range(5):
            assert ask(receiver, "recv") == "posted"
            time.sleep(0.05)  # 256 empty polls and then naps, many of them
            assert ask(sender, "send") == "0"
            status, wakeups = receiver.stdout.readline().split()[1:]  # type: ignore[union-attr]
            assert status == "0"
            if int(wakeups):
                break
        assert int(wakeups) > 0
    finally:
        for peer in peers:
            peer.kill()
            peer.communicate()
