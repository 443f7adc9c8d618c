"""``pyverbs.libibverbs_enums`` (rdma-core v59 and later: the enums as ``IntEnum`` classes):
``pyroce.verbs.enums``, which holds both forms."""

from pyroce.verbs.enums import *
