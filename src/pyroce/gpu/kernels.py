"""The helpers compiled for kernels: ``pyroce.gpu.helpers``' own source, by ``numba.cuda.jit``.

Each function is rebuilt from its code object with globals where ``fence`` is
``cuda.threadfence_system`` and every helper is its compiled self, so a kernel's
``send_wqe`` is the host's, statement for statement. Under ``NUMBA_ENABLE_CUDASIM=1`` numba's
simulator runs the same functions as Python in its simulated threads. numba is imported by
this module alone (the ``gpu`` extra): host posting needs numpy only.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from numba import cuda

from pyroce.gpu import helpers

# what a kernel calls, in an order where each comes after the helpers it calls
EXPORTED = ("be32", "send_wqe", "recv_wqe", "db_ring", "cqe_poll")


def _fence() -> None:
    """A kernel's store fence: its stores before are seen by the host (the NIC) before those
    after. (A global ``cuda``, which numba's simulator swaps for its own in a kernel.)"""
    cuda.threadfence_system()


@functools.cache
def device_helpers() -> types.ModuleType:
    """``send_wqe``, ``recv_wqe``, ``db_ring`` and ``cqe_poll`` (and ``be32``) as numba CUDA
    device functions, for kernels to call: ``h = device_helpers()`` at module level, then
    ``h.send_wqe(...)`` inside a ``@cuda.jit`` kernel."""
    scope: dict[str, Any] = dict(vars(helpers))  # the helpers' module globals: the constants
    scope["fence"] = cuda.jit(device=True)(_fence)
    for name in EXPORTED:
        function = getattr(helpers, name)
        rebuilt = types.FunctionType(function.__code__, scope, name, function.__defaults__, function.__closure__)
        rebuilt.__doc__ = function.__doc__
        scope[name] = cuda.jit(device=True)(rebuilt)
    compiled = types.ModuleType(f"{__name__}.device", "pyroce.gpu.helpers compiled for kernels")
    for name in EXPORTED:  # a module: numba resolves a module's attributes in a kernel, not a namespace's
        setattr(compiled, name, scope[name])
    return compiled
