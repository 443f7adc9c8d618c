"""pyroce as the RoCEv2 peer of an RTL design: a cocotb testbench under Icarus Verilog moves a
64 KiB RDMA WRITE between two pyroce NICs through ``tests/hdl/gmii_pipeline.v`` (the test
itself: ``tests/hdl/rdma_through_rtl.py``). Needs Debian's ``iverilog`` and the test extras'
cocotb and cocotbext-eth."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

HDL = Path(__file__).resolve().parent / "hdl"

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog not installed (apt-get install iverilog)")


def test_a_write_crosses_an_rtl_pipeline_in_simulated_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner_module = pytest.importorskip("cocotb_tools.runner")
    runner = runner_module.get_runner("icarus")
    runner.build(sources=[HDL / "gmii_pipeline.v"], hdl_toplevel="gmii_pipeline", build_dir=tmp_path,
                 timescale=("1ns", "1ps"))  # fmt: skip
    monkeypatch.syspath_prepend(str(HDL))  # the simulator's Python gets this sys.path: the test module, pyroce
    results = runner.test(hdl_toplevel="gmii_pipeline", test_module="rdma_through_rtl", build_dir=tmp_path,
                          test_dir=tmp_path)  # fmt: skip
    tests, failed = runner_module.get_results(results)
    assert (tests, failed) == (1, 0), f"{failed} of {tests} cocotb tests failed: see {tmp_path}"
