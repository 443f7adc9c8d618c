"""Rings a GPU can write: a Context's driver memory allocated as CUDA mapped memory.

``Context("pyroce0", driver_memory=MappedMemory())`` puts every ring, doorbell record and CQE
ring of that context's objects in pinned host memory mapped into the GPU's address space
(``numba.cuda.mapped_array``: ``cuMemHostAlloc`` with ``DEVICEMAP``). The NIC (this process's
own) reads and writes it as host memory, through the same memoryviews as ever; a kernel gets the
mapped array itself, whose device pointer reaches the same bytes over the bus. Under numba's
simulator ``mapped_array`` is a host array the simulated kernels are handed without a copy.

Why allocate rather than host-register the verbs' buffers (``cuMemHostRegister``): a doorbell
record is 8 bytes of some page, and two registrations of one page collide; an allocation of its
own per ring never does, and needs nothing of the verbs. MRs stay as the verbs make them (the
NIC reads a message's data from host memory; a GPU's own memory as an MR is not here). The
arrays are kept (for ``device_array``) until the memory itself goes, with its Context.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyroce.verbs.driver_memory import LocalMemory, address_of

WORD = 4


class MappedMemory(LocalMemory):
    """A ``DriverMemory`` whose rings are CUDA mapped arrays of be32 words (zeroed), found again
    by address (``device_array``) for the kernels."""

    def __init__(self) -> None:
        from numba import cuda

        self._cuda = cuda
        self._arrays: dict[int, Any] = {}  # address of a ring's first byte -> its mapped uint32 array

    def alloc(self, size: int) -> memoryview:
        array = self._cuda.mapped_array(-(-max(size, 1) // WORD), dtype=np.uint32)
        host = np.asarray(array)  # the same bytes (the simulator's array holds a numpy one)
        host[:] = 0
        view = memoryview(host.view(np.uint8))[:size]
        self._arrays[address_of(view)] = array
        return view

    def device_array(self, view: memoryview) -> Any:
        """The mapped array ``view`` (a ring this memory allocated) is the host side of: what a
        kernel is given. KeyError for memory of another allocator."""
        return self._arrays[address_of(view)]
