"""``pyverbs.pd``: ``pyroce.verbs.pd``."""

from pyroce.verbs.pd import *
