"""mlx5's direct verbs on pyroce0 (pyroce's libmlx5.so.1 answering for its own device): a program
built here against the system's libmlx5 and libibverbs takes a QP and its CQ with
mlx5dv_init_obj, posts an RDMA WRITE, a SEND and an RDMA READ by hand (mlx5dv.h's segment
setters, MLX5_WQE_CTRL_CQ_UPDATE), rings the doorbell record and a UAR store or BlueFlame copy,
polls raw CQEs by owner bit and finds the data; a receive posted by hand takes a SEND; a WQE the
record moved past before its control segment was written does nothing until it is (tests/c/
mlx5dv_direct.c); a program posting its SENDs and receives that way is ibv_rc_pingpong's peer
(tests/c/mlx5dv_pingpong.c). What pyroce does not do (compressed CQEs, DC, SRQ layouts) is EOPNOTSUPP."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from tests.cli import free_port
from tests.test_c_driver import (  # noqa: F401 - driver_env: a fixture
    C_TOOL,
    ITERS,
    MISSING,
    address,
    build_c_program,
    driver_env,
    rc_pingpong,
    run_c_program,
)

pytestmark = pytest.mark.skipif(bool(MISSING) or not Path("/usr/include/infiniband/mlx5dv.h").is_file(),
                                reason=f"not installed: {', '.join(MISSING) or 'mlx5dv.h'}")  # fmt: skip
MLX5_CQE_REQ, MLX5_CQE_RESP_SEND = 0, 2
ADDRESS = re.compile(r"^ *(local|remote) address: +(LID .*)$", re.MULTILINE)  # rc_pingpong's address lines


def test_wqes_posted_by_hand_through_mlx5dv_move_data(driver_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    done = run_c_program("mlx5dv_direct", driver_env, tmp_path, address(9), ("-lmlx5", "-libverbs"))
    lines = done.stdout.splitlines()
    values = dict(line.split(" ", 1) for line in lines)
    eopnotsupp = str(errno.EOPNOTSUPP)
    assert values.pop("is_supported") == "1"
    for what in ("create_cq_compressed", "create_qp_dc", "init_obj_srq"):
        assert values.pop(what) == eopnotsupp, what
    assert values["attrs"] == "version=0 flags=0 comp_mask=0"  # CQE version 0, no optional capability
    assert values["qp"] == "sq.wqe_cnt=8 sq.stride=64 rq.wqe_cnt=8 rq.stride=16 bf.size=256 dbrec=1 bf.reg=1"
    assert values["cq"] == "cqe_cnt=32 cqe_size=64 cqn_set=1 cq_uar=1"
    qpn = next(line for line in lines if line.startswith("cqe_write")).rsplit("qpn=", 1)[1]
    assert values["cqe_write"] == f"opcode={MLX5_CQE_REQ} wqe_counter=0 byte_cnt=0 qpn={qpn}"
    assert values["cqe_send"] == f"opcode={MLX5_CQE_REQ} wqe_counter=1 byte_cnt=0 qpn={qpn}"
    assert values["cqe_read"] == f"opcode={MLX5_CQE_REQ} wqe_counter=2 byte_cnt=200 qpn={qpn}"
    assert values["cqe_recv_a"] == f"opcode={MLX5_CQE_RESP_SEND} wqe_counter=0 byte_cnt=64 qpn={qpn}"
    assert values["wc_recv_b"] == "status=0 opcode=128 byte_len=100"
    # the torn WQE: no CQE and no data while its control segment held a stale index, then both
    assert values["torn_cqe"] == "0" and values["torn_untouched"] == "1"
    assert values["cqe_torn_written"] == f"opcode={MLX5_CQE_REQ} wqe_counter=3 byte_cnt=0 qpn={qpn}"
    assert values["cqe_after"] == f"opcode={MLX5_CQE_REQ} wqe_counter=4 byte_cnt=0 qpn={qpn}"
    for what in ("write_data", "send_data", "read_data", "recv_data", "torn_data"):
        assert values.pop(what) == "1", what
    for what in ("query_device", "create_cq", "create_qp", "connect", "init_obj", "post_recv_b", "post_send_b",
                 "destroyed"):  # fmt: skip
        assert values.pop(what) == "0", what


@pytest.mark.parametrize("dv_serves", [True, False], ids=["dv-server", "dv-client"])
def test_sends_and_receives_posted_by_hand_ping_pong_with_ibv_rc_pingpong(driver_env: dict[str, str],  # noqa: F811
                                                                         tmp_path: Path, dv_serves: bool) -> None:  # fmt: skip
    """tests/c/mlx5dv_pingpong.c, which tools/rxe_interop.sh (-t dv_rc) runs against Linux rxe,
    against Debian's ibv_rc_pingpong on pyroce: 200 ping-pongs of 4 KiB at MTU 1024 (4 packets a
    message) each way, every message checked by the program (-c: rc_pingpong's page marks)."""
    dv = (str(build_c_program("mlx5dv_pingpong", tmp_path, ("-lmlx5", "-libverbs"))), "-d", "pyroce0")
    server, client = (dv, C_TOOL) if dv_serves else (C_TOOL, dv)
    outs = rc_pingpong(driver_env, server, client, free_port(21 + dv_serves), "-s", "4096", "-m", "1024")
    for out in outs:
        assert ITERS.search(out).group(1) == "200", out  # type: ignore[union-attr]
        assert "invalid data" not in out, out
    addresses = [dict(ADDRESS.findall(out)) for out in outs]
    assert addresses[0]["local"] == addresses[1]["remote"] and addresses[1]["local"] == addresses[0]["remote"]
