"""pyroce's provider libraries (``libmlx5.so.1``, ``libefa.so.1``): every symbol and version node
of the real ones, each answering as the real library does for a device that is not its own.

The real provider libraries cannot load beside pyroce's libibverbs (they need libibverbs' private
provider interface), yet UCX, libfabric, perftest and pyverbs link against them, and the loader
refuses a program one of whose symbol versions is missing (``version 'MLX5_1.11' not found``).
So the build writes a library per provider whose symbols are the union of

- the newest rdma-core release's (``c/stubs/<stem>.symbols``: ``NODE SYMBOL KIND`` lines, from
  its version script and header), so a program built against a newer rdma-core loads, and
- the system's installed library's, read from its ELF dynamic symbol table at build time
  (``elf.version_nodes``), so whatever this system's rdma-core links loads too; the kind of a
  symbol the table lacks comes from the system's header (``<infiniband/mlx5dv.h>``, ``efadv.h``).

A symbol's KIND is what its stub returns, after ``errno = EOPNOTSUPP``: ``null`` (a pointer),
``errno`` (an int: the errno, as most of mlx5dv's and efadv's verbs do), ``negative`` (an int,
``-EOPNOTSUPP``: efadv's depth queries), ``minus`` (an ssize_t: -1),
``void``, ``false`` (a bool): the macros of ``c/stubs/stubs.h``. A symbol whose kind is found
nowhere is left out, so the loader names it.

A provider's ``served`` symbols are no stubs: ``c/stubs/<stem>_served.c`` defines them (with
their version nodes), answering for pyroce's own device through pyroce's libibverbs and as the
stub would for any other (libmlx5's for pyroce0: docs/architecture.md, "Direct verbs").
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pyroce.driver.elf import ElfError, version_nodes

KINDS = ("null", "errno", "negative", "minus", "void", "false")


@dataclass(frozen=True)
class Provider:
    """A provider library pyroce stands in for: its soname, the stem of its table in
    ``c/stubs/``, and the header declaring its direct verbs."""

    library: str
    stem: str
    header: str
    served: frozenset[str] = frozenset()  # defined by c/stubs/<stem>_served.c, not stubbed

    @property
    def served_source(self) -> str | None:
        """The file defining the served symbols, in ``c/stubs/``, or None."""
        return f"{self.stem}_served.c" if self.served else None


MLX5_SERVED = frozenset({"mlx5dv_is_supported", "mlx5dv_query_device", "mlx5dv_init_obj", "mlx5dv_create_qp",
                         "mlx5dv_create_cq"})  # fmt: skip
PROVIDERS = (Provider("libmlx5.so.1", "mlx5", "infiniband/mlx5dv.h", MLX5_SERVED),
             Provider("libefa.so.1", "efa", "infiniband/efadv.h"))  # fmt: skip
MULTIARCH = getattr(sys.implementation, "_multiarch", "")  # x86_64-linux-gnu on Debian's amd64
LIBRARY_DIRS = tuple(Path(folder) for folder in (f"/usr/lib/{MULTIARCH}", f"/lib/{MULTIARCH}", "/usr/lib64", "/usr/lib"))


def system_library(name: str) -> Path | None:
    """The system's installed ``name`` (libmlx5.so.1 ...), in the library folders the loader
    searches by default, or None."""
    return next((folder / name for folder in LIBRARY_DIRS if (folder / name).is_file()), None)


@dataclass(frozen=True)
class Stub:
    node: str
    symbol: str
    kind: str


def read_table(path: Path) -> list[Stub]:
    """The ``NODE SYMBOL KIND`` lines of a table (``#`` starts a comment)."""
    stubs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 3 or fields[2] not in KINDS:
            raise ValueError(f"{path}:{number}: expected NODE SYMBOL KIND ({'/'.join(KINDS)}): {line!r}")
        stubs.append(Stub(*fields))
    return stubs


def declared_kind(header: str, symbol: str) -> str | None:
    """The KIND of ``symbol`` as ``header`` (C text) declares it, or None where it declares no
    such function (a declaration: the parameter list followed by ``;``)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*|^\s*#[^\n]*", "", header, flags=re.DOTALL | re.MULTILINE)
    for match in re.finditer(rf"(^|[;{{}}])([^;{{}}]*?)\b{re.escape(symbol)}\s*\(", text, flags=re.MULTILINE):
        close = balanced_end(text, match.end() - 1)
        if close is None or not text[close:].lstrip().startswith(";"):
            continue  # a call or a definition, not the declaration
        words = match.group(2).replace("*", " * ").split()
        words = [word for word in words if word not in ("extern", "const", "__attribute__")]
        if not words or "static" in words or "return" in words or "=" in words:
            continue
        if words[-1] == "*":
            return "null"
        return {"void": "void", "bool": "false", "ssize_t": "minus"}.get(words[-1], "errno")
    return None


def balanced_end(text: str, opening: int) -> int | None:
    """The index just past the parenthesis that closes the one at ``opening``."""
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def stubs_of(provider: Provider, table: Path, system_library: Path | None, include: Path) -> list[Stub]:
    """The table's stubs, plus each (node, symbol) of the system's library the table lacks, its
    kind from the system's header."""
    stubs = read_table(table)
    known = {(stub.node, stub.symbol) for stub in stubs}
    kinds = {stub.symbol: stub.kind for stub in stubs}
    if system_library is None or not system_library.is_file():
        return stubs
    try:
        nodes = version_nodes(system_library)
    except ElfError:
        return stubs
    header_path = include / provider.header
    header = header_path.read_text(errors="replace") if header_path.is_file() else ""
    for node in nodes:
        for symbol in node.symbols:
            kind = kinds.get(symbol) or declared_kind(header, symbol)
            if (node.name, symbol) not in known and kind is not None:
                stubs.append(Stub(node.name, symbol, kind))
                known.add((node.name, symbol))
    return stubs


def c_source(stubs: list[Stub], served: frozenset[str] = frozenset()) -> str:
    """The library's C text: one stub per symbol but the ``served`` ones; a symbol in several
    nodes is defined once per node under a private name and bound to ``symbol@NODE`` (``@@``
    for the last, the default)."""
    lines = ['#include "stubs.h"', ""]
    by_symbol: dict[str, list[Stub]] = {}
    for stub in stubs:
        if stub.symbol in served:
            continue
        by_symbol.setdefault(stub.symbol, []).append(stub)
    for symbol, versions in by_symbol.items():
        if len(versions) == 1:
            lines.append(f"STUB_{versions[0].kind.upper()}({symbol})")
            continue
        for number, stub in enumerate(versions):
            private = f"{symbol}_v{number}"
            at = "@@" if number == len(versions) - 1 else "@"
            lines.append(f"STUB_{stub.kind.upper()}({private})")
            lines.append(f'__asm__(".symver {private}, {symbol}{at}{stub.node}");')
    return "\n".join(lines) + "\n"


def version_script(stubs: list[Stub]) -> str:
    """The library's version script: every node, in first-seen order, with its symbols (a symbol
    of several nodes is named in each, as rdma-core's own scripts do, and bound by ``.symver``)."""
    nodes: dict[str, list[str]] = {}
    for stub in stubs:
        nodes.setdefault(stub.node, []).append(stub.symbol)
    text = []
    for index, (node, symbols) in enumerate(nodes.items()):
        local = " local: *;" if index == 0 else ""
        text.append(f"{node} {{ global:{''.join(f' {symbol};' for symbol in symbols)}{local} }};")
    return "\n".join(text) + "\n"
