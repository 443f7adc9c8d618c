"""``pyverbs.pyverbs_error``: ``pyroce.verbs.pyverbs_error``."""

from pyroce.verbs.pyverbs_error import *
