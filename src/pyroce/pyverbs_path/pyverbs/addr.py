"""``pyverbs.addr``: ``pyroce.verbs.addr``."""

from pyroce.verbs.addr import *
