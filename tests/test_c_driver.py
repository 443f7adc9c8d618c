"""The C driver: unmodified libibverbs programs (Debian's ibverbs-utils, and a program built
here against the system's libibverbs) on pyroce's ``libibverbs.so.1``.

Skipped only where the C compiler, libibverbs-dev or ibverbs-utils are not installed; the
one-line answers for a missing compiler or header are checked everywhere."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyroce.driver.build import library_dir
from pyroce.driver.environment import driver_environment
from tests.cli import ROOT, SHARED_NIC_ADDRESS, assert_one_line_error, cli_env, free_port, listening, pyroce

TOOLS = ("ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_srq_pingpong", "ibv_ud_pingpong")
MISSING = [what for what, present in (("a C compiler (cc)", shutil.which("cc")),
                                      ("libibverbs-dev", Path("/usr/include/infiniband/verbs.h").is_file()),
                                      *((f"ibverbs-utils ({tool})", shutil.which(tool)) for tool in TOOLS))
           if not present]  # fmt: skip
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")
C_TOOL = ("ibv_rc_pingpong", "-d", "pyroce0")
PYTHON_TOOL = (sys.executable, "-m", "pyroce", "rc_pingpong")
UD_C_TOOL = ("ibv_ud_pingpong", "-d", "pyroce0")
UD_PYTHON_TOOL = (sys.executable, "-m", "pyroce", "ud_pingpong")
ITERS = re.compile(r"^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$", re.MULTILINE)
NIC_STARTED = re.compile(r"^pyroce: started the shared NIC .*\n", re.MULTILINE)  # a program found none running
COUNTERS = re.compile(r"^pyroce0 counters: sent_pkts (\d+), rcvd_pkts (\d+), icrc_errors (\d+), "
                      r"retransmitted_pkts \d+, drop_wrong_source (\d+)$", re.MULTILINE)  # fmt: skip


def address(index: int) -> str:
    """A loopback address of this test process's own (another run may share the host)."""
    return f"127.59.{os.getpid() % 250 + 1}.{index}"


@pytest.fixture(scope="module")
def driver_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a program on the C driver, built into this run's own cache (so the
    build itself is tested), each process on its own loopback address."""
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("PYROCE_CACHE_DIR")
    os.environ["PYROCE_CACHE_DIR"] = str(cache)
    try:
        folder = library_dir()
    finally:
        if old is None:
            del os.environ["PYROCE_CACHE_DIR"]
        else:
            os.environ["PYROCE_CACHE_DIR"] = old
    env = driver_environment(folder, cli_env(drop=("PYROCE_ADDR", "PYROCE_PROGRESS", "PYROCE_FAULTS")))
    return {**env, "PYROCE_CACHE_DIR": str(cache), "PYROCE_ADDR": SHARED_NIC_ADDRESS}


@needs_tools
def test_the_build_is_cached_and_exports_libibverbs_versions(driver_env: dict[str, str]) -> None:
    library = Path(driver_env["LD_LIBRARY_PATH"].split(os.pathsep)[0]) / "libibverbs.so.1"
    built = library.stat().st_mtime_ns
    os.environ["PYROCE_CACHE_DIR"] = driver_env["PYROCE_CACHE_DIR"]
    try:
        assert library_dir() == library.parent
    finally:
        del os.environ["PYROCE_CACHE_DIR"]
    assert library.stat().st_mtime_ns == built, "a second use compiled again"
    symbols = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True, check=True).stdout
    for symbol, version in (("ibv_get_device_list", "IBVERBS_1.1"), ("ibv_create_comp_channel", "IBVERBS_1.0"),
                            ("_ibv_query_gid_ex", "IBVERBS_1.11"), ("ibv_query_qp_data_in_order", "IBVERBS_1.14"),
                            ("ibv_query_gid_type", "IBVERBS_PRIVATE_34")):  # fmt: skip
        assert re.search(rf"\b{version}\s+{symbol}$", symbols, re.MULTILINE), f"{symbol}@{version}"


@needs_tools
@pytest.mark.parametrize("argv", [("devices",), ("devinfo",), ("devinfo", "-v")], ids=" ".join)
def test_ibv_devices_and_devinfo_print_what_pyroce_prints(driver_env: dict[str, str], argv: tuple[str, ...]) -> None:
    """Through ``pyroce run``, the C tools print pyroce0 line for line as the Python tools do
    (the same address for both: the GUID and GID follow it). The Python tool's device is its own,
    so it runs first, before the C tool's shared NIC holds the address (stopped after)."""
    env = {"PYROCE_ADDR": address(1), "PYROCE_CACHE_DIR": driver_env["PYROCE_CACHE_DIR"]}
    python_tool = pyroce(*argv, env=env, timeout=120)
    c_tool = pyroce("run", "--", f"ibv_{argv[0]}", *argv[1:], env=env, timeout=120)
    assert pyroce("nicd", "--stop", env=env).returncode == 0
    assert c_tool.returncode == 0 and python_tool.returncode == 0, (c_tool.stderr, python_tool.stderr)
    assert "pyroce0" in c_tool.stdout
    assert c_tool.stdout == python_tool.stdout


