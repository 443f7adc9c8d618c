"""The examples a new user runs first do what they say."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], text=True, capture_output=True, timeout=60, check=False,
                          **kwargs)  # type: ignore[call-overload]  # fmt: skip


def test_connect_two_qps() -> None:
    result = run(str(EXAMPLES / "connect_two_qps.py"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "SEND: 17 bytes arrived: 'hello over RoCEv2'",
        "RDMA WRITE: the peer's memory now holds 'hello over RoCEv2'",
    ]


def test_two_processes() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "two_processes.py"), "server", port], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert server.stdout is not None
        assert "waiting on TCP port" in server.stdout.readline()
        client = run(str(EXAMPLES / "two_processes.py"), "client", "127.0.0.1", port)
        assert client.returncode == 0, client.stderr
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0, err
    written = client.stdout.split("wrote ")[1].split(" bytes")[0]  # the client's address varies in length
    assert f"SEND says 'I wrote {written} bytes'; my memory holds 'written by process at 127." in out


def test_rdma_cm_echo_on_one_address_of_the_shared_nic(tmp_path: Path) -> None:
    """The README's rdma_cm example: a server and a client on one address, through the shared NIC."""
    from tests.shared_nic import shared_nic  # (a test's own NIC: its own address and stats folder)

    with shared_nic(tmp_path) as (place, env, _process):
        env = {**env, "PYROCE_NIC": "shared"}
        server = subprocess.Popen([sys.executable, str(EXAMPLES / "rdma_cm_echo.py"), "server", place.address, "7471"],
                                  text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
        try:
            assert server.stdout is not None
            assert server.stdout.readline().startswith("listening on")
            client = run(str(EXAMPLES / "rdma_cm_echo.py"), "client", place.address, "7471", env=env)
            assert client.returncode == 0, client.stderr
            out, err = server.communicate(timeout=30)
        finally:
            server.kill()
    assert server.returncode == 0, err
    assert out == "received 'hello over rdma_cm'\n"
    assert client.stdout == "the server sent back 'mc_amdr revo olleh'\n"


def test_the_readmes_verbs_snippet_runs_as_shown() -> None:
    """The first Python block of the README's "Verbs in Python", copied into a program as is."""
    readme = (EXAMPLES.parent / "README.md").read_text()
    section = readme[readme.index("## Verbs in Python") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", section.index("```python\n") + 10)]
    done = run("-c", code)
    assert (done.returncode, done.stdout) == (0, "[0, 0] b'hello'\n"), done.stderr
