"""HOW LONG: network models behind one interface (see ``base``), registered by name."""

from types import MappingProxyType

from .analytical import AnalyticalNetwork
from .base import FluidNetwork
from .flow import FlowNetwork

NETWORK_MODELS = MappingProxyType({"flow": FlowNetwork, "analytical": AnalyticalNetwork})

__all__ = ["NETWORK_MODELS", "FluidNetwork", "FlowNetwork", "AnalyticalNetwork"]