@needs_tools
@pytest.mark.parametrize(("size", "offset"), [(1, 0), (4096, 1), (65536, 2)])
def test_rc_pingpong_between_two_c_programs(driver_env: dict[str, str], size: int, offset: int) -> None:
    server_out, client_out = rc_pingpong(driver_env, C_TOOL, C_TOOL, free_port(10 + offset), "-s", str(size))
    for out in (server_out, client_out):
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]
        assert "invalid data" not in out


def tool_env(tool: tuple[str, ...], env: dict[str, str]) -> dict[str, str]:
    """A Python tool runs its own NIC, on its own address: not the C programs' shared NIC's."""
    return {name: value for name, value in env.items() if name != "PYROCE_ADDR" or tool[0] != sys.executable}


def rc_pingpong(env: dict[str, str], server: tuple[str, ...], client: tuple[str, ...], port: int,
                *options: str, check: bool = True) -> tuple[str, str]:  # fmt: skip
    """Run a server and a client (each a C tool or its ``pyroce`` twin) of 200 ping-pongs,
    with buffer checks unless ``check`` is False; both outputs (stdout, then stderr), each having exited 0."""
    argv = ("-g", "0", "-p", str(port), "-n", "200", *(("-c",) if check else ()), *options)
    serving = subprocess.Popen([*server, *argv], env=tool_env(server, env), text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            assert serving.poll() is None and time.monotonic() < deadline, serving.communicate()
            time.sleep(0.02)
        done = subprocess.run([*client, *argv, "127.0.0.1"], env=tool_env(client, env), capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
        server_out, server_err = serving.communicate(timeout=300)
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.communicate()
    assert done.returncode == 0, done.stdout + done.stderr
    assert serving.returncode == 0, server_out + server_err
    return server_out + server_err, done.stdout + done.stderr


@needs_tools
def test_print_stats_prints_a_c_programs_counters_when_its_device_closes(driver_env: dict[str, str]) -> None:
    """PYROCE_PRINT_STATS=1: how tools/rxe_interop.sh --c learns that pyroce counted no ICRC error
    in a program that prints no counters of its own. 200 round trips of 4 KiB at MTU 1024 are at
    least 800 packets each way."""
    env = {**driver_env, "PYROCE_PRINT_STATS": "1"}
    for out in rc_pingpong(env, C_TOOL, C_TOOL, free_port(18), "-s", "4096", "-m", "1024"):
        assert len(COUNTERS.findall(out)) == 1, out
        sent, received, icrc_errors, wrong_source = map(int, COUNTERS.search(out).groups())  # type: ignore[union-attr]
        assert sent >= 800 and received >= 800 and icrc_errors == 0 and wrong_source == 0, out
    quiet, _ = rc_pingpong(driver_env, C_TOOL, C_TOOL, free_port(19), "-s", "1")
    assert "counters" not in quiet


@needs_tools
def test_print_stats_prints_the_counters_of_a_program_that_exits_with_its_device_open(
    driver_env: dict[str, str],
) -> None:
    """ibv_rc_pingpong returns from main without closing its device when it cannot reach its
    server: the counters are printed at exit all the same."""
    done = subprocess.run([*C_TOOL, "-p", str(free_port(20)), "127.0.0.1"], env={**driver_env, "PYROCE_PRINT_STATS": "1"},
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode != 0 and "Couldn't connect" in done.stderr, done.stderr
    assert len(COUNTERS.findall(done.stderr)) == 1, done.stderr


@needs_tools
@pytest.mark.parametrize(("tool", "offset"), [("ibv_uc_pingpong", 3), ("ibv_srq_pingpong", 4)])
def test_uc_and_srq_pingpong_between_two_c_programs(driver_env: dict[str, str], tool: str, offset: int) -> None:
    """UC SENDs, and RC SENDs to 16 QPs taking their receives from one SRQ."""
    command = (tool, "-d", "pyroce0")
    for out in rc_pingpong(driver_env, command, command, free_port(10 + offset), "-s", "4096"):
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]


@needs_tools
def test_ud_pingpong_between_two_c_programs(driver_env: dict[str, str]) -> None:
    """UD SENDs through AHs, 2 KiB each (Debian's tool sends 1 KiB unless told: -s always)."""
    for out in rc_pingpong(driver_env, UD_C_TOOL, UD_C_TOOL, free_port(15), "-s", "2048"):
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]
        assert "invalid data" not in out


@needs_tools
@pytest.mark.parametrize(("server", "client"), [(UD_C_TOOL, UD_PYTHON_TOOL), (UD_PYTHON_TOOL, UD_C_TOOL)],
                         ids=["c-py", "py-c"])  # fmt: skip
def test_ud_pingpong_c_against_python(driver_env: dict[str, str], server: tuple[str, ...],
                                      client: tuple[str, ...]) -> None:  # fmt: skip
    """pyroce ud_pingpong has no buffer check (-c): the datagrams' sizes and count are the check.
    No -s: both tools' default is 1024 bytes (rdma-core 44's code, whatever its help says)."""
    port = free_port(16 + (server is UD_C_TOOL))
    for out in rc_pingpong(driver_env, server, client, port, check=False):
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]
        assert out.count("409600 bytes in ") == 1, out


