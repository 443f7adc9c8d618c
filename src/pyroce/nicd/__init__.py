"""The shared NIC: one pyroce0 per host that every program's driver reaches through commands and shared memory."""
