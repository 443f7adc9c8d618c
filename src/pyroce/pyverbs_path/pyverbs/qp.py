"""``pyverbs.qp``: ``pyroce.verbs.qp``."""

from pyroce.verbs.qp import *
