"""``Reason`` is defined in ``pyroce.ib.reasons`` (the verbs explain it too); the name stays here
while the engine (``pyroce.nic.device``) imports it from this module."""

from pyroce.ib.reasons import Reason

__all__ = ["Reason"]