@needs_tools
def test_ud_verbs_from_a_program_built_against_libibverbs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """Two UD QPs of one device: a datagram each way (the answer through an AH made from the
    received WC and its GRH), the receive WC's UD fields, and AHs and UD posts misused."""
    done = run_c_program("ud_verbs", driver_env, tmp_path, address(3))
    results = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines()
                   if not line.startswith(("wc ", "received ", "back ", "no_grh ")))  # fmt: skip
    einval, eopnotsupp = str(22), str(95)
    for what in ("create_ah_without_grh", "create_ah_sgid_index_7", "post_rdma_write_on_ud", "post_send_without_ah",
                 "post_send_qpn_above_24_bits", "create_ah_from_an_empty_header"):  # fmt: skip
        assert results.pop(what) == einval, what
    assert results.pop("create_ah_to_gid_zero") == eopnotsupp  # no link reaches it (pyroce.verbs.ah)
    # max_inline_data 64 asked of a UD QP: its WQE holds 124 inline bytes, and ibv_create_qp says
    # so, as libmlx5 does. UCX reads it back: its 65-byte connection request then goes inline
    # (copied at post), not from a buffer UCX reuses before the NIC has read it, which crashed
    # four MPI ranks (tests/test_mpi.py).
    assert results.pop("max_inline_data_written_back") == "124"
    assert set(results.values()) == {"0"}, results
    completions = [line for line in done.stdout.splitlines() if line.startswith("wc ")]
    # SEND (0) and RECV (128), in either order: 40 bytes of GRH room counted, from the peer QP; a
    # receive's sl is RoCEv2's packet type as libmlx5 reads it from a ConnectX's CQE: UDP | IPv4 (10)
    expected = [
        "wc wr_id=100 status=success opcode=0 byte_len=0 grh=0 src_qp_is_peer=0 sl=0 pkey_index=0 imm=0x00000000",
        "wc wr_id=1 status=success opcode=128 byte_len=140 grh=1 src_qp_is_peer=1 sl=10 pkey_index=0 imm=0xabcd0123",
        "wc wr_id=50 status=success opcode=0 byte_len=0 grh=0 src_qp_is_peer=0 sl=0 pkey_index=0 imm=0x00000000",
        "wc wr_id=2 status=success opcode=128 byte_len=90 grh=1 src_qp_is_peer=1 sl=10 pkey_index=0 imm=0x00000000",
    ]
    assert sorted(completions) == sorted(expected), done.stdout
    assert "received a datagram from C" in done.stdout and "received an answer" in done.stdout
    assert "back is_global=1 dgid_is_own=1 sgid_index=3 port_num=1" in done.stdout
    assert "no_grh is_global=0" in done.stdout


