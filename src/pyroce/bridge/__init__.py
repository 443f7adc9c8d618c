"""The simulator bridge: a documented, versioned stream protocol between the driver side (the
verbs and their rings: ``remote_nic.RemoteNic``) and a NIC model (``model.ModelServer`` serves
pyroce's own engine; an RTL simulation's harness may stand in for it). docs/architecture.md,
"The simulator bridge", is the spec; ``messages`` is its one codec."""
