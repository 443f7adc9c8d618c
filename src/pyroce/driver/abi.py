"""The ring boundary's one ABI, for the C driver: ``pyroce_abi.h``, rendered from the Python.

The C driver (``driver/c/``) writes the WQEs and doorbell records the engine reads, reads the
CQEs it writes, and rings its doorbell pipe. Two sources give C those layouts and values, and
no C file restates one by hand:

- what mlx5 defines (the segments, ``struct mlx5_cqe64``, ``MLX5_OPCODE_*``, ``MLX5_CQE_*``,
  ``MLX5_INVALID_LKEY``, ...) C takes from the system's ``<infiniband/mlx5dv.h>``, and Python
  states in ``nic/wqe.py``, ``nic/cqe.py`` and ``nic/rings.py``. ``MLX5`` and ``LAYOUTS`` below
  pair each Python value or struct format with its mlx5dv.h name, for ``tests/test_abi.py`` to
  compare (a C program prints the header's values, sizes and offsets);
- what is pyroce's own (``OWN``: the doorbell pipe's records, the counters' widths, the BIND_MW
  segment, the limits C checks) C gets from ``pyroce_abi.h``, which ``render`` writes from the
  Python modules at build time (``driver/build.py`` puts it in the build folder, and its text
  is in the cache key, so a changed Python value rebuilds the library).

Values are read from the modules when asked for (``Constant.value``), never copied here.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from pyroce.host import handoff
from pyroce.ib import limits
from pyroce.nic import cqe, engine, rings, wqe
from pyroce.verbs import mw

HEADER = "pyroce_abi.h"
DBR_WORD = 4  # bytes of one doorbell record word (a __be32): mlx5dv.h's MLX5_*_DBR index them
OWN_OPCODES = frozenset({"BIND_MW"})  # WqeOpcode members mlx5 has no MLX5_OPCODE_* for (it binds by UMR)


def _where(module: ModuleType, name: str) -> str:
    return f"{module.__name__.removeprefix('pyroce.').replace('.', '/')}.py {name}"


@dataclass(frozen=True)
class Constant:
    """A value C uses: ``name`` in C, ``source`` the Python it comes from, ``get`` reads it now."""

    name: str
    source: str
    get: Callable[[], int] = field(repr=False)

    @property
    def value(self) -> int:
        return int(self.get())


def _attr(name: str, module: ModuleType, path: str) -> Constant:
    """The constant ``name`` whose value is ``module.path`` (dotted, e.g. ``WqeOpcode.SEND``)."""
    return Constant(name, _where(module, path), lambda: functools.reduce(getattr, path.split("."), module))


_ITEM = re.compile(r"\s*(\d*)([xcbB?hHiIlLqQnNefdspP])")
_C_TYPES = {"B": "uint8_t", "H": "__be16", "I": "__be32", "Q": "__be64"}


def items(fmt: struct.Struct) -> list[tuple[str, int, int]]:
    """(code, offset, size) of each field of a big-endian struct format, pad bytes skipped."""
    text = fmt.format
    if not text.startswith(">"):
        raise ValueError(f"{text!r}: a ring layout is big-endian ('>')")
    found, offset, at = [], 0, 1
    while at < len(text):
        match = _ITEM.match(text, at)
        if match is None:
            if text[at:].strip():
                raise ValueError(f"{text!r}: cannot read {text[at:]!r}")
            break
        at = match.end()
        count, code = int(match.group(1) or 1), match.group(2)
        if code == "x":
            offset += count
        elif code in "sp":
            found.append((code, offset, count))
            offset += count
        else:
            size = struct.calcsize(">" + code)
            for _ in range(count):
                found.append((code, offset, size))
                offset += size
    return found


@dataclass(frozen=True)
class Layout:
    """A struct C and Python share: ``c_type`` (mlx5dv.h's, or one ``render`` writes), the Python
    format ``get`` returns (``source``) starting at byte ``at`` of it, the C members of the
    format's fields in order, and the C struct's size (``size``; None: not this format's to say)."""

    c_type: str
    source: str
    get: Callable[[], struct.Struct] = field(repr=False)
    members: tuple[str, ...]
    at: Callable[[], int] = field(default=lambda: 0, repr=False)
    size: Callable[[], int] | None = field(default=None, repr=False)

    def fields(self) -> list[tuple[str, int, int]]:
        """(C member, offset in the C struct, size) as the Python format lays them out."""
        found = items(self.get())
        if len(found) != len(self.members):
            raise ValueError(f"{self.source}: {len(found)} fields for {len(self.members)} members of {self.c_type}")
        base = self.at()
        return [(member, base + offset, size) for member, (_, offset, size) in zip(self.members, found)]

    def expected_size(self) -> int | None:
        return None if self.size is None else int(self.size())


def _layout(c_type: str, module: ModuleType, name: str, members: tuple[str, ...], at: str | None = None,
            size: Callable[[], int] | None = None) -> Layout:  # fmt: skip
    whole = (lambda: getattr(module, name).size) if size is None and at is None else size
    offset = (lambda: getattr(module, at)) if at else (lambda: 0)
    return Layout(c_type, _where(module, name), lambda: getattr(module, name), members, offset, whole)


BIND_SEG = _layout("struct pyroce_bind_seg", wqe, "_BIND", wqe.MwBindSeg._fields,
                   size=lambda: wqe.BIND_SEGS * wqe.SEG)  # fmt: skip

# pyroce's own: rendered into pyroce_abi.h
OWN: tuple[Constant, ...] = (
    _attr("PYROCE_DOORBELL_RECORD_SIZE", handoff, "RECORD_SIZE"),
    _attr("PYROCE_SEND_DOORBELL", engine, "SEND_DOORBELL"),
    _attr("PYROCE_RECV_DOORBELL", engine, "RECV_DOORBELL"),
    _attr("PYROCE_QPN_MASK", engine, "QPN_MASK"),
    _attr("PYROCE_COUNTER_MASK", rings, "COUNTER_MASK"),
    _attr("PYROCE_CQ_COUNTER_MASK", rings, "CQ_COUNTER_MASK"),
    _attr("PYROCE_SEND_WQE_DS", wqe, "SEG"),
    _attr("PYROCE_MAX_DS", wqe, "MAX_DS"),
    _attr("PYROCE_OPCODE_BIND_MW", wqe, "WqeOpcode.BIND_MW"),
    Constant("PYROCE_BIND_SEG_SIZE", _where(wqe, "BIND_SEGS * SEG"), lambda: wqe.BIND_SEGS * wqe.SEG),
    _attr("PYROCE_AV_GRH", wqe, "AV_GRH"),
    _attr("PYROCE_CQE_GRH_MASK", cqe, "GRH_MASK"),
    _attr("PYROCE_MAX_MSG_SZ", limits, "MAX_MSG_SZ"),
    _attr("PYROCE_MAX_INLINE_DATA", limits, "MAX_INLINE_DATA"),
    _attr("PYROCE_MW_ACCESS", mw, "MW_ACCESS"),
    _attr("PYROCE_BF_OFFSET", rings, "BF_OFFSET"),
    _attr("PYROCE_BF_SIZE", rings, "BF_SIZE"),
)

# mlx5's, as Python states them: C takes each from <infiniband/mlx5dv.h> by this name
MLX5: tuple[Constant, ...] = (
    *(_attr(f"MLX5_OPCODE_{op.name}", wqe, f"WqeOpcode.{op.name}") for op in wqe.WqeOpcode
      if op.name not in OWN_OPCODES),
    *(_attr(f"MLX5_WQE_CTRL_{bit.name}", wqe, f"FmCeSe.{bit.name}") for bit in wqe.FmCeSe if bit),
    *(_attr(f"MLX5_CQE_{op.name}", cqe, f"CqeOpcode.{op.name}") for op in cqe.CqeOpcode),
    *(_attr(f"MLX5_CQE_SYNDROME_{syndrome.name}", cqe, f"CqeSyndrome.{syndrome.name}")
      for syndrome in cqe.CqeSyndrome),
    _attr("MLX5_SEND_WQE_BB", wqe, "WQEBB"),
    _attr("MLX5_INVALID_LKEY", wqe, "MLX5_INVALID_LKEY"),
    _attr("MLX5_INLINE_SEG", wqe, "INLINE_FLAG"),
    _attr("MLX5_EXTENDED_UD_AV", wqe, "EXTENDED_AV"),
    Constant("MLX5_RCV_DBR", _where(rings, "DoorbellRecord.RECV / 4"), lambda: rings.DoorbellRecord.RECV // DBR_WORD),
    Constant("MLX5_SND_DBR", _where(rings, "DoorbellRecord.SEND / 4"), lambda: rings.DoorbellRecord.SEND // DBR_WORD),
)  # fmt: skip

_AV_MEMBERS = ("key.qkey.qkey", "key.qkey.reserved", "dqp_dct", "stat_rate_sl", "fl_mlid", "rlid", "tclass",
               "hop_limit", "grh_gid_fl", "rgid")  # fmt: skip
LAYOUTS: tuple[Layout, ...] = (
    _layout("struct mlx5_wqe_ctrl_seg", wqe, "_CTRL",
            ("opmod_idx_opcode", "qpn_ds", "signature", "dci_stream_channel_id", "fm_ce_se", "imm")),
    _layout("struct mlx5_wqe_av", wqe, "_AV", _AV_MEMBERS),
    _layout("struct mlx5_wqe_datagram_seg", wqe, "_AV", tuple(f"av.{member}" for member in _AV_MEMBERS)),
    _layout("struct mlx5_wqe_raddr_seg", wqe, "_RADDR", ("raddr", "rkey", "reserved")),
    _layout("struct mlx5_wqe_atomic_seg", wqe, "_ATOMIC", ("swap_add", "compare")),
    _layout("struct mlx5_wqe_data_seg", wqe, "_DATA", ("byte_count", "lkey", "addr")),
    _layout("struct mlx5_wqe_inl_data_seg", wqe, "_INLINE_HDR", ("byte_count",)),
    BIND_SEG,
    _layout("struct mlx5_cqe64", cqe, "CQE_BODY",
            ("flags_rqpn", "srqn_uidx", "imm_inval_pkey", "byte_cnt", "timestamp", "sop_drop_qpn", "wqe_counter"),
            size=lambda: cqe.CQE_SIZE),
    _layout("struct mlx5_err_cqe", cqe, "CQE_ERROR", ("vendor_err_synd", "syndrome"), at="CQE_ERROR_AT",
            size=lambda: cqe.CQE_SIZE),
)  # fmt: skip


def _literal(name: str, value: int) -> str:
    return f"{value}u" if name.endswith(("_SIZE", "_DS", "_DATA")) else f"0x{value:x}u"  # sizes in decimal


def _render_struct(layout: Layout, size_name: str) -> list[str]:
    """A C struct with the format's fields (natural alignment, no packing), padded to
    ``layout``'s size, which the constant ``size_name`` states."""
    name = layout.c_type
    lines = [f"/* {layout.source} ({layout.get().format!r}), as C lays it out */", f"{name} {{"]
    offset = 0
    for (code, at, size), member in zip(items(layout.get()), layout.members):
        if at != offset:
            lines.append(f"\tuint8_t reserved{offset}[{at - offset}];")
        if code == "s":
            lines.append(f"\tuint8_t {member}[{size}];")
        elif code in _C_TYPES and at % size == 0:
            lines.append(f"\t{_C_TYPES[code]} {member};")
        else:
            raise ValueError(f"{layout.source}: field {member} ({code!r} at {at}) has no unpadded C type")
        offset = at + size
    total = layout.expected_size() or offset
    if total > offset:
        lines.append(f"\tuint8_t reserved[{total - offset}];")
    lines += ["};", f'_Static_assert(sizeof({name}) == {size_name}, "{layout.source}: {total} bytes");']
    return lines


def render() -> str:
    """The text of ``pyroce_abi.h`` from the Python modules as they are now."""
    width = max(len(constant.name) for constant in OWN)
    lines = [
        f"/* {HEADER}: rendered by pyroce.driver.abi from the Python definitions at build time; do not edit.",
        " * pyroce's own side of the ring boundary, what <infiniband/mlx5dv.h> has no name for:",
        " * each value is the Python constant named beside it. */",
        "#ifndef PYROCE_ABI_H",
        "#define PYROCE_ABI_H",
        "",
        "#include <linux/types.h>",
        "#include <stdint.h>",
        "",
        *(f"#define {c.name:<{width}} {_literal(c.name, c.value)} /* {c.source} */" for c in OWN),
        "",
        *_render_struct(BIND_SEG, "PYROCE_BIND_SEG_SIZE"),
        "",
        "#endif",
        "",
    ]
    return "\n".join(lines)
