"""``pyverbs.cm_enums`` (rdma-core v44: every member at module level, ``ce.RDMA_PS_TCP``):
``pyroce.verbs.cm_enums``."""

from pyroce.verbs.cm_enums import *
