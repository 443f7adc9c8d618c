"""rdma-core's own pyverbs and test suite (Debian's python3-pyverbs) on pyroce through the C
driver: a stable subset of the suite through ``pyroce rdma-core-tests`` with no failure and no
error, a pyverbs RC ping-pong, and the reading of unittest's ``-v`` logs.

The suite and the ping-pong are skipped only where python3-pyverbs cannot be installed (CI
installs it), or where the C driver cannot be built (no cc or libibverbs-dev)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyroce.cli.errors import CliError
from pyroce.cli.rdma_core_tests import ensure_suite
from pyroce.cli.unittest_log import CaseResult, parse, tally
from tests.cli import ROOT, SHARED_NIC_ADDRESS, pyroce
from tests.netns import two_hosts  # noqa: F401 - a fixture (ruff: F811 below is its use)

PYTHON = "/usr/bin/python3"  # the Python Debian's pyverbs is built for
SUBSET = (
    "tests.test_pd.",
    "tests.test_cq.",
    "tests.test_device.",
    "tests.test_atomic.",
    "tests.test_fork.",
    "tests.test_mr.",
    "tests.test_qp.",
    "tests.test_qpex.",
    "tests.test_shared_pd.",
)


@pytest.fixture(scope="module")
def pyverbs() -> None:
    if not (shutil.which("cc") and Path("/usr/include/infiniband/verbs.h").is_file()):
        pytest.skip("the C driver needs cc and libibverbs-dev")
    try:
        ensure_suite(PYTHON, install=True)
    except CliError as exc:
        pytest.skip(str(exc))


def test_a_subset_of_rdma_core_tests_passes_on_pyroce(pyverbs: None, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = [arg for pattern in SUBSET for arg in ("-k", pattern)]
    done = pyroce("rdma-core-tests", *args, "--work-dir", str(tmp_path), "--json", str(report), timeout=600,
                  env={"PYROCE_ADDR": SHARED_NIC_ADDRESS})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(report.read_text())
    assert found["totals"]["fail"] == found["totals"]["error"] == 0
    outcomes = {test["id"]: test["outcome"] for test in found["tests"]}
    assert set(found["files"]) == {pattern.split(".")[1] for pattern in SUBSET}
    # traffic (atomics between two QPs), the extended query, and what pyroce offers no skip for
    assert outcomes["tests.test_atomic.AtomicTest.test_atomic_cmp_and_swap"] == "pass"
    assert outcomes["tests.test_device.DeviceTest.test_phys_port_cnt_ex"] == "pass"
    # an empty GID index after Linux's four entries: ENODATA (it skips when every index holds a GID)
    assert outcomes["tests.test_device.DeviceTest.test_query_gid_ex_bad_flow"] == "pass"
    # memory windows (a bind asking local write too), a new translation by rereg, extended UC and
    # UD QPs (comp_mask with create flags), importing a context (EOPNOTSUPP: a skip)
    for test in ("test_mr.MWTest.test_mw_type1", "test_mr.MWTest.test_mw_type2_invalidate_remote",
                 "test_mr.MRTest.test_mr_rereg_addr", "test_qp.QPTest.test_create_ud_qp_ex_with_attr",
                 "test_qp.QPTest.test_create_uc_qp_ex_no_attr", "test_qpex.QpExTestCase.test_qp_ex_rc_bind_mw"):  # fmt: skip
        assert outcomes[f"tests.{test}"] == "pass", test
    assert outcomes["tests.test_shared_pd.SharedPDTestCase.test_imported_rc_ex_rdma_write"] == "skip"
    assert [
        test for test in found["tests"] if test["id"].startswith("tests.test_pd.") and test["outcome"] != "pass"
    ] == []
    assert "| **total** |" in done.stdout


def test_rdma_cores_rdmacm_tests_pass_on_the_shared_nic(pyverbs: None, two_hosts: tuple[str, str],  # noqa: F811
                                                        tmp_path: Path) -> None:  # fmt: skip
    """test_rdmacm forks a passive and an active side on the first address of the device's
    netdev, which the suite finds in sysfs (served by pyroce run) and `ip addr`: in a network
    namespace of its own, the veth holding the NIC's address; both processes' CMs are the one
    shared NIC's there. All ten pass, the multicast ones too (both sides join 230.x.y.z)."""
    report = tmp_path / "report.json"
    done = pyroce("rdma-core-tests", "-k", "tests.test_rdmacm.", "--work-dir", str(tmp_path), "--json", str(report),
                  netns=two_hosts[0], timeout=600, env={"PYROCE_ADDR": "10.199.0.1"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = {test["id"].rpartition(".")[2]: test["outcome"] for test in json.loads(report.read_text())["tests"]}
    passing = ("test_rdmacm_sync_traffic", "test_rdmacm_async_traffic", "test_rdmacm_async_read",
               "test_rdmacm_async_write", "test_rdmacm_async_reject_traffic", "test_rdmacm_async_udp_traffic",
               "test_rdmacm_async_traffic_external_qp", "test_rdmacm_async_multicast_traffic",
               "test_rdmacm_async_ex_multicast_traffic", "test_rdmacm_async_ex_leave_multicast_traffic")  # fmt: skip
    assert outcomes == dict.fromkeys(passing, "pass")  # multicast included: rdma_join_multicast(_ex) and its QP attach


def test_pyverbs_rc_ping_pong_through_the_c_driver(pyverbs: None) -> None:
    """This tree's ``pyroce run`` (PYTHONPATH names it: without, ``-m pyroce`` is whichever pyroce
    is installed, whose library this tree's NIC would refuse) runs Debian's Python without it."""
    done = pyroce("run", "--", "env", "-u", "PYTHONPATH", PYTHON, str(ROOT / "benchmarks" / "pyverbs_pingpong.py"),
                  "--iters", "50", timeout=120, env={"PYROCE_ADDR": SHARED_NIC_ADDRESS})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("50 round trips of 64 bytes: ")


LOG = """\
test_alloc_pd (tests.test_pd.PDTest.test_alloc_pd)
Test ibv_alloc_pd() ... ok
test_plain (tests.test_pd.PDTest.test_plain) ... printed by the test
ok
test_dm (tests.test_device.DMTest.test_dm)
Test DM ... skipped "Device memory isn't supported"
setUpClass (tests.test_odp.OdpTestCase) ... skipped 'No ODP caps'
test_count (tests.test_device.DeviceTest.test_count) ... FAIL
test_qp (tests.test_qp.QPTest.test_qp) ... ERROR
test_last (tests.test_qp.QPTest.test_last) ... ok

======================================================================
FAIL: test_count (tests.test_device.DeviceTest.test_count)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/x/test_device.py", line 222, in test_count
AssertionError: 1 != 0

======================================================================
ERROR: test_qp (tests.test_qp.QPTest.test_qp)
----------------------------------------------------------------------
Traceback (most recent call last):
pyverbs.pyverbs_error.PyverbsRDMAError: Failed to create QP. Errno: 95, Operation not supported

----------------------------------------------------------------------
Ran 7 tests in 0.1s

FAILED (failures=1, errors=1, skipped=2)
"""


def test_a_verbose_unittest_log_is_read_test_by_test() -> None:
    assert parse(LOG) == [
        CaseResult("tests.test_pd.PDTest.test_alloc_pd", "pass"),
        CaseResult("tests.test_pd.PDTest.test_plain", "pass"),
        CaseResult("tests.test_device.DMTest.test_dm", "skip", "Device memory isn't supported"),
        CaseResult("tests.test_odp.OdpTestCase", "skip", "No ODP caps"),
        CaseResult("tests.test_device.DeviceTest.test_count", "fail", "AssertionError: 1 != 0"),
        CaseResult("tests.test_qp.QPTest.test_qp", "error",
                    "pyverbs.pyverbs_error.PyverbsRDMAError: Failed to create QP. Errno: 95, Operation not supported"),
        CaseResult("tests.test_qp.QPTest.test_last", "pass"),
    ]  # fmt: skip
    files = tally(parse(LOG))
    assert list(files) == ["test_device", "test_odp", "test_pd", "test_qp"]
    assert dict(files["test_device"].counts) == {"skip": 1, "fail": 1}
    assert files["test_device"].reasons["FAIL: AssertionError: 1 != 0"] == 1


def test_a_test_the_run_died_in_is_an_error() -> None:
    cut = "test_a (tests.test_qp.QPTest.test_a) ... ok\ntest_b (tests.test_qp.QPTest.test_b) ... "
    assert parse(cut)[1] == CaseResult("tests.test_qp.QPTest.test_b", "error", "no result: the run ended in this test")


RXE_PASSES = 86  # Linux rxe on the same suite (python3-pyverbs 44): 86 pass, 1 error, 186 skip of 273


def test_the_whole_suite_beats_rxe_with_no_failure_or_error(pyverbs: None, two_hosts: tuple[str, str],  # noqa: F811
                                                           tmp_path: Path) -> None:  # fmt: skip
    """Every test of the suite passes or skips on a feature pyroce reports unsupported, and more
    pass than on Linux rxe. In a network namespace where the NIC's address is its interface's
    first, as the rdma_cm tests assume (they take the first address of the device's netdev)."""
    report = tmp_path / "all.json"
    done = pyroce("rdma-core-tests", "--work-dir", str(tmp_path), "--json", str(report), timeout=900,
                  netns=two_hosts[0], env={"PYROCE_ADDR": "10.199.0.1"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    totals = json.loads(report.read_text())["totals"]
    assert totals["fail"] == totals["error"] == 0, done.stdout
    assert totals["tests"] == 273 and totals["pass"] > RXE_PASSES, done.stdout


def test_rdma_cores_documentation_examples_through_the_c_driver(pyverbs: None) -> None:
    """Documentation/pyverbs.md's GID, AH and UD QP examples with Debian's pyverbs (GID index 3)."""
    done = pyroce("run", "--", "env", "-u", "PYTHONPATH", PYTHON, str(ROOT / "tests" / "pyverbs_doc_examples.py"),
                  "pyroce0", timeout=120, env={"PYROCE_ADDR": SHARED_NIC_ADDRESS})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gid 3 0000:0000:0000:0000:0000:ffff:") and lines[1].startswith("ah on gid 0 fe80:")
    assert lines[2] == "ud send on gid 3: 0"
