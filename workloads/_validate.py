"""Kept only for workloads/training_step.py, which still imports it: the checks live in topologies.checks.

Remove this module once the training-step package imports ``topologies.checks`` directly.
"""

from topologies.checks import finite_nonnegative, reject

__all__ = ("finite_nonnegative", "reject")
