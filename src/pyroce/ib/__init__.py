"""pyroce.ib: the vocabulary every layer speaks, defined once (IBA and libibverbs numbering).

Enums whose values cross layers (work completion status, opcode and flags, access flags, QP
states, path MTUs), the device limits more than one layer enforces, and the reason codes a
failed completion carries. Rule: this package imports nothing else from pyroce, so the wire,
the transport, the NIC and the verbs can all take their names from here without depending on
each other.
"""
