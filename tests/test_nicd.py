"""The shared NIC as a service (``pyroce nicd``): drivers connect, their commands get the verbs'
checks and errnos, objects are theirs alone, and what a dead program leaves is destroyed."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from pyroce.driver.build import sources_digest
from pyroce.nicd.client import NicError, connect
from pyroce.nicd.engines import STOP_WAIT_S
from pyroce.nicd.place import NicPlace
from pyroce.nicd.protocol import Handle, receive, send
from tests.shared_nic import nic_environment, private_address, shared_nic
from tests.waiting import spin_until

RC, UD = 2, 4


@pytest.fixture
def nic(tmp_path):
    with shared_nic(tmp_path / "stats") as running:
        yield running


def status(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "pyroce", "nicd", "--status", "--json"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout)


def owners(env: dict[str, str]) -> dict[str, int]:
    """The NIC's QPs and their programs' pids, as ``pyroce stats --json`` shows them."""
    done = subprocess.run([sys.executable, "-m", "pyroce", "stats", "--json"], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return {qpn: pid for document in json.loads(done.stdout) for qpn, pid in document.get("owners", {}).items()}


def make_qp(conn, qp_type=RC):
    ctx, _doorbell_fd, _async_fd = conn.call("open_context", "pyroce0")
    pd = conn.call("alloc_pd", ctx)
    cq = conn.call("create_cq", ctx, 16, None, 0)[0]
    created = conn.call("create_qp", pd, cq, cq, None, qp_type, 0, 16, 16, 1, 1, 0)
    return ctx, pd, cq, created


def test_commands_answer_as_the_verbs_do(nic):
    place, _, _ = nic
    conn = connect(place, start=False)
    ctx, pd, cq, (qp, qpn, sq, sq_wqebbs, rq, rq_count, _rq_stride, doorbell, max_inline) = make_qp(conn)
    assert 0 < qpn < 1 << 24 and sq_wqebbs >= 16 and rq_count >= 16
    assert max_inline == 12  # none asked: an RC WQE of one basic block holds 12 inline bytes (libmlx5 too)
    for address in (sq, rq, doorbell):  # rings in the connection's shared memory, as mapped here
        assert conn.base <= address < conn.base + len(conn.arena)
    assert conn.call("query_port", ctx, 1).state == 4  # IBV_PORT_ACTIVE
    with pytest.raises(NicError) as refused:
        conn.call("create_cq", ctx, 0, None, 0)
    assert refused.value.errno == errno.EINVAL
    with pytest.raises(NicError) as busy:
        conn.call("dealloc_pd", pd)
    assert busy.value.errno == errno.EBUSY
    with pytest.raises(NicError) as unknown:
        conn.call("no_such_verb")
    assert unknown.value.errno == errno.EOPNOTSUPP
    conn.call("destroy_qp", qp)
    with pytest.raises(NicError) as gone:
        conn.call("query_qp", qp)
    assert gone.value.errno == errno.EBADF
    conn.call("destroy_cq", cq)
    conn.call("dealloc_pd", pd)
    conn.call("close_context", ctx)
    conn.sock.close()


def test_the_rings_are_shared_memory(nic):
    """What the driver writes at a ring's address is what the NIC's verbs object holds."""
    place, _, _ = nic
    conn = connect(place, start=False)
    _, _, _, created = make_qp(conn)
    doorbell = created[7]
    offset = doorbell - conn.base
    conn.arena[offset : offset + 8] = bytes(range(1, 9))
    assert conn.call("query_qp", created[0]).qp_state == 0  # the NIC still answers
    conn.sock.close()


def test_objects_belong_to_their_connection_and_qpns_are_unique(nic):
    place, _, _ = nic
    first, second = connect(place, start=False), connect(place, start=False)
    qpns = {make_qp(conn)[3][1] for conn in (first, second) for _ in range(3)}
    assert len(qpns) == 6
    _, _, _, (qp, *_) = make_qp(first)
    with pytest.raises(NicError) as other:
        second.call("query_qp", qp)  # a handle of the first connection, sent on the second
    assert other.value.errno == errno.EIO
    with pytest.raises(NicError) as stranger:
        second.call("query_qp", Handle(int(qp)))  # its number alone names nothing there
    assert stranger.value.errno in (errno.EBADF, errno.EINVAL)
    first.sock.close()
    second.sock.close()


def test_a_killed_program_is_cleaned_up_and_others_go_on(nic, tmp_path):
    place, env, _ = nic
    survivor = connect(place, start=False)
    _, _, _, (kept, *_) = make_qp(survivor)
    program = tmp_path / "holder.py"
    program.write_text(
        "import sys, time\n"
        "from pyroce.nicd.client import connection\n"
        "from tests.test_nicd import make_qp\n"
        "conn = connection()\n"
        "for _ in range(4): make_qp(conn)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, str(program)], env={**env, "PYTHONPATH": os.getcwd()},
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert holder.pid in status(env)["programs"] and status(env)["qps"] == 5
        spin_until(lambda: sorted(owners(env).values()) == sorted([holder.pid] * 4 + [os.getpid()]),
                   "`pyroce stats` naming each QP's program")  # fmt: skip
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        holder.stdout.close()
    spin_until(lambda: holder.pid not in status(env)["programs"], "the killed program's objects destroyed")
    assert status(env)["qps"] == 1
    spin_until(lambda: list(owners(env).values()) == [os.getpid()], "the killed program's QPs gone from the stats")
    assert survivor.call("query_qp", kept).qp_state == 0
    survivor.sock.close()


def test_a_forked_child_connects_anew_and_cannot_use_its_parents_objects(nic, tmp_path):
    _, env, _ = nic
    program = tmp_path / "forker.py"
    program.write_text(
        "import errno, os, sys\n"
        "from pyroce.nicd import client\n"
        "from tests.test_nicd import make_qp\n"
        "parent_qp = make_qp(client.connection())[3][0]\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        client.connection().call('query_qp', parent_qp)\n"
        "        os._exit(3)\n"
        "    except client.NicError as exc:\n"
        "        if exc.errno != errno.EIO: os._exit(4)\n"
        "    qpn = make_qp(client.connection())[3][1]\n"
        "    os._exit(0 if qpn else 5)\n"
        "_, code = os.waitpid(pid, 0)\n"
        "assert client.connection().call('query_qp', parent_qp).qp_state == 0\n"
        "sys.exit(os.waitstatus_to_exitcode(code))\n"
    )
    done = subprocess.run([sys.executable, str(program)], env={**env, "PYTHONPATH": os.getcwd()}, timeout=60,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_driver_of_another_protocol_is_refused(nic):
    place, _, _ = nic
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(place.socket_name)
        send(sock, ("hello", ({"protocol": 999},)))
        answer = receive(sock).value
    assert answer[0] == "err" and answer[1] == errno.EPROTO and "protocol 1" in answer[2]


def test_a_c_library_of_other_sources_is_refused(nic):
    """The C library sends its sources digest in its hello: a library built from another pyroce's
    sources (an old LD_LIBRARY_PATH) is refused in one line; this pyroce's is greeted."""
    place, _, _ = nic
    for digest, refused in (("0123456789abcdef", True), (sources_digest(), False)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.connect(place.socket_name)
            send(sock, ("hello", ({"protocol": 1, "version": "x", "driver": digest},)))
            message = receive(sock)
            for fd in message.fds:
                os.close(fd)
        if refused:
            assert message.value[:2] == ("err", errno.EPROTO)
            assert "was built from other sources than the pyroce of the shared NIC" in message.value[2]
            assert "\n" not in message.value[2]
        else:
            assert message.value[0] == "ok" and message.value[1]["protocol"] == 1


def test_commands_before_hello_are_refused(nic):
    place, _, _ = nic
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(place.socket_name)
        send(sock, ("open_context", ("pyroce0",)))
        answer = receive(sock).value
    assert answer[:2] == ("err", errno.EPROTO)


@pytest.mark.parametrize("folder", ["same", "other"])
def test_a_second_nic_on_the_same_address_says_so(nic, tmp_path, folder):
    """On the same place (folder); or of another stats folder, whose engines would join the
    address's SO_REUSEPORT group where a bind used to fail."""
    place, env, _ = nic
    if folder == "other":
        env = {**env, "PYROCE_STATS_DIR": str(tmp_path / "other")}
    done = subprocess.run([sys.executable, "-m", "pyroce", "nicd"], env=env, capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    why = (f"a shared NIC already serves pyroce0 on {place.address}" if folder == "same" else
           f"a shared NIC of another stats folder already serves {place.address}")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"pyroce nicd: error: {why}"]


def test_an_engine_that_ends_takes_the_nic_down(nic, tmp_path):
    """The kernel renumbers an address's sockets when one goes, so the others would get its
    datagrams: the NIC stops, and says why."""
    place, env, process = nic
    first, second = connect(place, start=False), connect(place, start=False)  # the second starts engine 1
    for conn in (first, second):
        conn.call("open_context", "pyroce0")
    engines = status(env)["engines"]
    assert [engine["index"] for engine in engines] == [0, 1] and engines[1]["pid"] != process.pid
    os.kill(engines[1]["pid"], signal.SIGKILL)
    assert process.wait(10) == 0
    log = (tmp_path / "stats" / "nicd.log").read_text()
    assert f"engine 1 (pid {engines[1]['pid']}) ended: stopping the NIC" in log
    with pytest.raises(NicError):
        first.call("query_port", 1, 1)


def test_sigusr1_prints_each_threads_stack_into_the_log_and_the_nic_goes_on(nic, tmp_path):
    """What a NIC that does not stop waits for: every thread of the service and of an engine,
    each main thread in its serving loop; both serve on."""
    place, env, process = nic
    first, second = connect(place, start=False), connect(place, start=False)  # the second starts engine 1
    for conn in (first, second):
        conn.call("open_context", "pyroce0")
    engine = status(env)["engines"][1]["pid"]
    log = tmp_path / "stats" / "nicd.log"
    for pid in (process.pid, engine):
        os.kill(pid, signal.SIGUSR1)
    spin_until(lambda: log.read_text().count("in _run_module_as_main\n") == 2, "two stack dumps in the log")  # ended
    text = log.read_text()
    assert text.count("Thread 0x") >= 2  # the other threads of each (the engine thread's, the closer's)
    assert text.count(" in serve\n") >= 3  # the service's loop (two frames) and the engine's
    for conn in (first, second):
        assert conn.call("query_port", conn.call("open_context", "pyroce0")[0], 1)


def test_a_nic_stops_while_an_engine_waits_for_its_connection_manager(nic, tmp_path):
    """An engine passes a program's rdma_cm command on to the service and waits for the answer:
    a service that stops first ends that wait (EIO to the program), not the engine's 10 s."""
    place, env, process = nic
    first, second = connect(place, start=False), connect(place, start=False)  # the second starts engine 1
    for conn in (first, second):
        conn.call("open_context", "pyroce0")
    second.call("cm_open")  # engine 1's connection to the service's connection manager
    engine = status(env)["engines"][1]["pid"]
    os.kill(engine, signal.SIGSTOP)
    try:
        send(second.sock, ("cm_open", ()))  # waits in engine 1 until it runs again
        process.terminate()
        log = tmp_path / "stats" / "nicd.log"
        spin_until(lambda: "pyroce nicd: stopping:" in log.read_text(), "the service to stop")
    finally:
        os.kill(engine, signal.SIGCONT)  # it finds the program's command and the service's stop
    assert process.wait(STOP_WAIT_S) == 0
    assert "did not stop" not in log.read_text()
    answer = receive(second.sock)
    assert answer is None or answer.value[:2] == ("err", errno.EIO), answer


def test_status_waits_for_the_engines_while_the_nic_serves_on(nic):
    """``--status`` asks every engine; one that has not answered yet (busy, or waiting for the
    service's connection manager) holds up that answer, never the service's other programs."""
    place, env, _ = nic
    first, second = connect(place, start=False), connect(place, start=False)  # the second starts engine 1
    ctx = first.call("open_context", "pyroce0")[0]
    make_qp(second)
    engine = status(env)["engines"][1]["pid"]
    os.kill(engine, signal.SIGSTOP)
    try:
        asking = subprocess.Popen([sys.executable, "-m", "pyroce", "nicd", "--status", "--json"], env=env,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(0.5)  # (for the service to have it: if not yet, the ports come first regardless)
        for _ in range(3):
            assert first.call("query_port", ctx, 1)
        assert asking.poll() is None  # still waiting for engine 1
    finally:
        os.kill(engine, signal.SIGCONT)
    answer = json.loads(asking.communicate(timeout=30)[0])
    assert [entry["pid"] for entry in answer["engines"]] == [answer["pid"], engine]
    assert answer["engines"][1]["qps"] == 1  # its own answer, once it ran again


def stats_documents(env: dict[str, str]) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "pyroce", "stats", "--json"], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return json.loads(done.stdout)


def test_stats_show_a_row_per_engine(nic):
    place, env, _ = nic
    connections = [connect(place, start=False) for _ in range(2)]  # the second starts engine 1
    for conn in connections:
        conn.call("open_context", "pyroce0")
    spin_until(lambda: len(stats_documents(env)) == 2, "both engines' counters files")
    documents = sorted(stats_documents(env), key=lambda document: document["engine"]["index"])
    assert [document["engine"] for document in documents] == [{"index": 0, "of": 2}, {"index": 1, "of": 2}]
    shown = subprocess.run([sys.executable, "-m", "pyroce", "stats"], env=env, capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    assert f"pyroce0 pid {documents[1]['pid']} address {place.address} (engine 1 of 2)" in shown


def test_stop_ends_the_connections(nic):
    place, env, process = nic
    conn = connect(place, start=False)
    ctx = conn.call("open_context", "pyroce0")[0]
    done = subprocess.run([sys.executable, "-m", "pyroce", "nicd", "--stop"], env=env, capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    assert done.stdout.startswith(f"pyroce nicd: stopped pyroce0 on {place.address} (pid {process.pid})")
    process.wait(10)
    with pytest.raises(NicError) as closed:
        conn.call("query_port", ctx, 1)
    assert closed.value.errno == errno.EIO and "closed the connection" in str(closed.value)


def test_a_program_starts_the_nic_which_stops_when_idle(tmp_path):
    address = private_address()
    env = {**nic_environment(tmp_path, address), "PYROCE_NICD_IDLE": "1", "PYTHONPATH": os.getcwd()}
    program = "from pyroce.nicd.client import connection; print(connection().call('query_port', " \
              "connection().call('open_context', 'pyroce0')[0], 1).state)"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"
    assert done.stderr.startswith(f"pyroce: started the shared NIC pyroce0 on {address} (pid ")
    place = NicPlace("pyroce0", address, str(tmp_path))
    assert listening(place)  # still serving right after
    deadline = time.monotonic() + 15
    while listening(place):  # a bare connection, which is no program: it leaves the idle clock alone
        assert time.monotonic() < deadline, "the NIC did not stop when idle"
        time.sleep(0.2)
    assert "no program for 1 s: stopping" in (tmp_path / f"nicd-pyroce0@{address}.log").read_text()


def listening(place: NicPlace) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        try:
            sock.connect(place.socket_name)
        except ConnectionRefusedError:
            return False
    return True


def test_a_nic_that_cannot_bind_says_why(tmp_path):
    env = {**nic_environment(tmp_path, "192.0.2.1"), "PYTHONPATH": os.getcwd()}  # TEST-NET: no interface has it
    program = "from pyroce.nicd.client import connection; connection()"
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 1
    assert "the shared NIC pyroce0 on 192.0.2.1 cannot start: cannot serve pyroce0 on 192.0.2.1" in done.stderr


def test_doctor_names_the_shared_nic_running_or_what_keeps_it_from_starting(nic, tmp_path):
    place, env, process = nic
    running = subprocess.run([sys.executable, "-m", "pyroce", "doctor", "--json"], env=env, capture_output=True,
                             text=True, check=False)  # fmt: skip
    check = next(item for item in json.loads(running.stdout)["checks"] if item["name"] == "shared_nic")
    assert check["ok"] and check["value"].startswith(f"running: pyroce0 on {place.address}: pid {process.pid}, ")
    blocked = {**env, "PYROCE_STATS_DIR": str(tmp_path / "elsewhere")}  # another NIC's folder, the same address
    done = subprocess.run([sys.executable, "-m", "pyroce", "doctor", "--json"], env=blocked, capture_output=True,
                          text=True, check=False)  # fmt: skip
    check = next(item for item in json.loads(done.stdout)["checks"] if item["name"] == "shared_nic")
    assert done.returncode == 1 and not check["ok"]
    assert check["value"] == f"pyroce0 on {place.address} cannot start: UDP {place.address}:4791 is already in use"