@needs_tools
def test_multicast_from_a_program_built_against_libibverbs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """mckey's flow after its join: two UD QPs attached to a group both receive one datagram
    sent to the MGID with QPN 0xFFFFFF; rxe's EINVAL for an RC QP, a unicast GID, detaching
    what is not attached; destroying an attached QP detaches it."""
    done = run_c_program("mcast_verbs", driver_env, tmp_path, address(4))
    results = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines() if not line.startswith("received "))
    for what in ("attach_rc_qp", "attach_unicast_gid", "detach_not_attached", "detach_twice"):
        assert results.pop(what) == str(errno.EINVAL), what
    assert set(results.values()) == {"0"}, results
    received = sorted(line for line in done.stdout.splitlines() if line.startswith("received "))
    assert received == [
        f"received member={member} wr_id={10 + member} status=success byte_len=56 grh=1 src_qp_is_sender=1 "
        "data=to every member"
        for member in (0, 1)
    ], done.stdout


@needs_tools
def test_memory_windows_from_a_program_built_against_libibverbs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """Type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW) windows on an RC QP connected to
    itself: writes through each land, SEND with invalidate and LOCAL_INV take a window back,
    a write through it then fails; windows misused get libibverbs' errnos."""
    done = run_c_program("mw_verbs", driver_env, tmp_path, address(4))
    lines = done.stdout.splitlines()
    results = dict(line.rsplit(" ", 1) for line in lines if not line.startswith(("wc ", "window", "type1 ")))
    einval, ebusy = str(22), str(16)
    for what in ("alloc_mw_type_3", "bind_mw_type_2_by_verb", "bind_mw_zero_based"):
        assert results.pop(what) == einval, what
    assert results.pop("dealloc_pd_with_windows") == ebusy
    assert set(results.values()) == {"0"}, results
    bind, write, recv, send, local_inv = 5, 1, 128, 0, 6  # IBV_WC_BIND_MW, RDMA_WRITE, RECV, SEND, LOCAL_INV
    expected = [  # a RECV and a SEND may complete in either order
        f"wc wr_id=21 status=success opcode={bind} with_inv=0",
        f"wc wr_id=22 status=success opcode={write} with_inv=0",
        f"wc wr_id=31 status=success opcode={bind} with_inv=0",
        f"wc wr_id=32 status=success opcode={write} with_inv=0",
        f"wc wr_id=33 status=success opcode={recv} with_inv=1",
        f"wc wr_id=34 status=success opcode={send} with_inv=0",
        f"wc wr_id=41 status=success opcode={bind} with_inv=0",
        f"wc wr_id=42 status=success opcode={local_inv} with_inv=0",
        f"wc wr_id=43 status=Work Request Flushed Error opcode={write} with_inv=0",  # a failed WR names its opcode
    ]
    assert sorted(line for line in lines if line.startswith("wc ")) == sorted(expected), done.stdout
    assert "type1 rkey_is_next=1" in lines
    assert [line for line in lines if line.startswith("window")] == [
        "window1 through a type 1 window", "window2 through a type 2 window", "window2 through a type 2 window"]  # fmt: skip


@needs_tools
def test_advise_mr_from_a_program_built_against_libibverbs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """ibv_advise_mr (verbs_context.advise_mr): each advice, synchronous and not, and 4095 SGEs
    (libibverbs' most) pass; misuse has the kernel's errno (ib_uverbs', rxe's)."""
    done = run_c_program("advise_mr", driver_env, tmp_path, address(11))
    results = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    expected = {"einval": errno.EINVAL, "eperm": errno.EPERM, "efault": errno.EFAULT, "eopnotsupp": errno.EOPNOTSUPP}
    for what, got in results.items():
        assert got == str(expected.get(what.split("_", 1)[0], 0)), (what, done.stdout)
    assert len(results) == 18, done.stdout


