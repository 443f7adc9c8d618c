"""How the connection manager refuses a command."""

from __future__ import annotations


class CmError(OSError):
    """A command the connection manager refused: ``errno`` and one line on why, as ucma
    answers ``-errno``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
