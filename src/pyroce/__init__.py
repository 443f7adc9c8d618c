"""pyroce: a software RoCEv2 RDMA stack in Python."""

__version__ = "0.1.0"
