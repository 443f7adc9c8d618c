"""``pyverbs.librdmacm_enums`` (rdma-core v59 and later: the enums as ``IntEnum`` classes):
``pyroce.verbs.cm_enums``, which holds both forms."""

from pyroce.verbs.cm_enums import *
