"""pyverbs' exceptions, with its messages: ``PyverbsRDMAError`` carries the errno libibverbs
would return, so code written for pyverbs (and rdma-core's tests, which skip on EOPNOTSUPP)
reacts the same way."""

from __future__ import annotations

import os


class PyverbsError(Exception):
    """Base error. With ``error_code`` the message ends with ``. Errno: N, strerror``."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)
        self.error_code = error_code


class PyverbsRDMAError(PyverbsError):
    """A verb failed; ``error_code`` is its errno."""


class PyverbsUserError(PyverbsError):
    """The caller passed something pyverbs itself refuses (wrong type, missing argument)."""
