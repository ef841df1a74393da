"""Routing: GPU-to-GPU paths as int64 arrays of link ids, under several routing policies.

A path is built in three parts:

1. inside the source server, from the GPU to the NIC that will send (``ServerInfo`` routes);
   with PXN (NCCL's default since 2.12) a GPU sends through the NIC on the *destination's rail*,
   reaching it over NVLink via the GPU local to that NIC, so rail-optimised fabrics keep
   same-rail traffic under one leaf;
2. across the fabric, from the sending NIC's switch to the receiving NIC's switch, as the
   routing policy decides (``policies.py``);
3. inside the destination server, from the receiving NIC to the GPU (``ServerInfo`` routes: GPUDirect
   RDMA, or through host memory on a server without it).

GPUs of the same server use the server's intra routes (NVSwitch, PCIe P2P or host staging).

The package:

* ``router.py``: :class:`Router`: NIC choice (PXN, partitioned fabrics), load and pinned flows,
  failures, bulk requests, switch-level paths (in-network reduction);
* ``policies.py``: part 2 under each policy, one small object per policy in the registry
  ``POLICIES`` (name -> policy); ``ROUTING_POLICIES`` are its names;
* ``wiring.py``: what the Routers of one topology share (switch tables, distance tables, sprayed
  splits), kept by a :class:`RouteCache` that callers pass in (no module-level state);
* ``hashing.py``: :func:`mix64`, the flow hash.

What is ignored: per-packet dynamics (adaptive and UGAL decide per flow from assigned load, not
from instantaneous queue occupancy), reordering costs of spraying, and the deadlock-avoidance
virtual channels real dragonfly routers need. Everything is deterministic for a given ``seed``
and order of calls.
"""

from ..checks import Unreachable
from .hashing import mix64
from .policies import POLICIES, ROUTING_POLICIES, VALIANT_SALT, RoutingPolicy
from .router import Router
from .wiring import RouteCache

__all__ = [
    "POLICIES",
    "ROUTING_POLICIES",
    "VALIANT_SALT",
    "RouteCache",
    "Router",
    "RoutingPolicy",
    "Unreachable",
    "mix64",
]
