"""HOW LONG: network models behind one interface (see ``base``), registered by name.

``NETWORK_MODELS[name](capacity_bytes_per_s)`` builds a model from link capacities alone; the
``flow+...`` models (``congestion``) also take ``topology=`` for the link metadata their
refinements need (without it they are the plain ``flow`` model). ``build_network`` does the right
thing for any name.
"""

from functools import partial
from types import MappingProxyType

from topologies.topology import Topology

from .analytical import AnalyticalNetwork
from .base import FluidNetwork
from .congestion import REFINEMENTS, CongestionNetwork, Dcqcn, Ecn, IbCredit, Pfc, parse_refinements
from .flow import FlowNetwork

#: Congestion-aware variants of the flow model: name -> refinements.
CONGESTION_MODELS = MappingProxyType({
    "flow+dcqcn": ("dcqcn",),
    "flow+pfc": ("pfc",),
    "flow+ib-credit": ("ib-credit",),
    "flow+dcqcn+pfc": ("dcqcn", "pfc"),
    "flow+lossless": ("pfc", "ib-credit"),
})

NETWORK_MODELS = MappingProxyType({
    "flow": FlowNetwork,
    "analytical": AnalyticalNetwork,
    **{name: partial(CongestionNetwork, refinements=refs) for name, refs in CONGESTION_MODELS.items()},
})


def build_network(model: str, topology: Topology, *, congestion=()) -> FluidNetwork:
    """The network model ``model`` (a ``NETWORK_MODELS`` name) for ``topology``, with the extra
    congestion refinements ``congestion`` (names in ``REFINEMENTS`` or specs) on top of the model's own.

    >>> from topologies.presets import build_system
    >>> build_network("flow", build_system("dgx-h100", nodes=2), congestion=("ib-credit",)).name
    'flow+ib-credit'
    """
    if model not in NETWORK_MODELS:
        raise ValueError(f"network_model: {model!r} is not known; expected one of {', '.join(NETWORK_MODELS)}")
    extra = parse_refinements(congestion)
    if model == "analytical":
        if extra:
            raise ValueError(f"congestion: {tuple(r.name for r in extra)!r} is not allowed with network_model "
                             "'analytical', which ignores contention; expected () or a flow model")
        return AnalyticalNetwork(topology.link_capacity_bytes_per_s)
    own = CONGESTION_MODELS.get(model, ())
    names = {r.name for r in extra}
    refinements = extra + tuple(r for r in own if r not in names)
    if not refinements:
        return FlowNetwork(topology.link_capacity_bytes_per_s)
    return CongestionNetwork(topology.link_capacity_bytes_per_s, topology=topology, refinements=refinements)


__all__ = ["NETWORK_MODELS", "CONGESTION_MODELS", "REFINEMENTS", "build_network", "FluidNetwork", "FlowNetwork",
           "AnalyticalNetwork", "CongestionNetwork", "Dcqcn", "Ecn", "Pfc", "IbCredit"]
