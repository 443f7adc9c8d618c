"""libibverbs' private version nodes that programs bind ``ibv_query_gid_type`` to.

rdma-core names its private interface ``IBVERBS_PRIVATE_<PABI>`` and raises the number when that
interface changes: 34 (rdma-core 25 to 56), 57, 59, 64, 65 so far. ``ibv_devinfo`` and pyverbs
import ``ibv_query_gid_type`` from it, so a program built against another rdma-core than
Debian 12's asks for another node. pyroce's ``libibverbs.so.1`` answers every known one, and the
one the system's own library defines (read from it at build time: ``elf.version_nodes``), each
a wrapper of the one ``ibv_query_gid_type`` bound by ``.symver``; ``libibverbs.map`` holds 34.
"""

from __future__ import annotations

from pathlib import Path

from pyroce.driver.elf import ElfError, version_nodes

PREFIX = "IBVERBS_PRIVATE_"
IN_MAP = f"{PREFIX}34"  # libibverbs.map's own node: the default version
KNOWN = tuple(f"{PREFIX}{number}" for number in (57, 59, 64, 65))


def private_nodes(system_library: Path | None) -> list[str]:
    """The private nodes beside ``IN_MAP``: the known ones, and the system library's."""
    nodes = list(KNOWN)
    try:
        system = [] if system_library is None else version_nodes(system_library)
    except (ElfError, OSError):
        system = []
    nodes += [node.name for node in system if node.name.startswith(PREFIX) and node.name not in (IN_MAP, *nodes)]
    return nodes


def c_source(nodes: list[str]) -> str:
    """A wrapper of ``ibv_query_gid_type`` per node, bound to ``ibv_query_gid_type@NODE``."""
    lines = ['#include "pyroce_verbs.h"', "",  # the type's enum is driver.h's: a pointer here
             "int ibv_query_gid_type(struct ibv_context *, uint8_t, unsigned int, void *);"]  # fmt: skip
    for node in nodes:
        name = f"pr_query_gid_type_{node.removeprefix(PREFIX)}"
        lines += [f"PR_EXPORT int {name}(struct ibv_context *context, uint8_t port, unsigned int index,",
                  "\t\t\t void *type)",
                  "{", "\treturn ibv_query_gid_type(context, port, index, type);", "}",
                  f'__asm__(".symver {name}, ibv_query_gid_type@{node}");']  # fmt: skip
    return "\n".join(lines) + "\n"


def version_script(nodes: list[str]) -> str:
    """The nodes, for the end of ``libibverbs.map``."""
    return "".join(f"{node} {{ global: ibv_query_gid_type; }};\n" for node in nodes)
