"""``pyverbs.cq``: ``pyroce.verbs.cq`` and ``cq_ex``."""

from pyroce.verbs.cq import *
from pyroce.verbs.cq_ex import *
