"""How the NIC's command layer refuses a command."""

from __future__ import annotations


class CommandRefused(Exception):
    """A command refused with an errno (the session answers it as the driver's error)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = code
