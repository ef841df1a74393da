"""HOW collectives run: algorithms that lower a Collective into a Schedule, and the tuner.

Registry: ``ALGORITHMS`` maps an algorithm name to an object implementing the interface of
``base.Algorithm``. Adding an algorithm = a module with ``lower``/``estimate`` + one entry here.
"""

from types import MappingProxyType

from .base import Algorithm, LoweringContext
from .nvls import NVLS
from .p2p import SENDRECV
from .ring import RING

ALGORITHMS = MappingProxyType({RING.name: RING, NVLS.name: NVLS, SENDRECV.name: SENDRECV})

__all__ = ["ALGORITHMS", "Algorithm", "LoweringContext"]
