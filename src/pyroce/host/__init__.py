"""pyroce.host: the NIC in a process: what the device model (``pyroce.nic``) leaves to its host.

Threads, pipes, event fds, clocks, files and the environment live here: who runs the engine
(``progress``), how doorbells cross threads (``handoff``), the event queues application threads
wait on (``notify``), a process's devices (``registry``), and the files of the stats folder
(``stats_file``, ``capture_request``, ``capture_stream``).
"""
