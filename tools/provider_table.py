"""Write a provider's symbol table (``src/pyroce/driver/c/stubs/<stem>.symbols``) from an rdma-core
release: its version script (``providers/mlx5/libmlx5.map``) and header (``mlx5dv.h``), each
symbol's kind as ``pyroce.driver.providers.declared_kind`` reads it.

    python tools/provider_table.py RDMA_CORE_CHECKOUT mlx5 [OLDER_HEADER ...] > src/pyroce/driver/c/stubs/mlx5.symbols

A symbol kept for the ABI whose declaration the release replaced by a macro (``mlx5dv_create_flow``)
takes its kind from an older header given after the stem (the system's, say).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from pyroce.driver.providers import declared_kind

SOURCES = {"mlx5": ("providers/mlx5/libmlx5.map", "providers/mlx5/mlx5dv.h"),
           "efa": ("providers/efa/libefa.map", "providers/efa/efadv.h")}  # fmt: skip
# int verbs that answer a foreign device -EOPNOTSUPP (their value is a depth, not an errno)
NEGATIVE = frozenset({"efadv_get_max_sq_depth", "efadv_get_max_rq_depth"})


def nodes(script: str) -> list[tuple[str, str]]:
    """(node, symbol) of each global symbol of a version script, in order."""
    script = re.sub(r"/\*.*?\*/", "", script, flags=re.DOTALL)
    found = []
    for node, body in re.findall(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}", script, flags=re.DOTALL):
        body = body.split("local:")[0].replace("global:", "")
        found.extend((node, symbol.strip()) for symbol in body.split(";") if symbol.strip())
    return found


def main(checkout: str, stem: str, *older: str) -> None:
    root = Path(checkout)
    script, header = (root / path for path in SOURCES[stem])
    release = subprocess.run(["git", "-C", checkout, "describe", "--tags"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"# rdma-core {release or '(unknown)'}: {SOURCES[stem][0]}, kinds from {SOURCES[stem][1]}")
    headers = [header.read_text(), *(Path(path).read_text() for path in older)]
    for node, symbol in nodes(script.read_text()):
        kind = next((found for text in headers if (found := declared_kind(text, symbol))), None)
        if kind is None:
            sys.exit(f"{symbol}: no declaration in {header}")
        print(f"{node} {symbol} {'negative' if symbol in NEGATIVE else kind}")


if __name__ == "__main__":
    main(*sys.argv[1:])
