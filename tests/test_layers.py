"""The layering rules of docs/architecture.md, read from every module's imports, so they cannot drift.

Two rules, both read from the source (``TYPE_CHECKING`` and function-level imports included):

- ``ALLOWED`` lists, for every package and top-level module of ``src/pyroce``, the other pyroce
  packages it may import (or single modules of one, dotted: ``link.faults``). A new package has
  no entry and fails; an import of a package not listed fails, so a new dependency between
  layers is declared here, on purpose.
- ``PURE`` are the layers that do no I/O: the vocabulary (``ib``), packets (``wire``), the
  sans-IO transport and the device model (``nic``), and the modules of ``link`` the device
  model uses (the links' base class and their paths, its fault injector, the engines' steering). They import none of ``NO_IO`` (sockets, threads, processes,
  signals, clocks, the OS's files and memory) and no pyroce module outside ``PURE``: threads,
  fds, files and clocks are the host's (``pyroce.host``), which gives the device what it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Each package (or top-level module) of pyroce: the pyroce packages, or dotted single modules, it
# may import besides itself. ``pyroce`` itself (the package's face: ``__version__``) anyone may.
ALLOWED: dict[str, frozenset[str]] = {
    "ib": frozenset(),  # the vocabulary every layer shares
    "wire": frozenset({"ib"}),
    "transport": frozenset({"ib", "wire"}),  # sans-IO: time comes in as ``now``
    "cm": frozenset({"ib", "wire", "nic.events", "nic.timers"}),  # the connection manager on QP1, sans-IO
    "link": frozenset({"ib", "wire"}),  # sockets, the in-memory wire, Ethernet frames, fault injection
    "nic": frozenset(
        {"ib", "wire", "transport", "cm", "link.base", "link.paths", "link.faults", "link.steering"}
    ),  # the device model: the host gives it the rest (a link, as its base class says: ``link.base``)
    "host": frozenset({"wire", "link", "nic"}),  # threads, fds, files, the environment: a process's device
    # never the transport or the link (only the host's registry); the shared NIC's device as a client of it
    "verbs": frozenset({"ib", "wire", "nic", "host", "cm", "nicd.remote_device"}),
    "apps": frozenset({"ib", "verbs"}),
    "pyverbs_path": frozenset({"verbs"}),  # rdma-core's module names, re-exporting the verbs only
    "driver": frozenset(
        {"ib", "nic", "host", "verbs", "cm"}
    ),  # what the shared NIC runs for the C library, and its build
    "nicd": frozenset(
        {"ib", "wire", "nic", "cm", "host", "verbs", "driver", "link.steering"}
    ),  # the shared NIC is built on the NIC, not in it
    "testbench": frozenset({"wire", "transport", "link.faults"}),  # benches for the sans-IO layers
    "testing": frozenset({"wire", "link.faults", "nic", "verbs", "apps"}),  # the pytest plugin
    # the simulator bridge: a model serving the NIC's engine by DMA, and the verbs' device at the other end
    "bridge": frozenset({"nic", "link", "host", "ib", "nicd", "verbs"}),
    "sim": frozenset(
        {"link", "host", "nic", "verbs", "apps"}
    ),  # pyroce in a simulator: the peer of a design, its corpus
    "gpu": frozenset({"nic", "verbs"}),  # GPU-initiated posting: a direct QP's rings as arrays, RDMaxcel's helpers
    "cli": frozenset({"ib", "wire", "link", "host", "verbs", "apps", "driver", "nicd", "pyverbs_path", "sim"}),
    "__main__": frozenset({"cli"}),
    "": frozenset(),  # pyroce/__init__.py
}

PURE = ("ib", "wire", "transport", "cm", "nic", "link.base", "link.paths", "link.faults", "link.steering")
NO_IO = frozenset({
    "socket", "ssl", "select", "selectors", "asyncio",  # sockets and waiting on fds
    "threading", "_thread", "multiprocessing", "concurrent", "queue", "subprocess", "signal",  # threads, processes
    "time", "datetime", "sched",  # clocks: time comes in as ``now``
    "os", "io", "mmap", "fcntl", "tempfile", "shutil", "pathlib", "glob",  # the OS's files and memory
    "importlib",  # an import this test cannot read
})  # fmt: skip
NO_IO_EXCEPT = {"pyroce.wire.pcap": frozenset({"pathlib"})}  # reads and writes pcap files, wire's one I/O


def module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute name) of every import in ``source``. ``from pyroce.<package> import x``
    names ``pyroce.<package>.x`` (a module, or a name its face hands on), so a single module
    of a package can be allowed."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            if name.split(".")[0] == "pyroce" and name.count(".") <= 1:
                found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, name))
    return found


def layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def within(target: str, names: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether the pyroce module ``target`` is one of ``names`` (packages or dotted modules) or in one."""
    parts = target.split(".")[1:]
    return any(parts[: name.count(".") + 1] == name.split(".") for name in names)


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What breaks a layering rule in ``module``'s ``source``: one line per offending import."""
    layer = layer_of(module)
    allowed = ALLOWED[layer]
    pure = within(module, PURE)
    no_io = NO_IO - NO_IO_EXCEPT.get(module, frozenset())
    problems = []
    for line, target in imported_modules(source, module, is_package):
        parts = target.split(".")
        where = f"{module}:{line} imports {target}"
        if parts[0] != "pyroce":
            if pure and parts[0] in no_io:
                problems.append(f"{where}: {module} does no I/O (no sockets, threads, clocks or OS files)")
            continue
        if len(parts) < 2 or parts[1] not in ALLOWED:
            continue  # ``import pyroce`` or ``from pyroce import __version__``: the package's face
        if pure and not within(target, PURE):
            problems.append(f"{where}: {module} does no I/O, and may import only {', '.join(PURE)}")
        elif parts[1] != layer and not within(target, allowed):
            problems.append(f"{where}: pyroce.{layer} may import only {', '.join(sorted(allowed)) or 'itself'}")
    return problems


