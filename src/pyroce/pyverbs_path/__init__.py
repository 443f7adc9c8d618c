"""rdma-core's ``pyverbs`` import path on pyroce, opt-in: this folder holds a ``pyverbs``
package whose modules re-export ``pyroce.verbs``, so a script written for pyverbs
(``from pyverbs.device import Context``) runs unchanged once the folder is on ``sys.path``.

It is never on the path by itself: ``pyroce python`` puts it there for one program (and
refuses while a real pyverbs is importable, unless forced), ``pyroce pyverbs-path`` prints it
for ``PYTHONPATH``. A real pyverbs installed beside pyroce is not shadowed unless asked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent


def real_pyverbs() -> str | None:
    """Where an rdma-core pyverbs that is not this one would be imported from, if any."""
    spec = importlib.util.find_spec("pyverbs")
    if spec is None:
        return None
    where = Path(spec.origin or next(iter(spec.submodule_search_locations or ()), "")).resolve()
    return None if where.is_relative_to(DIRECTORY) else str(where.parent if where.name == "__init__.py" else where)
