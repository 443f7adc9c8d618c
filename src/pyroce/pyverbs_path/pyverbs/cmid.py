"""``pyverbs.cmid``: ``pyroce.verbs.cmid`` (with ``AddrInfo``, ``CMEventChannel``, ``ConnParam``,
``UDParam`` and ``JoinMCAttrEx``)."""

from pyroce.verbs.cmid import *
