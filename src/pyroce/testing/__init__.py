"""RDMA in a test suite with no mock: pytest fixtures over real pyroce devices.

Installed with pyroce as a pytest plugin (entry point ``pyroce``), so a project's tests can
ask for ``rc_pair`` (two connected RC endpoints in this process), ``rc_remote`` (one here,
its peer in another process), ``rdma_context`` and ``rdma_capture``, and mark a test
``@pytest.mark.rdma_faults(loss=0.05, seed=3)`` to run it through a misbehaving network.
A failing test's report shows the failed work completions with their reasons, the device's
counters and the last packets it sent and received. See docs/testing.md.
"""

from pyroce.testing.remote import RemotePeer

__all__ = ["RemotePeer"]
