"""Placement: which GPU each rank runs on.

``block`` (default): ranks fill servers in order, ``gpus_per_node`` per server, on the server's
first GPUs (as ``mpirun -npernode G`` with CUDA_VISIBLE_DEVICES=0..G-1 does). ``custom``: an
explicit rank -> global GPU index tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.topology import Topology


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    rank_gpu: tuple[int, ...]

    @classmethod
    def block(cls, topology: Topology, *, nranks: int, gpus_per_node: int | None = None) -> "Placement":
        per_server = [len(s.gpus) for s in topology.servers]
        g = gpus_per_node if gpus_per_node is not None else per_server[0]
        if not isinstance(g, int) or g < 1 or g > min(per_server):
            raise ValueError(f"gpus_per_node: {g!r} is not allowed; expected an integer from 1 to {min(per_server)}")
        if not isinstance(nranks, int) or nranks < 1 or nranks > g * topology.num_servers:
            raise ValueError(f"nranks: {nranks!r} is not allowed; this placement holds 1 to "
                             f"{g * topology.num_servers} ranks ({topology.num_servers} servers x {g} GPUs)")
        return cls(rank_gpu=tuple(topology.gpu(r // g, r % g) for r in range(nranks)))

    @classmethod
    def custom(cls, topology: Topology, rank_gpu: tuple[int, ...] | list[int]) -> "Placement":
        rank_gpu = tuple(int(g) for g in rank_gpu)
        if len(set(rank_gpu)) != len(rank_gpu):
            raise ValueError("placement: two ranks share a GPU")
        bad = [g for g in rank_gpu if not 0 <= g < topology.num_gpus]
        if bad:
            raise ValueError(f"placement: GPU index {bad[0]} out of range (0..{topology.num_gpus - 1})")
        return cls(rank_gpu=rank_gpu)

    @property
    def nranks(self) -> int:
        return len(self.rank_gpu)
