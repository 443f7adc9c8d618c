"""``pyverbs.mr``: ``pyroce.verbs.mr``."""

from pyroce.verbs.mr import *
from pyroce.verbs.mw import *
