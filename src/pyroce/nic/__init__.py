"""pyroce.nic: the device model, the "hardware" its drivers reach through commands and memory.

The verbs layer and the engine share only memory laid out as mlx5 lays it out: send and
receive WQE rings, doorbell records and CQE rings (``wqe``, ``cqe``, ``rings``). The device
(``device``) runs its engine (``engine``) on a link and a clock it is given, and does no I/O of
its own: threads, fds, files and clocks are its host's (``pyroce.host``), which gives it the lock,
the doorbell hand-off, the runner and the event queues it needs (``tests/test_layers.py``).
"""
