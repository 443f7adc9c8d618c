"""``pyverbs.base``: ``pyroce.verbs.base``."""

from pyroce.verbs.base import *
