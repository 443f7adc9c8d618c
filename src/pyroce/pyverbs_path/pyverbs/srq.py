"""``pyverbs.srq``: ``pyroce.verbs.srq``."""

from pyroce.verbs.srq import *
