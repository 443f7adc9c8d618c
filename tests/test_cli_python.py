"""``pyroce python`` and ``pyroce pyverbs-path``: a program written for rdma-core's pyverbs runs
unchanged on pyroce, and a real pyverbs is never shadowed unless asked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.cli import ROOT, assert_one_line_error, cli_env, pyroce

# written for rdma-core's pyverbs (v44's tests' idioms): one QP connected to itself on the
# device's own GID, a SEND to its own receive
SCRIPT = textwrap.dedent("""
    import sys
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.libibverbs_enums import ibv_qp_state
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR

    with Context(name=sys.argv[1]) as ctx:
        pd = PD(ctx)
        mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        cq = CQ(ctx, 4)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=1, max_recv_wr=1)))
        attr = QPAttr(port_num=1)
        attr.dest_qp_num = qp.qp_num
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, 0)))
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = 14, 7, 7, 12
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        qp.to_rts(attr)
        assert qp.qp_state == ibv_qp_state.IBV_QPS_RTS
        mr.write(b"pyverbs", 7)
        qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf + 32, 32, mr.lkey)]))
        qp.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf, 7, mr.lkey)]))
        wcs = []
        while len(wcs) < 2:
            n, got = cq.poll(2)
            wcs += got[:n]
        print(sorted((wc.wr_id, wc.status) for wc in wcs), [wc.byte_len for wc in wcs if wc.wr_id == 1], mr.read(7, 32))
        try:
            ctx.query_gid(1, 16)  # past gid_tbl_len
        except PyverbsRDMAError as exc:
            print("errno", exc.error_code)
""")
EXPECTED = "[(1, 0), (2, 0)] [7] b'pyverbs'\nerrno 22\n"


def write_script(tmp_path: Path) -> str:
    script = tmp_path / "send_to_self.py"
    script.write_text(SCRIPT)
    return str(script)


def fake_real_pyverbs(tmp_path: Path) -> Path:
    """A folder where `import pyverbs` finds something other than pyroce's."""
    (tmp_path / "real" / "pyverbs").mkdir(parents=True)
    (tmp_path / "real" / "pyverbs" / "__init__.py").write_text("raise ImportError('the real one')\n")
    return tmp_path / "real"


def test_a_pyverbs_script_runs_unchanged(tmp_path):
    result = pyroce("python", write_script(tmp_path), "pyroce0", timeout=60)
    assert (result.returncode, result.stdout) == (0, EXPECTED), result.stderr


def test_pyverbs_path_serves_other_runners(tmp_path):
    folder = pyroce("pyverbs-path", timeout=30).stdout.strip()
    env = cli_env({"PYTHONPATH": f"{folder}:{cli_env()['PYTHONPATH']}"})
    done = subprocess.run([sys.executable, write_script(tmp_path), "pyroce0"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, EXPECTED), done.stderr


def test_a_real_pyverbs_is_not_shadowed_unless_forced(tmp_path):
    real = fake_real_pyverbs(tmp_path)
    refused = pyroce(
        "python", write_script(tmp_path), "pyroce0", env={"PYTHONPATH": f"{cli_env()['PYTHONPATH']}:{real}"}
    )
    assert_one_line_error(refused, "a real pyverbs is importable", str(real / "pyverbs"), "--force")
    forced = pyroce("python", "--force", write_script(tmp_path), "pyroce0",
                    env={"PYTHONPATH": f"{cli_env()['PYTHONPATH']}:{real}"})  # fmt: skip
    assert (forced.returncode, forced.stdout) == (0, EXPECTED), forced.stderr


def test_the_programs_exit_status_and_traceback_are_its_own():
    result = pyroce("python", "--", "-c", "import pyverbs.device as d; d.Context(name='mlx5_0')", timeout=30)
    assert result.returncode == 1 and "Traceback" in result.stderr and "ENODEV" not in result.stdout
    assert "Failed to open device mlx5_0" in result.stderr


def test_nothing_to_run_is_one_line():
    assert_one_line_error(pyroce("python", timeout=30), "nothing to run")


def test_rdma_cores_documentation_examples_run_with_gid_index_3():
    """Documentation/pyverbs.md: GID index 3 is RoCE v2 over IPv4, a UD QP's AH on it sends."""
    result = pyroce("python", str(ROOT / "tests" / "pyverbs_doc_examples.py"), "pyroce0", timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("gid 3 0000:0000:0000:0000:0000:ffff:") and lines[1].startswith("ah on gid 0 fe80:")
    assert lines[2] == "ud send on gid 3: 0"
