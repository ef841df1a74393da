"""Placement: which GPU each rank runs on, for one job or for several jobs sharing a fabric.

One job:

* ``block`` (default): ranks fill servers in order, ``gpus_per_node`` per server, on the server's
  first GPUs (as ``mpirun -npernode G`` with CUDA_VISIBLE_DEVICES=0..G-1 does).
* ``on_servers``: the same filling over an explicit list of servers, in the order given.
* ``contiguous``: ``ceil(nranks / G)`` consecutive whole servers from ``first_server`` (a
  scheduler that hands out adjacent nodes, e.g. Slurm's default on an idle cluster).
* ``fragmented``: the same number of whole servers picked from the free ones, either by a seeded
  draw (free servers ranked by ``mix64(seed, server)``, the lowest taken) or strided (every
  ``stride``-th free server from position ``offset``); the servers chosen are used in increasing
  order, as a scheduler's sorted node list is (a busy cluster's leftovers).
* ``custom``: an explicit rank -> global GPU index tuple.

Several jobs: ``for_jobs(topology, jobs=[n_0, n_1, ...], policy=...)`` gives one placement per job
on disjoint whole servers (a server belongs to one job, its unused GPUs stay idle), jobs served
in order:

* ``contiguous``: job 0 takes servers 0 .. s_0 - 1, job 1 the next s_1, ...;
* ``fragmented``: each job draws its servers from those still free, ranked by ``mix64(seed, job,
  server)``;
* ``strided``: servers are dealt round-robin in increasing order to the jobs that still need
  some (two equal jobs on 8 servers: 0, 2, 4, 6 and 1, 3, 5, 7), the most interleaved layout.

Servers needed by a job of n ranks at G per server: ``s = ceil(n / G)``; the jobs fit when
``sum(s_i) <= servers``. Worked number: jobs of 12 and 16 ranks on 8-GPU servers need 2 + 2 = 4
servers; with ``contiguous`` the first gets servers 0-1 (ranks 8-11 on GPUs 0-3 of server 1), the
second servers 2-3.

>>> from topologies.presets import build_system
>>> topo = build_system("dgx-h100", nodes=4)
>>> [p.rank_gpu[::8] for p in Placement.for_jobs(topo, jobs=[16, 16], policy="strided")]
[(0, 16), (8, 24)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from topologies.checks import integer, is_int, reject
from topologies.routing import mix64
from topologies.topology import Topology

PLACEMENT_POLICIES = ("contiguous", "fragmented", "strided")

# Separates the job-placement draw from other users of the same seed (ECMP hashes, Valiant).
_PLACEMENT_SALT = 0x504C414345  # "PLACE"


def _per_server(topology: Topology, gpus_per_node: object, field: str = "gpus_per_node") -> int:
    most = min(len(s.gpus) for s in topology.servers)
    g = gpus_per_node if gpus_per_node is not None else len(topology.servers[0].gpus)
    return integer(field, g, low=1, high=most)


def _check_nranks(field: str, nranks: object, g: int, topology: Topology) -> int:
    return integer(
        field,
        nranks,
        low=1,
        high=g * topology.num_servers,
        expected=f"an integer from 1 to {g * topology.num_servers} ({topology.num_servers} servers x {g} GPUs)",
    )


def _check_servers(field: str, servers: Sequence[int], topology: Topology) -> tuple[int, ...]:
    servers = tuple(servers)
    bad = [s for s in servers if not is_int(s) or not 0 <= s < topology.num_servers]
    if bad:
        raise reject(field, bad[0], f"distinct server indices from 0 to {topology.num_servers - 1}")
    if len(set(servers)) != len(servers):
        raise ValueError(f"{field}: {servers!r} lists a server twice; expected distinct servers")
    return tuple(int(s) for s in servers)


def _drawn(free: Sequence[int], count: int, *salt: int) -> list[int]:
    """``count`` servers of ``free``, the lowest by ``mix64(*salt, server)``, in increasing order."""
    return sorted(sorted(free, key=lambda s: (mix64(*salt, s), s))[:count])


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    rank_gpu: tuple[int, ...]

    @classmethod
    def block(cls, topology: Topology, *, nranks: int, gpus_per_node: int | None = None) -> Placement:
        """Ranks fill servers 0, 1, ... in order, ``gpus_per_node`` each: :meth:`contiguous` from server 0."""
        return cls.contiguous(topology, nranks=nranks, gpus_per_node=gpus_per_node)

    @classmethod
    def on_servers(
        cls, topology: Topology, *, servers: Sequence[int], nranks: int, gpus_per_node: int | None = None
    ) -> Placement:
        """Ranks fill ``servers`` in the order given, ``gpus_per_node`` each, on their first GPUs."""
        g = _per_server(topology, gpus_per_node)
        servers = _check_servers("servers", servers, topology)
        if not is_int(nranks) or nranks < 1 or nranks > g * len(servers):
            raise ValueError(
                f"nranks: {nranks!r} is not allowed on {len(servers)} servers of {g} GPUs; expected an "
                f"integer from 1 to {g * len(servers)}"
            )
        return cls(rank_gpu=tuple(topology.gpu(servers[r // g], r % g) for r in range(int(nranks))))

    @classmethod
    def contiguous(
        cls, topology: Topology, *, nranks: int, first_server: int = 0, gpus_per_node: int | None = None
    ) -> Placement:
        """``nranks`` on ``ceil(nranks / gpus_per_node)`` consecutive whole servers from ``first_server``."""
        g = _per_server(topology, gpus_per_node)
        nranks = _check_nranks("nranks", nranks, g, topology)
        need = math.ceil(nranks / g)
        last = topology.num_servers - need
        if not is_int(first_server) or not 0 <= first_server <= last:
            raise ValueError(
                f"first_server: {first_server!r} is not allowed; {nranks} ranks need {need} servers of "
                f"{g} GPUs, so expected an integer from 0 to {last}"
            )
        first_server = int(first_server)
        return cls.on_servers(
            topology, servers=range(first_server, first_server + need), nranks=nranks, gpus_per_node=g
        )

    @classmethod
    def fragmented(
        cls,
        topology: Topology,
        *,
        nranks: int,
        seed: int = 0,
        stride: int | None = None,
        offset: int = 0,
        free_servers: Sequence[int] | None = None,
        gpus_per_node: int | None = None,
    ) -> Placement:
        """``nranks`` on ``ceil(nranks / gpus_per_node)`` whole servers picked from ``free_servers``
        (default: all): by the seeded draw, or with ``stride`` every stride-th from position ``offset``."""
        g = _per_server(topology, gpus_per_node)
        _check_nranks("nranks", nranks, g, topology)
        free = list(
            range(topology.num_servers)
            if free_servers is None
            else _check_servers("free_servers", free_servers, topology)
        )
        need = math.ceil(nranks / g)
        if need > len(free):
            raise ValueError(
                f"nranks: {nranks} needs {need} servers of {g} GPUs but only {len(free)} are free; "
                f"expected at most {g * len(free)} ranks"
            )
        if stride is None:
            chosen = _drawn(free, need, _PLACEMENT_SALT, integer("seed", seed))
        else:
            stride = integer("stride", stride, low=1)
            offset = integer("offset", offset, low=0, high=len(free) - 1)
            chosen = sorted(free)[offset::stride][:need]
            if len(chosen) < need:
                raise ValueError(
                    f"stride: {stride} from free position {offset} reaches {len(chosen)} of the "
                    f"{len(free)} free servers, but {nranks} ranks need {need}; expected a smaller "
                    "stride or offset"
                )
        return cls.on_servers(topology, servers=chosen, nranks=nranks, gpus_per_node=g)

    @classmethod
    def for_jobs(
        cls,
        topology: Topology,
        *,
        jobs: Sequence[int],
        policy: str = "contiguous",
        seed: int = 0,
        gpus_per_node: int | None = None,
    ) -> tuple[Placement, ...]:
        """One placement per job (``jobs`` = rank counts) on disjoint whole servers; see the module docstring."""
        if policy not in PLACEMENT_POLICIES:
            raise ValueError(f"policy: {policy!r} is not known; expected one of {', '.join(PLACEMENT_POLICIES)}")
        seed = integer("seed", seed)
        g = _per_server(topology, gpus_per_node)
        jobs = list(jobs) if isinstance(jobs, (list, tuple)) else jobs
        if not isinstance(jobs, list) or not jobs or any(not is_int(n) or n < 1 for n in jobs):
            raise reject("jobs", jobs, "a non-empty list of rank counts >= 1")
        need = [math.ceil(n / g) for n in jobs]
        if sum(need) > topology.num_servers:
            raise ValueError(
                f"jobs: {jobs} need {' + '.join(map(str, need))} = {sum(need)} whole servers of {g} GPUs "
                f"but {topology.name!r} has {topology.num_servers}; expected at most "
                f"{topology.num_servers} servers in total"
            )
        if policy == "contiguous":
            starts = [sum(need[:j]) for j in range(len(jobs))]
            servers = [list(range(s, s + k)) for s, k in zip(starts, need)]
        elif policy == "fragmented":
            free = set(range(topology.num_servers))
            servers = []
            for j, k in enumerate(need):
                chosen = _drawn(sorted(free), k, _PLACEMENT_SALT, seed, j)
                free.difference_update(chosen)
                servers.append(chosen)
        else:  # strided: deal servers round-robin to the jobs still short of servers
            servers = [[] for _ in jobs]
            server = 0
            while server < sum(need):
                for j, k in enumerate(need):
                    if len(servers[j]) < k:
                        servers[j].append(server)
                        server += 1
        return tuple(cls.on_servers(topology, servers=s, nranks=n, gpus_per_node=g) for s, n in zip(servers, jobs))

    @classmethod
    def custom(cls, topology: Topology, rank_gpu: tuple[int, ...] | list[int]) -> Placement:
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

    def servers(self, topology: Topology) -> tuple[int, ...]:
        """Servers this placement uses, in order of first rank."""
        return tuple(dict.fromkeys(int(topology.gpu_server[g]) for g in self.rank_gpu))