@needs_tools
def test_zero_length_writes_with_rkey_0_from_a_program_built_against_libibverbs(
    driver_env: dict[str, str], tmp_path: Path
) -> None:
    """UCX's flush: zero-length RDMA WRITEs to address 0 with rkey 0 (no SGE, a zero-length SGE)
    are posted, complete with success and change nothing."""
    done = run_c_program("zero_length_write", driver_env, tmp_path, address(10))
    lines = done.stdout.splitlines()
    results = dict(line.rsplit(" ", 1) for line in lines if not line.startswith("wc "))
    assert results.pop("untouched") == "1"
    assert set(results.values()) == {"0"}, results
    assert [line for line in lines if line.startswith("wc ")] == [
        f"wc wr_id={wr_id} status=success opcode=1 byte_len=0" for wr_id in (1, 2)], done.stdout  # IBV_WC_RDMA_WRITE


@needs_tools
def test_extended_verbs_from_a_program_built_against_libibverbs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """ibv_create_qp_ex's wr_* builders in batches (every opcode, SGE lists, inline data copied
    when set, windows, a UD address) read through ibv_create_cq_ex's start/next/end_poll; a
    batch with a bad WR or aborted posts nothing; what rxe does not offer is EOPNOTSUPP."""
    done = run_c_program("qp_ex_verbs", driver_env, tmp_path, address(5))
    lines = done.stdout.splitlines()
    results = dict(line.rsplit(" ", 1) for line in lines if " " in line and "=" not in line and ":" not in line
                   and not line.startswith(("written ", "sent ", "read ", "window ", "datagram ")))  # fmt: skip
    einval, eopnotsupp = str(22), str(95)
    for what in ("create_cq_ex_timestamp", "create_qp_ex_ud_rdma_write", "wr_complete_cmp_swp_not_in_send_ops"):
        assert results.pop(what) == eopnotsupp, what
    for what in ("create_qp_ex_without_pd", "wr_complete_setter_without_builder", "wr_complete_three_sges",
                 "wr_complete_without_start"):  # fmt: skip
        assert results.pop(what) == einval, what
    assert set(results.values()) == {"0"}, results
    assert "plain_qp_to_qp_ex_is_null=1" in lines
    tail = "imm=0x00000000 inv=0x0 grh=0 src_qp_is_peer=0"
    # WRITE 1, SEND 0, FETCH_ADD 4, READ 2, BIND_MW 5, LOCAL_INV 6, RECV 128, RECV_RDMA_WITH_IMM 129; nothing
    # of the refused or aborted batches (wr_id 11, 12) completes
    expected = [
        "wc wr_id=9 status=success opcode=128 byte_len=24 imm=0x1234abcd inv=0x0 grh=0 src_qp_is_peer=0",
        f"wc wr_id=1 status=success opcode=1 byte_len=0 {tail}",
        f"wc wr_id=2 status=success opcode=0 byte_len=0 {tail}",
        f"wc wr_id=3 status=success opcode=4 byte_len=8 {tail}",
        f"wc wr_id=4 status=success opcode=2 byte_len=26 {tail}",
        f"wc wr_id=20 status=success opcode=5 byte_len=0 {tail}",
        "wc wr_id=19 status=success opcode=129 byte_len=8 imm=0x0000feed inv=0x0 grh=0 src_qp_is_peer=0",
        f"wc wr_id=21 status=success opcode=1 byte_len=0 {tail}",
        f"wc wr_id=22 status=success opcode=6 byte_len=0 {tail}",
        f"wc wr_id=30 status=success opcode=0 byte_len=0 {tail}",
        "wc wr_id=29 status=success opcode=128 byte_len=56 imm=0x00000000 inv=0x0 grh=1 src_qp_is_peer=1",
    ]
    assert sorted(line for line in lines if line.startswith("wc ")) == sorted(expected), done.stdout
    for line in ("written written by wr_rdma_write", "sent inline, copied when set", "fetch_add before=37 after=42",
                 "read read back by| wr_rdma_read", "window written", "datagram written by wr_rd"):  # fmt: skip
        assert line in lines, line


