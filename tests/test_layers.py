"""The layering rules of docs/architecture.md, read from every module's imports, so they cannot drift.

Each package lists what it must not reach: ``ib`` and ``wire`` nothing above them, the sans-IO
transport nothing but the wire and the shared vocabulary, the verbs only the NIC (never the
transport or the link), the NIC never the verbs nor the shared NIC built on it (``nicd``), the
link none of the layers above it, and the C driver's Python side the verbs and the NIC only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGES = (
    "ib",
    "wire",
    "transport",
    "link",
    "nic",
    "host",
    "verbs",
    "apps",
    "cli",
    "testbench",
    "testing",
    "pyverbs_path",
    "driver",
    "nicd",
)

# The pyroce packages each layer may import besides itself (None: any not in FORBIDDEN)
ALLOWED: dict[str, frozenset[str] | None] = {
    "ib": frozenset(),
    "wire": frozenset({"ib"}),
    "transport": frozenset({"ib", "wire"}),
    "pyverbs_path": frozenset({"verbs"}),  # rdma-core's module names, re-exporting the verbs only
}
FORBIDDEN = {
    "verbs": frozenset({"transport", "link"}),
    "nic": frozenset({"verbs", "apps", "cli", "nicd"}),  # the shared NIC is built on the NIC, not in it
    "link": frozenset({"nic", "verbs", "transport", "apps", "cli", "nicd"}),
    "testbench": frozenset({"nic", "verbs", "apps", "cli"}),  # benches for the sans-IO layers
    "testing": frozenset({"cli"}),  # the pytest plugin: a user of the verbs, not of the tools
    "driver": frozenset({"transport", "link", "apps", "cli", "testing", "testbench"}),  # the C library's verbs side
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, ``TYPE_CHECKING`` ones included."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            found.append((node.lineno, name))
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What breaks a layering rule in ``module``'s ``source``: one line per offending import."""
    layer = module.split(".")[1] if module.count(".") else ""
    allowed, forbidden = ALLOWED.get(layer), FORBIDDEN.get(layer, frozenset())
    problems = []
    for line, target in imported_modules(source, module, is_package):
        parts = target.split(".")
        if parts[0] != "pyroce" or len(parts) < 2 or parts[1] == layer:
            continue
        where = f"{module}:{line} imports {target}: pyroce.{layer}"
        if allowed is not None and parts[1] not in allowed:
            problems.append(f"{where} may import only {', '.join(sorted(allowed)) or 'itself'}")
        elif parts[1] in forbidden:
            problems.append(f"{where} must not import pyroce.{parts[1]}")
    return problems


MODULES = sorted((SRC / "pyroce").rglob("*.py"))


def test_every_package_has_a_rule_or_is_known() -> None:
    found = {path.relative_to(SRC / "pyroce").parts[0] for path in MODULES if path.parent != SRC / "pyroce"}
    assert found <= set(PACKAGES), f"packages without a place in the layering: {sorted(found - set(PACKAGES))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_imports_follow_the_layers(path: Path) -> None:
    problems = violations(path.read_text(), module_name(path), path.name == "__init__.py")
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
    ],
)
def test_a_bad_import_is_named(module: str, source: str) -> None:
    problems = violations(source, module)
    assert len(problems) == 1 and problems[0].startswith(f"{module}:"), problems
