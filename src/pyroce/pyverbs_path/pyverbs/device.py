"""``pyverbs.device``: ``pyroce.verbs.device``."""

from pyroce.verbs.device import *