def build_c_program(name: str, tmp_path: Path, libraries: tuple[str, ...] = ("-libverbs",)) -> Path:
    """tests/c/<name>.c compiled here against the system's libibverbs (and ``libraries``)."""
    program = tmp_path / name
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(program), str(ROOT / "tests" / "c" / f"{name}.c"),
                    *libraries], check=True, capture_output=True)  # fmt: skip
    return program


def run_c_program(name: str, env: dict[str, str], tmp_path: Path, device_address: str,
                  libraries: tuple[str, ...] = ("-libverbs",)) -> subprocess.CompletedProcess:  # fmt: skip
    """tests/c/<name>.c built (``build_c_program``) and run on pyroce's libibverbs; it exited 0."""
    program = build_c_program(name, tmp_path, libraries)
    done = subprocess.run([str(program)], env={**env, "PYROCE_ADDR": device_address}, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@needs_tools
@pytest.mark.parametrize(("server", "client"), [(C_TOOL, PYTHON_TOOL), (PYTHON_TOOL, C_TOOL)], ids=["c-py", "py-c"])
def test_rc_pingpong_c_against_python(driver_env: dict[str, str], server: tuple[str, ...],
                                      client: tuple[str, ...]) -> None:  # fmt: skip
    for out in rc_pingpong(driver_env, server, client, free_port(13 + (server is C_TOOL)), "-s", "4096"):
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]
        assert "invalid data" not in out


@needs_tools
def test_verbs_pyroce_lacks_are_eopnotsupp_and_misuse_has_libibverbs_errnos(
    driver_env: dict[str, str], tmp_path: Path
) -> None:
    """A program compiled here against the system's libibverbs (its headers, its -libverbs):
    every verb pyroce lacks fails with EOPNOTSUPP, misuse with libibverbs' errno, nothing
    crashes (nor hangs: a forked child is refused), and a SEND with immediate from a QP to
    itself arrives, also after a CQ resize and a reset."""
    done = run_c_program("verbs_errnos", driver_env, tmp_path, address(2))
    results = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines()
                   if not line.startswith(("wc ", "received ", "query ")))  # fmt: skip
    eopnotsupp, einval, ebusy = str(95), str(22), str(16)
    for verb in ("create_qp_ex_tso", "create_cq_ex", "import_device", "create_qp_ex_create_flags"):
        assert results.pop(verb) == eopnotsupp, verb
    for verb in ("reg_mr_implicit_odp", "rereg_mr_translation_to_null", "post_bind_mw_without_window", "reg_mr_remote_write_alone", "create_srq_too_big", "modify_srq_limit_above_max_wr", "query_port_2", "query_gid_16", "create_cq_too_big", "post_send_in_reset",
                 "post_recv_in_reset", "modify_reset_to_rts", "post_opcode_99", "post_two_sges", "create_qp_sq_too_big",
                 "create_qp_send_cq_of_other_context", "create_qp_srq_of_other_context"):  # fmt: skip
        assert results.pop(verb) == einval, verb
    assert results.pop("destroy_cq_in_use") == results.pop("dealloc_pd_in_use") == ebusy
    assert results.pop("query_gid_ex_5") == str(61)  # ENODATA: an empty entry of the GID table
    for verb in ("fork_child_alloc_pd", "fork_child_post_send", "fork_child_post_recv", "fork_child_post_srq_recv",
                 "fork_child_poll_cq"):  # fmt: skip
        assert results.pop(verb) == str(5), verb  # EIO
    assert done.stderr.count("pyroce: a child of fork() cannot use its parent's verbs objects: open the device "
                             "again\n") == 1  # fmt: skip
    assert set(results.values()) == {"0"}, results
    completions = [line for line in done.stdout.splitlines() if line.startswith("wc ")]
    assert completions == [  # IBV_WC_RECV (128) with the immediate, then IBV_WC_SEND (0)
        "wc wr_id=9 status=success opcode=128 byte_len=100 imm=0x12345678",
        "wc wr_id=7 status=success opcode=0 byte_len=0 imm=0x00000000",
        # after ERROR (a receive's flush left unpolled), RESET and a new connection: the flush
        # is skipped, the new work completes, in the CQ resized meanwhile
        "wc wr_id=19 status=success opcode=128 byte_len=100 imm=0x12345678",
        "wc wr_id=17 status=success opcode=0 byte_len=0 imm=0x00000000",
    ], done.stdout
    assert "received pyroce from C" in done.stdout and "received after reset" in done.stdout
    assert "query state=3 dest_qp_num_is_own=1 max_recv_wr=4" in done.stdout  # IBV_QPS_RTS
    assert "query moved_addr_is_other=1 length=4096" in done.stdout


