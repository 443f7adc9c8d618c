"""``pyroce doctor``: what a device would use here and why, what is wrong and what to change."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import random
import shutil
import socket
from pathlib import Path

import pytest

from pyroce.cli import main
from pyroce.cli.doctor import check_socket_buffer
from pyroce.link.base import PEER_WINDOW, peer_window
from tests.cli import pyroce
from tests.socket_buffer import granted_buffer

SETTINGS = ("PYROCE_ADDR", "PYROCE_PROGRESS", "PYROCE_GSO", "PYROCE_FAULTS", "PYROCE_VERIFY_ICRC", "PYROCE_STATS_DIR")


def doctor(env: dict[str, str]) -> tuple[int, dict[str, dict[str, object]]]:
    result = pyroce("doctor", "--json", env=env, drop=tuple(name for name in SETTINGS if name not in env), timeout=60)
    document = json.loads(result.stdout)
    assert document["ok"] == (result.returncode == 0) and result.stderr == ""
    return result.returncode, {check["name"]: check for check in document["checks"]}


SMALL_BUFFER = peer_window(granted_buffer()) < PEER_WINDOW  # this host warns of its socket buffer


def loopback_address() -> str:
    return f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"


def test_all_is_well_by_default() -> None:
    # No setting but this run's stats folder (conftest's): its shared NIC, when a test of the run
    # started one on 127.0.0.1 (PYROCE_NIC=shared), is the one doctor must find there.
    status, checks = doctor({"PYROCE_STATS_DIR": os.environ["PYROCE_STATS_DIR"]})
    toolchain = shutil.which("cc") is not None and Path("/usr/include/infiniband/verbs.h").is_file()
    assert checks["c_driver"]["ok"] == toolchain  # a machine with Python and pip only: `pyroce run` cannot build,
    assert checks["c_driver"]["warning"] == (not toolchain) and status == 0  # a warning: Python programs run
    assert str(checks["address"]["value"]).startswith("127.") and "PYROCE_ADDR unset" in str(checks["address"]["why"])
    assert checks["gid"]["value"] == ipaddress.IPv6Address(f"::ffff:{checks['address']['value']}").exploded
    assert checks["active_mtu"]["value"] == "4096 B" and "65536" in str(checks["active_mtu"]["why"])
    assert checks["progress"]["value"] == "inline" and checks["port"]["ok"] and checks["gso_gro"]["ok"]


def test_an_exported_address_is_used_and_its_reason_shown() -> None:
    address = loopback_address()
    status, checks = doctor({"PYROCE_ADDR": address, "PYROCE_PROGRESS": "thread", "PYROCE_GSO": "0"})
    assert status == 0
    assert checks["address"]["value"] == address and checks["address"]["why"] == "PYROCE_ADDR"
    assert checks["progress"]["value"] == "thread" and checks["progress"]["why"] == "PYROCE_PROGRESS=thread"
    assert str(checks["gso_gro"]["value"]).endswith("; not used")


@pytest.mark.parametrize(
    ("env", "name", "words"),
    [
        ({"PYROCE_ADDR": "192.0.2.1"}, "address", "is not an address of this host"),  # TEST-NET-1
        ({"PYROCE_ADDR": "nonsense"}, "address", "is not an IPv4 or IPv6 address"),
        ({"PYROCE_PROGRESS": "bogus"}, "settings", "PYROCE_PROGRESS='bogus'"),
        ({"PYROCE_GSO": "yes"}, "settings", "PYROCE_GSO='yes'"),
        ({"PYROCE_FAULTS": "loss=2"}, "settings", "PYROCE_FAULTS"),
    ],
)
def test_what_is_wrong_and_what_to_change(env: dict[str, str], name: str, words: str) -> None:
    status, checks = doctor(env)
    assert status == 1
    assert not checks[name]["ok"] and words in str(checks[name]["value"]) and checks[name]["fix"]


def test_a_busy_port() -> None:
    address = loopback_address()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind((address, 4791))
        status, checks = doctor({"PYROCE_ADDR": address})
    assert status == 1
    assert checks["port"]["value"] == f"UDP {address}:4791 is already in use" and "PYROCE_ADDR" in str(
        checks["port"]["fix"])  # fmt: skip
    assert checks["gso_gro"]["ok"]  # still probed, on another port


def test_text_report_and_nothing_left_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    address = loopback_address()
    monkeypatch.setenv("PYROCE_ADDR", address)
    out = io.StringIO()
    assert main(["doctor"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["ok", "address", address]
    assert lines[-1] == ("all is well, 1 warning" if SMALL_BUFFER else "all is well")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
        again.bind((address, 4791))  # the doctor's probe is closed


def test_what_pyroce_run_needs_is_a_warning_naming_each_package(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A bare machine (Python, pip): what ``pyroce run`` lacks is named with its Debian package, and
    the doctor still exits 0, since Python programs need neither a compiler nor the headers."""
    status, checks = doctor({"PYROCE_ADDR": loopback_address(), "PYROCE_VERBS_INCLUDE": str(tmp_path),
                             "CC": str(tmp_path / "no-cc")})  # fmt: skip
    assert status == 0 and not checks["c_driver"]["ok"] and checks["c_driver"]["warning"]
    assert str(checks["c_driver"]["value"]) == (f"no C compiler ({tmp_path / 'no-cc'}) found: install gcc (apt-get "
                                                "install gcc); <infiniband/verbs.h> not found: install libibverbs-dev "
                                                "(apt-get install libibverbs-dev)")  # fmt: skip
    monkeypatch.setenv("PYROCE_ADDR", loopback_address())
    monkeypatch.setenv("PYROCE_VERBS_INCLUDE", str(tmp_path))
    out = io.StringIO()
    assert main(["doctor"], out=out) == 0
    lines = out.getvalue().splitlines()
    warned = [["WARN", "socket_buffer"]] if SMALL_BUFFER else []
    assert [line.split()[:2] for line in lines if line.startswith("WARN")] == [*warned, ["WARN", "c_driver"]]
    warnings = f"{1 + len(warned)} warning" + ("s" if warned else "")
    assert lines[-1] == f"all is well, {warnings}"
    monkeypatch.setenv("PYROCE_PROGRESS", "bogus")
    assert main(["doctor"], out=out) == 1 and out.getvalue().endswith(f"\n1 problem, {warnings}\n")


def test_the_socket_buffer_says_how_much_is_kept_in_flight() -> None:
    """The link's socket buffer sizes the window per peer (``link.base.peer_window``): the
    most with a 4 MiB ``net.core.rmem_max``; at the default 208 KiB a warning naming the fix."""
    status, checks = doctor({"PYROCE_ADDR": loopback_address()})
    check = checks["socket_buffer"]
    assert status == 0 and check["warning"] == SMALL_BUFFER and check["ok"] == (not SMALL_BUFFER)
    granted = granted_buffer()
    assert check["value"] == f"{granted // 1024} KiB: {peer_window(granted)} packets in flight per peer at most"
    full, small = check_socket_buffer(8 << 20), check_socket_buffer(425984)
    assert full.ok and not full.warning and not full.fix
    assert full.value == f"8192 KiB: {PEER_WINDOW} packets in flight per peer at most"
    assert not small.ok and small.warning and small.value == "416 KiB: 52 packets in flight per peer at most"
    assert "sysctl -w net.core.rmem_max=4194304" in small.fix
