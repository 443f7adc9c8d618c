"""pyroce.verbs: the verbs API with pyverbs' names, signatures, errnos and lifetimes.

Modules mirror pyverbs' (``device``, ``pd``, ``mr``, ``cq``, ``qp``, ``wr``, ``addr``,
``enums``, ``pyverbs_error``; pyverbs' extended QP and CQ are in ``qp_ex`` and ``cq_ex``), so
``from pyroce.verbs.qp import QP`` reads like pyverbs code.
This layer reaches the NIC only through its commands and the rings (design.md).
"""