@needs_tools
def test_a_destroyed_qp_leaves_nothing_in_its_cqs(driver_env: dict[str, str], tmp_path: Path) -> None:
    """A QP destroyed while a thread polls its CQ (300 times, with completions arriving): the
    poller gets no completion of a QP that is gone (wr_id 0) and does not crash; CQEs left
    unpolled at destroy are cleaned out of the CQ, the other QP's kept, and the SRQ WQEs they
    had consumed can be posted again. A WRITE to an invalid rkey moves the QP to ERROR, and
    ibv_query_qp says so."""
    done = run_c_program("qp_lifetime", driver_env, tmp_path, address(6))
    lines = done.stdout.splitlines()
    results = dict(line.rsplit(" ", 1) for line in lines if not line.startswith(("wc ", "come_and_go ", "write ",
                                                                                   "query ")))  # fmt: skip
    assert results.pop("post_srq_recv_beyond_max_wr") == str(12), done.stdout  # ENOMEM
    assert set(results.values()) == {"0"}, done.stdout
    assert "come_and_go completed_some=1" in lines
    assert "write failed=1" in lines and "query state=6 qp_state=6" in lines  # IBV_QPS_ERR, the NIC's
    assert [line for line in lines if line.startswith("wc ")] == [
        "wc after destroy: wr_id=200 of_kept_qp=1 status=0", "wc after destroy: wr_id=201 of_kept_qp=1 status=0"]  # fmt: skip


@needs_tools
def test_event_waits_end_on_a_signal_as_a_read_does(driver_env: dict[str, str], tmp_path: Path) -> None:
    """ibv_get_cq_event and ibv_get_async_event wait in C as a read(2) of the kernel's event
    files: SIGALRM with a handler installed without SA_RESTART ends the wait with EINTR (it
    went on, in Python, before), with SA_RESTART the wait goes on and takes the event that comes;
    a non-blocking fd is EAGAIN at once."""
    done = run_c_program("event_waits", driver_env, tmp_path, address(7))
    lines = done.stdout.splitlines()
    results = dict(line.rsplit(" ", 1) for line in lines if not line.startswith(("restarted ", "async ")))
    for what in ("get_cq_event_interrupted", "get_async_event_interrupted"):
        assert results.pop(what) == str(4), what  # EINTR
    for what in ("get_cq_event_nonblocking", "get_async_event_nonblocking"):
        assert results.pop(what) == str(11), what  # EAGAIN
    for what in ("fork_child_get_cq_event", "fork_child_get_async_event"):
        assert results.pop(what) == str(5), what  # EIO, at once: no wait on the parent's fds
    assert set(results.values()) == {"0"}, done.stdout
    assert "restarted alarms=2 event_cq_is_cq=1" in lines
    assert "async event_type=5 qp_is_qp=1" in lines  # IBV_EVENT_SQ_DRAINED


