"""``pyverbs.addr``: ``pyroce.verbs.addr`` and the ``AH`` of ``pyroce.verbs.ah``."""

from pyroce.verbs.addr import *
from pyroce.verbs.ah import AH

__all__ = ["AH", "GID", "AHAttr", "GlobalRoute"]
