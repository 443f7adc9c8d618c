"""``pyverbs.enums`` (rdma-core v44: every libibverbs enum member at module level,
``e.IBV_QPT_RC``): ``pyroce.verbs.enums``."""

from pyroce.verbs.enums import *
