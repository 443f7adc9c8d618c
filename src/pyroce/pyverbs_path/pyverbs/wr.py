"""``pyverbs.wr``: ``pyroce.verbs.wr``."""

from pyroce.verbs.wr import *
