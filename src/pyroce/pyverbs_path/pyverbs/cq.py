"""``pyverbs.cq``: ``pyroce.verbs.cq``."""

from pyroce.verbs.cq import *
