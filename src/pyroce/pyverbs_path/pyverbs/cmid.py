"""``pyverbs.cmid``: ``pyroce.verbs.cmid`` (with ``AddrInfo``, ``CMEventChannel``, ``ConnParam``
and ``UDParam``)."""

from pyroce.verbs.cmid import *
