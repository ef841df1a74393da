"""HOW collectives run: algorithms that lower a Collective into a Schedule, and the tuner.

Registry: ``ALGORITHMS`` maps an algorithm name to an object implementing the interface of
``base.Algorithm``. Adding an algorithm = a module with ``lower``/``estimate`` + one entry here.
"""

from types import MappingProxyType

from .alltoall import DIRECT, PAIRWISE
from .base import Algorithm, LoweringContext
from .collnet import COLLNET
from .halving_doubling import HALVING_DOUBLING, PAT
from .hierarchical import HIERARCHICAL
from .nvls import NVLS
from .nvls_tree import NVLS_TREE
from .p2p import SENDRECV
from .ring import RING
from .tree import TREE

ALGORITHMS = MappingProxyType(
    {
        a.name: a
        for a in (RING, TREE, NVLS, NVLS_TREE, COLLNET, HALVING_DOUBLING, PAT, HIERARCHICAL, SENDRECV, PAIRWISE, DIRECT)
    }
)

__all__ = ["ALGORITHMS", "Algorithm", "LoweringContext"]
