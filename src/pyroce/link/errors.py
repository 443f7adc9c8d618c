"""The link's one error. Its own module: the compiled build (mypyc) cannot compile a subclass of
``OSError``, so the link's compiled modules import it from this pure one."""

from __future__ import annotations


class LinkError(OSError):
    """The link cannot be opened (address not local, port taken)."""
