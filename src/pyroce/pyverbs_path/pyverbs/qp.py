"""``pyverbs.qp``: ``pyroce.verbs.qp`` and ``qp_ex``."""

from pyroce.verbs.qp import *
from pyroce.verbs.qp_ex import *