def test_a_missing_header_is_one_line(tmp_path: Path) -> None:
    result = pyroce("run", "--", "true", env={"PYROCE_VERBS_INCLUDE": str(tmp_path),
                                                      "PYROCE_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert_one_line_error(result, "<infiniband/verbs.h> not found: install libibverbs-dev")
    assert result.stderr == ("pyroce run: error: <infiniband/verbs.h> not found: install libibverbs-dev "
                             "(apt-get install libibverbs-dev)\n")  # fmt: skip


def test_a_missing_compiler_is_one_line(tmp_path: Path) -> None:
    if not Path("/usr/include/infiniband/verbs.h").is_file():
        pytest.skip("libibverbs-dev is not installed: the header is what is missing first")
    result = pyroce("run", "--", "true", env={"CC": str(tmp_path / "no-cc"),
                                                      "PYROCE_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert_one_line_error(result, "no C compiler", "install gcc")


@pytest.mark.parametrize(("variable", "value"), [("PYROCE_ADDR", "10.0.0.300"), ("PYROCE_GSO", "maybe"),
                                                  ("PYROCE_PROGRESS", "fast")])  # fmt: skip
def test_run_checks_the_pyroce_variables_at_start(variable: str, value: str) -> None:
    """Said before the program runs, whether or not a shared NIC already serves the address."""
    assert_one_line_error(pyroce("run", "--", "true", env={variable: value}), f"{variable}={value!r}")


def test_run_needs_a_program(tmp_path: Path) -> None:
    assert_one_line_error(pyroce("run"), "nothing to run")
    assert_one_line_error(pyroce("run", "--", "no-such-program-here"), "no-such-program-here: command not found")
    script = tmp_path / "not_executable.sh"
    script.write_text("#!/bin/sh\n")
    assert_one_line_error(pyroce("run", "--", str(script)), f"{script}: Permission denied (not executable")


@needs_tools
def test_ibv_asyncwatch_opens_pyroce0_and_waits_for_events(driver_env: dict[str, str]) -> None:
    """ibv_asyncwatch prints its async event fd and waits (no event comes to a device nobody
    uses): it runs until stopped, no crash and nothing on stderr but the line of the shared NIC
    it started."""
    watcher = subprocess.Popen(["ibv_asyncwatch", "-d", "pyroce0"], env=driver_env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert watcher.stdout is not None
        assert re.fullmatch(r"pyroce0: async event FD \d+\n", watcher.stdout.readline())
        time.sleep(0.5)
        assert watcher.poll() is None, watcher.communicate()
    finally:
        watcher.kill()
        _, err = watcher.communicate()
    assert NIC_STARTED.sub("", err) == ""


@needs_tools
def test_a_c_program_runs_with_no_interpreter_and_says_why_a_verb_failed_when_verbose(
    driver_env: dict[str, str], tmp_path: Path
) -> None:
    """The library speaks the shared NIC's protocol itself: it links no libpython, and a program
    that used the verbs has none mapped and no Python symbol to find. A verb the NIC refuses
    fails with its errno, silently, and says why on stderr under PYROCE_VERBOSE=1."""
    library = Path(driver_env["LD_LIBRARY_PATH"].split(os.pathsep)[0]) / "libibverbs.so.1"
    linked = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libpython" not in linked and "libc.so" in linked, linked
    for verbose in ("", "1"):
        done = run_c_program("no_interpreter", {**driver_env, "PYROCE_VERBOSE": verbose}, tmp_path, address(8))
        results = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
        assert results.pop("create_cq_zero") == str(22), done.stdout  # EINVAL
        assert set(results.values()) == {"0"}, done.stdout  # libpython_mapped 0, python_symbol 0 among them
        said = [line for line in NIC_STARTED.sub("", done.stderr).splitlines()]
        if verbose:
            assert len(said) == 1 and said[0].startswith("pyroce: ibv_create_cq: "), done.stderr
        else:
            assert said == [], done.stderr


@needs_tools
def test_a_nic_that_cannot_start_is_one_line_and_eio(driver_env: dict[str, str], tmp_path: Path) -> None:
    """No NIC serves 192.0.2.1 and none can (no interface has a TEST-NET address): the program's
    ibv_open_device fails with EIO, and the NIC's reason is said once, however often it tries."""
    env = {**driver_env, "PYROCE_STATS_DIR": str(tmp_path / "stats")}
    program = tmp_path / "no_interpreter"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(program), str(ROOT / "tests" / "c" / "no_interpreter.c"),
                    "-libverbs"], check=True, capture_output=True)  # fmt: skip
    done = subprocess.run([str(program), "open-twice"], env={**env, "PYROCE_ADDR": "192.0.2.1"}, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["open_first 5", "open_second 5"]
    assert done.stderr.startswith("pyroce: the shared NIC pyroce0 on 192.0.2.1 cannot start: cannot serve pyroce0 "
                                  "on 192.0.2.1: "), done.stderr  # fmt: skip
    assert done.stderr.count("\n") == 1, done.stderr
