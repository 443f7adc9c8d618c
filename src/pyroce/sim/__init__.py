"""pyroce in a NIC developer's simulation: the RoCEv2 peer of a design under test, in
simulated time (``cocotb_peer``: a NIC whose Ethernet frames go through an RTL design in a
cocotb testbench)."""
