"""The ``flow`` model: max-min fair sharing over every link, re-rated at every change.

Rates: weighted max-min fairness (progressive filling) over all active flows and all links,
computed by the numba kernel ``simulator.kernels.maxmin_rates`` whenever flows start or finish
(once per batch of simultaneous changes). Between changes rates are constant, so a flow's
completion time is exact for the fluid model.

Captures: bandwidth sharing on every link (NVLink, PCIe, NIC, fabric), ECMP collisions (two
flows hashed onto one spine link share it), incast at a receiver's downlink, protocol caps.
Ignores: packets, queueing delay, congestion-control dynamics and lossless back-pressure (those
are refinements layered on these rates), and the start-up transient of each flow.

Worked number: two 1 GB flows sharing one 50 GB/s NIC link get 25 GB/s each and both finish
at 40 ms; if one is only 0.5 GB it finishes at 20 ms and the other then speeds up to 50 GB/s,
finishing at 20 ms + 0.5 GB / 50 GB/s = 30 ms.
"""

from __future__ import annotations

from ..kernels import maxmin_rates
from .base import FluidNetwork


class FlowNetwork(FluidNetwork):
    name = "flow"

    def _rerate(self) -> None:
        self.rate = maxmin_rates(
            self.flow_ptr, self.flow_links, self.flow_weights, self.active, self.capacity_bytes_per_s, self.cap
        )
        self.rate[~self.active] = 0.0
