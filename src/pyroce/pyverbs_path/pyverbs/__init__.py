"""pyverbs on pyroce: rdma-core's module names over ``pyroce.verbs`` (``pyroce.pyverbs_path``)."""
