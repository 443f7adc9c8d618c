"""pyroce.nic: the "hardware" side of the device model (device-model.md).

The verbs layer and the engine share only memory laid out as mlx5 lays it out: send and
receive WQE rings, doorbell records and CQE rings. This package holds those layouts; the
engine that consumes them comes with the verbs/RC issue.
"""
