"""Numba kernels: the hot loops of fabricsim.

Layering rule: numba is imported only inside this package. Everything else calls the plain
Python wrappers exported here, which take and return numpy arrays; the link-list kernels of
``components`` (for the flow model's bookkeeping) are compiled functions that update their arrays in place.
"""

from simulator.kernels.classes import class_rates
from simulator.kernels.components import component, link_insert, link_rebuild, link_remove, reach
from simulator.kernels.dcqcn import DCQCN_PARAM_NAMES, dcqcn_rates
from simulator.kernels.drain import count_link_bytes, drain, soonest_end
from simulator.kernels.lossless import lossless_throttle, successor_pairs
from simulator.kernels.maxmin import build_csr, entries_of, maxmin_rates

__all__ = [
    "build_csr",
    "entries_of",
    "maxmin_rates",
    "class_rates",
    "link_insert",
    "link_rebuild",
    "link_remove",
    "reach",
    "component",
    "drain",
    "soonest_end",
    "count_link_bytes",
    "dcqcn_rates",
    "DCQCN_PARAM_NAMES",
    "lossless_throttle",
    "successor_pairs",
]
