"""The version nodes of an installed shared library, read from its ELF dynamic symbol table
(``.dynsym``, ``.gnu.version``, ``.gnu.version_d``): what ``objdump -T`` shows, without binutils.

The C driver's build reads the system's ``libibverbs.so.1``, ``libmlx5.so.1`` and ``libefa.so.1``
this way, so pyroce's libraries carry every symbol version that a program or library linked on
this system asks for, whichever rdma-core it has.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

SHT_DYNSYM = 11
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERSYM = 0x6FFFFFFF
VER_FLG_BASE = 1  # the node naming the library itself (its soname), not a version of symbols
VERSYM_HIDDEN = 0x8000
SHN_UNDEF = 0


class ElfError(ValueError):
    """Not a 64-bit little-endian ELF shared library with symbol versions."""


@dataclass
class VersionNode:
    """One ``VERSION { global: ...; } PARENT;`` of a library: its name, the node it inherits, the
    functions and objects defined in it, and which of them are there only as an older, non-default
    version (``symbol@VERSION``: libibverbs 1.0's compatibility functions, say)."""

    name: str
    parent: str | None = None
    symbols: list[str] = field(default_factory=list)
    hidden: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Section:
    kind: int
    offset: int
    size: int
    link: int
    entsize: int


def sections(data: bytes) -> list[Section]:
    """The section headers of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    found = []
    for index in range(shnum):
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from("<IIQQQQIIQQ", data, shoff + index * shentsize)
        found.append(Section(kind, offset, size, link, entsize))
    return found


def c_string(data: bytes, offset: int) -> str:
    return data[offset:data.index(b"\0", offset)].decode()


def version_nodes(path: Path) -> list[VersionNode]:
    """The library's version nodes in definition order, each with its defined symbols (sorted);
    the base node (the soname) left out."""
    data = path.read_bytes()
    table = sections(data)
    by_kind = {section.kind: section for section in table}
    if not {SHT_DYNSYM, SHT_GNU_VERDEF, SHT_GNU_VERSYM} <= by_kind.keys():
        raise ElfError(f"{path} defines no symbol versions")
    verdef = by_kind[SHT_GNU_VERDEF]
    names = table[verdef.link]  # the dynamic string table
    nodes: dict[int, VersionNode] = {}
    base: set[int] = set()
    offset = verdef.offset
    while True:
        _, flags, index, count, _, aux, following = struct.unpack_from("<HHHHIII", data, offset)
        labels = []
        place = offset + aux
        for _ in range(count):
            name, step = struct.unpack_from("<II", data, place)
            labels.append(c_string(data, names.offset + name))
            place += step
        if flags & VER_FLG_BASE:
            base.add(index)
        else:
            nodes[index] = VersionNode(labels[0], labels[1] if count > 1 else None)
        if not following:
            break
        offset += following
    dynsym, versym = by_kind[SHT_DYNSYM], by_kind[SHT_GNU_VERSYM]
    strings = table[dynsym.link]
    for number in range(dynsym.size // dynsym.entsize):
        name, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, dynsym.offset + number * dynsym.entsize)
        version, = struct.unpack_from("<H", data, versym.offset + number * 2)
        node = nodes.get(version & ~VERSYM_HIDDEN)
        if shndx != SHN_UNDEF and node is not None and version & ~VERSYM_HIDDEN not in base:
            symbol = c_string(data, strings.offset + name)
            if symbol != node.name:  # the node's own absolute symbol
                node.symbols.append(symbol)
                if version & VERSYM_HIDDEN:
                    node.hidden.add(symbol)
    for node in nodes.values():
        node.symbols.sort()
    return list(nodes.values())
