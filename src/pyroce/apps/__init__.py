"""pyroce.apps: small building blocks the tools share (the demo, pingpong, benchmarks)."""