def problems_in(path: Path, root: Path = SRC) -> list[str]:
    return violations(path.read_text(), module_name(path, root), path.name == "__init__.py")


MODULES = sorted((SRC / "pyroce").rglob("*.py"))


def test_every_package_and_module_has_an_entry() -> None:
    found = {layer_of(module_name(path)) for path in MODULES}
    assert found == set(ALLOWED), (
        f"without an entry in ALLOWED: {sorted(found - set(ALLOWED))}; no longer there: {sorted(set(ALLOWED) - found)}"
    )
    for layer, allowed in ALLOWED.items():
        for name in allowed:
            package, _, module = name.partition(".")
            assert package in ALLOWED and (not module or (SRC / "pyroce" / package / f"{module}.py").is_file()), (
                f"{layer}: {name} is no package or module of pyroce"
            )
    for name in PURE:
        assert name.split(".")[0] in ALLOWED, name


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_imports_follow_the_layers(path: Path) -> None:
    problems = problems_in(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("pyroce.wire.bth", "from pyroce.transport.rc import RcQp"),
        ("pyroce.transport.rc", "import pyroce.nic.device"),
        ("pyroce.verbs.qp", "from pyroce.transport.work import Sge"),
        ("pyroce.verbs.device", "from pyroce.link.udp import LinkError"),
        ("pyroce.nic.device", "if TYPE_CHECKING:\n    from pyroce.verbs.qp import QP"),
        ("pyroce.link.udp", "from pyroce.transport.rc import RcQp"),
        ("pyroce.ib.enums", "from pyroce.wire.mtu import Mtu"),
        ("pyroce.transport.rc", "from ..nic import device"),
        # the device model reaches nothing of its host: the host gives it what it needs
        ("pyroce.nic.device", "from pyroce.host.progress import Progress"),
        ("pyroce.nic.device", "from pyroce import host"),
        ("pyroce.nic.tx", "from pyroce.link.udp import UdpLink"),
        ("pyroce.nic.tx", "from pyroce.link import udp"),
        ("pyroce.link.faults", "from pyroce.link.udp import UdpLink"),  # the pure module of link stays pure
        ("pyroce.testbench.fabric", "from pyroce.nic.engine import Engine"),
        ("pyroce.apps.pingpong", "from pyroce.host.registry import open_device"),
        # no sockets, threads, processes, clocks or OS files in wire, transport and the device model
        ("pyroce.nic.device", "import threading"),
        ("pyroce.nic.engine", "from time import monotonic"),
        ("pyroce.nic.rings", "from socket import htonl"),
        ("pyroce.nic.memory", "import mmap"),
        ("pyroce.nic.port", "import os.path"),
        ("pyroce.nic.queues", "def f():\n    import select"),
        ("pyroce.nic.srq", "if TYPE_CHECKING:\n    import selectors"),
        ("pyroce.nic.events", "import subprocess"),
        ("pyroce.nic.timers", "import signal"),
        ("pyroce.transport.rc", "import time"),
        ("pyroce.transport.requester", "import datetime"),
        ("pyroce.wire.bth", "import socket"),
        ("pyroce.wire.pcap", "import os"),
        ("pyroce.ib.enums", "import threading"),
        ("pyroce.link.faults", "import time"),
    ],
)
def test_a_bad_import_is_named(module: str, source: str) -> None:
    problems = violations(source, module)
    assert len(problems) == 1 and problems[0].startswith(f"{module}:"), problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("pyroce.link.udp", "import socket"),
        ("pyroce.host.progress", "import select\nimport threading\nimport time"),
        ("pyroce.host.assembly", "from pyroce.nic.device import NicDevice"),
        ("pyroce.nic.port", "from pyroce.link.faults import FaultInjector"),
        ("pyroce.nic.engine", "from pyroce.link import faults"),
        ("pyroce.nic.rings", "import ctypes\nimport sys"),
        ("pyroce.wire.pcap", "from pathlib import Path"),
        ("pyroce.cli.stats", "from pyroce import __version__"),
        ("pyroce.driver.environment", "import pyroce"),
    ],
)
def test_an_allowed_import_passes(module: str, source: str) -> None:
    assert violations(source, module) == []


def test_a_forbidden_import_added_to_a_module_fails_the_check(tmp_path: Path) -> None:
    """The check the suite runs on each file, on copies of device model modules with one import more."""
    for name in ("device.py", "__init__.py"):
        copy = tmp_path / "pyroce" / "nic" / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text((SRC / "pyroce" / "nic" / name).read_text())
        assert problems_in(copy, tmp_path) == []
        copy.write_text(copy.read_text() + "\nimport threading\n")
        problems = problems_in(copy, tmp_path)
        assert len(problems) == 1 and " imports threading: " in problems[0], problems
