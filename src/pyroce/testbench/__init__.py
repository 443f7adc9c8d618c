"""Test benches: the layers driven without sockets, threads or clocks (the in-memory fabric)."""
