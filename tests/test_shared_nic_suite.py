"""The shared NIC is a full device: a representative set of this suite's verbs tests (RC, UC and
UD data paths, UD multicast, atomics, SRQ, memory windows, CQ events, async events, rdma_cm
multicast) runs again in a pytest of its own under ``PYROCE_NIC=shared``, on a shared NIC of that
run's own (its own stats folder and loopback address), so a regression of the shared NIC fails
here while the suite itself runs on the embedded NIC. The whole suite under ``PYROCE_NIC=shared``
is the full proof; this is the share of it CI runs every time (about half a minute)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

from tests.cli import ROOT, SRC

SELECTION = (
    "tests/test_rc_datapath.py::test_send",
    "tests/test_rc_datapath.py::test_rdma_write",
    "tests/test_rc_datapath.py::test_rdma_read",
    "tests/test_rc_datapath.py::test_atomics_match_a_reference",
    "tests/test_rc_datapath.py::test_solicited_and_fenced_work_completes_in_order",
    "tests/test_uc_datapath.py::test_send",
    "tests/test_uc_datapath.py::test_rdma_write",
    "tests/test_ud_datapath.py::test_reply_through_an_ah_made_from_the_wc",
    "tests/test_ud_datapath.py::test_ud_qps_take_their_receives_from_one_srq",
    "tests/test_multicast.py::test_every_attached_qp_receives_one_send_and_no_other_does",
    "tests/test_multicast.py::test_each_member_checks_the_q_key_and_counts_a_wrong_one",
    "tests/test_multicast.py::test_misuse_is_einval_as_rxe_answers",
    "tests/test_srq.py::test_three_qps_take_the_srq_wqes_in_ring_order",
    "tests/test_srq.py::test_the_limit_event_fires_once_per_arming",
    "tests/test_memory_windows.py::test_a_type2_window_grants_its_range",
    "tests/test_memory_windows.py::test_rebinding_changes_the_key",
    "tests/test_cq_events.py::test_a_selector_wakes_for_the_next_completion[thread]",
    "tests/test_cq_events.py::test_get_cq_event_blocks_until_the_engine_writes_the_completion[thread]",
    "tests/test_async_events.py::test_a_qp_error_raises_qp_fatal[thread]",
    "tests/test_cmid_multicast.py::test_the_event_carries_the_joins_context_and_counts_for_the_leave",
    "tests/test_cmid_multicast.py::test_a_datagram_to_the_group_reaches_every_member_until_it_leaves",
)


def test_verbs_tests_pass_on_the_shared_nic(tmp_path: Path) -> None:
    address = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
    env = {**os.environ, "PYROCE_NIC": "shared", "PYROCE_ADDR": address,
           "PYTHONPATH": os.pathsep.join((str(SRC), str(ROOT)))}  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not embedded_nic",
                             f"--basetemp={tmp_path / 'run'}", *SELECTION], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    counts = re.search(r"(\d+) passed", result.stdout)
    assert counts is not None and int(counts.group(1)) >= len(SELECTION), result.stdout[-2000:]
    assert not re.search(r"\d+ (skipped|deselected)", result.stdout), result.stdout[-2000:]
    # they ran on the shared NIC: that run's NIC on the address wrote its log in that run's stats folder
    assert list(tmp_path.glob(f"run/**/nicd-pyroce0@{address}.log")), "no shared NIC served the run"
