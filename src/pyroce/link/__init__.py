"""pyroce.link: how RoCEv2 datagrams leave and enter a device (design.md's link layer).

The only package besides the tools that touches sockets. A link moves UDP payloads (BTH
through ICRC) to and from peer IP addresses; framing and ICRC stay in ``pyroce.wire``.
"""
