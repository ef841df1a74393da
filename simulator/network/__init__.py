"""HOW LONG: network models behind one interface (see ``base``), registered by name.

``NETWORK_MODELS[name](capacity_bytes_per_s)`` builds a model from link capacities alone.
``build_network(name, topology, congestion=...)`` adds the flow model's congestion refinements
(``REFINEMENTS``: DCQCN, PFC, InfiniBand credits), which need the topology's link metadata; the
result is named after them (``flow+dcqcn+pfc``).
"""

from collections.abc import Iterable
from types import MappingProxyType

from topologies.topology import Topology

from .analytical import AnalyticalNetwork
from .base import FluidNetwork
from .congestion import REFINEMENTS, CongestionNetwork, Dcqcn, Ecn, IbCredit, Pfc, Refinement, parse_refinements
from .flow import FlowNetwork

NETWORK_MODELS = MappingProxyType({"flow": FlowNetwork, "analytical": AnalyticalNetwork})


def build_network(
    model: str, topology: Topology, *, congestion: str | Refinement | Iterable[str | Refinement] = ()
) -> FluidNetwork:
    """The network model ``model`` (a ``NETWORK_MODELS`` name) for ``topology``, with the flow
    model's congestion refinements ``congestion`` (names in ``REFINEMENTS`` or specs).

    >>> from topologies.presets import build_system
    >>> build_network("flow", build_system("dgx-h100", nodes=2), congestion=("ib-credit",)).name
    'flow+ib-credit'
    """
    if model not in NETWORK_MODELS:
        raise ValueError(f"network_model: {model!r} is not known; expected one of {', '.join(NETWORK_MODELS)}")
    extra = parse_refinements(congestion)
    if model == "analytical":
        if extra:
            raise ValueError(
                f"congestion: {tuple(r.name for r in extra)!r} is not allowed with network_model "
                "'analytical', which ignores contention; expected () or network_model 'flow'"
            )
        return AnalyticalNetwork(topology.link_capacity_bytes_per_s)
    if not extra:
        return FlowNetwork(topology.link_capacity_bytes_per_s)
    return CongestionNetwork(topology.link_capacity_bytes_per_s, topology=topology, refinements=extra)


__all__ = [
    "NETWORK_MODELS",
    "REFINEMENTS",
    "build_network",
    "FluidNetwork",
    "FlowNetwork",
    "AnalyticalNetwork",
    "CongestionNetwork",
    "Dcqcn",
    "Ecn",
    "Pfc",
    "IbCredit",
]
