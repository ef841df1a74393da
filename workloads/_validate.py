"""Kept only for modules that still import it (the training-step code): the checks live in topologies.checks.

Remove this module once nothing imports it; new code imports ``topologies.checks``.
"""

from topologies.checks import choice, finite_nonnegative, int_at_least, is_int, reject

__all__ = ("choice", "finite_nonnegative", "int_at_least", "is_int", "reject")
