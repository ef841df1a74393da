"""NCCL's own cost model: latencies and protocol limits, with NCCL's constants.

NCCL predicts a collective as ``time = L + nbytes / algbw`` (src/graph/tuning.cc) and picks the
algorithm x protocol with the smallest prediction. fabricsim uses this model for two things:

* the **latency** part of a schedule (per-step protocol costs on the GPU and proxy, which a
  network model cannot know): ``L = baseLat[algo][proto] + (nsteps - nInter) * intraLat'
  + nInter * interLat`` for rings, where intraLat is NCCL's per-hop figure for NVLink or PCIe,
  intraLat' = max(intraLat, netOverhead) on multi-node rings (netOverhead 1 us on Intel hosts,
  2 us on AMD, x3 for Simple), interLat the network figure, and x1.4 for multi-node Simple
  all_reduce rings once each rank-channel slice is >= 64 B (NCCL's "ring plateau" correction,
  sm80+);
* the **protocol limits** the flow model applies: LL moves 4 data bytes per 8-byte line (wire
  factor 2) and tops out at ``llMaxBw`` (GPU polling throughput); LL128 moves 120 data bytes per
  128-byte line and is capped per channel (``perChMaxRingLL128Bw``); Simple has no cap. The simulated time takes
  a channel's own fitted LL and LL128 rate between Ampere GPUs on one NVLink server (``simulated_cap_bytes_per_s``)
  and, on sm80 NVLink, each Simple slice's P2P read (``ring_read_slices_s``); across servers LL's host ceiling
  shared by the launched channels (``ll_net_share_cap_bytes_per_s``) and a ring's network latency on every
  crossing of its chain (``ring_chain_crossings``); NCCL's choice keeps its figures.

The bandwidth part of the time comes from the network model (physical links), not from here.
What this ignores: NCCL's topology search (channel count and per-channel speed are inputs),
tuner plugins, and launch overhead of the test harness (nccl-tests' -g mode; a later refinement).

Constants: NCCL 2.30.7 (github.com/NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults),
unchanged for Ring LL/LL128/Simple since 2.18. Worked number: 8x H100 one node, ring LL
all_reduce: L = 6.6 + 14 x 0.6 = 15.0 us (measured small all_reduce on DGX H100: 13-18 us).

**What NCCL enables, per release** (``NCCL_VERSIONS`` 2.18 to 2.30; the tuner's ``--nccl-version``). Read from
tuning.cc, ncclTopoTuneModel, at tags v2.18.3-1, v2.19.3-1, v2.21.5-1, v2.23.4-1, v2.24.3-1, v2.25.1-1,
v2.26.2-1, v2.27.3-1, v2.27.7-1 and v2.30.7-1:

* LL128 (the "pEnable == 2 && p == NCCL_PROTO_LL128" block, ``ll128_disabled``): only when the intra-node graph
  is NVLink (typeIntra <= PATH_NVB), across servers only when the GPU-NIC path (typeInter) is PXB or closer, PXN
  or closer on sm90+, and by compute capability: "switch (minCompCap)" with cases 70, 80, 90 in 2.18-2.24, plus
  100 and 120 from 2.25, replaced in 2.27 by "!(minCompCap < 70 ...)" (any sm >= 70: Ada sm89, sm86 too).
  The GPU-NIC path is the topology's (``GroupLayout.nic_path``: every preset puts a NIC under each GPU's PCIe
  switch, PIX). A100 (sm80), H100/H200 (sm90) and B200 (sm100, 2.25 on) over NVLink get LL128 in every release
  that runs them; RTX 4090 (PCIe) never.
* Tree runs all_reduce only, on one server too, in every modelled release; NVLSTree needs two servers (2.18 on:
  "nNodes == 1 ... NVLS_TREE = 0"); NVLS runs all_gather/reduce_scatter from 2.19 (2.18 lists Ring only for them,
  ``algorithm_missing``); PAT exists from 2.23 (ncclPatEnable: Simple, one GPU per node); Blackwell runs from 2.25
  (the first makefiles/common.mk with sm_100).
* The estimate: Tree Simple's latency was 0 + 4/6/14 us (NVLink/PCIe/network per hop) in 2.18, 0 + 28 us on every
  link in 2.19-2.22 (Tree Simple all but off below tens of MiB), 8.4 + 4/4/14 from 2.23; before 2.23 a
  one-GPU-per-node ring's network steps cost Ring's NET latency, from 2.23 Tree's (``estimate_latency_delta_s``).
  Only NCCL's estimate, hence the choice, changes: the simulated time does not depend on the release.

Not modelled: the other constants that drift between releases stay 2.30.7's for every release (the ring LL factor
1/4 and Hopper's llMaxBw row 87.7/22.5/19.0 in 2.18-2.20; Blackwell's per-channel ceilings, twice Hopper's in
2.25-2.27, ring LL128 73.4 GB/s on one server up to 2.28, 34.5 in 2.29.2, 40.0 from 2.29.7; 2.18's 2 x nNodes ring
network steps), mixed GPU generations, CUDA 11.8's sm90 two-rank exception and NCCL_LL128_C2C.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from topologies.checks import Option
from topologies.units import gbyte_per_s


class Protocol(Option):
    """NCCL's protocols (a member equals its name as a string: ``Protocol.LL128 == "LL128"``)."""

    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


PROTOCOLS = tuple(p.value for p in Protocol)  # the names, as plain strings, in NCCL's order

# Wire bytes per payload byte (NCCL src/include/device.h: LL lines are 8 B with a 4 B flag,
# LL128 lines are 128 B with 8 B of flags -> NCCL_LL128_ELEMS_PER_THREAD 120 data bytes of 128).
WIRE_FACTOR = MappingProxyType({"LL": 2.0, "LL128": 128.0 / 120.0, "Simple": 1.0})

# Simple-protocol pipeline slice: NCCL_BUFFSIZE 4 MiB per connection (src/init.cc) over NCCL_STEPS
# = 8 slots (src/include/device.h) = 512 KiB per step, and rings move SLICESTEPS = NCCL_STEPS / 4
# = 2 steps per slice (ALLREDUCE/ALLGATHER/REDUCESCATTER_SLICESTEPS, src/include/collectives.h).
SIMPLE_SLICE_BYTES = 4 * 1024 * 1024 // 8 * 2

# baseLatencies[algo][proto] in us (tuning.cc, NCCL 2.30.7)
BASE_LATENCY_US = MappingProxyType(
    {
        "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
        "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    }
)

# hwLatencies[link][algo][proto] in us (tuning.cc, NCCL 2.30.7)
HW_LATENCY_US = MappingProxyType(
    {
        "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
        "pcie": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
        "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
    }
)

# Extra latency of one NVLink hop on this GPU generation's platform over NCCL's hwLatencies, which
# match the H100 tables (DGX H100, 8 GPUs: 13.7 us measured vs 15.3 us for ring LL all_reduce). Fitted
# once per generation on the latency regime (< 64 KiB) of one 8-GPU all_reduce table: A100 SXM4 (mpirun
# run, median 24.4 us vs 15.3 us over 14 ring hops: +0.65 us) and HGX B200 (median 25.5 us vs 15.3 us:
# +0.7 us); the other tables of those GPUs (all_gather, reduce_scatter, sendrecv, two nodes) are held out.
# Only the simulated time pays it: NCCL's choice (the estimates) uses NCCL's own table.
NVLINK_HOP_EXTRA_US = MappingProxyType({"ampere": 0.65, "blackwell": 0.7})

# llMaxBws[row][1 node, 2 nodes, >=3 nodes] in GB/s: row = GPU arch on one node, CPU vendor
# across nodes (tuning.cc, NCCL 2.30.7).
LL_MAX_BW_GBPS = MappingProxyType(
    {
        "volta": (39.0, 39.0, 20.4),
        "intel": (39.0, 39.0, 20.4),
        "ampere": (87.7, 22.5, 19.0),
        "amd": (87.7, 22.5, 19.0),
        "ada": (87.7, 22.5, 19.0),  # Ada (sm89) shares Ampere's row (compCapIndex 1)
        "hopper": (141.0, 45.0, 35.0),
        "blackwell": (282.0, 90.0, 70.0),
    }
)

# perChMaxRingLL128Bw[arch] in GB/s per channel (tuning.cc, NCCL 2.30.7)
LL128_MAX_BW_PER_CHANNEL_GBPS = MappingProxyType(
    {
        "volta": 20.0,
        "ampere": 20.0,
        "ada": 20.0,
        "hopper": 36.7,
        "blackwell": 40.0,
    }
)

# Payload throughput of one point-to-point channel, one direction: a p2p channel is one CTA whose
# warps are split between its sends and its receives. Measured on HGX B200: sendrecv on 8 ranks moves
# 86.8 GB/s from 8 to 64 MiB (incremental), where NCCL runs 4 channels a peer (p2p.py) -> 21.7 GB/s a
# channel (calibration b200_vultr_hgx_1node_2node_allcoll.csv), 0.54 of NCCL's per-channel LL128
# ceiling for Blackwell. No other generation is measured: each takes the same fraction of its own
# ceiling (Hopper 36.7 -> 19.9 GB/s, Ampere and Ada 20 -> 10.9 GB/s).
P2P_CHANNEL_GBPS_BLACKWELL = 21.7


def p2p_channel_bytes_per_s(arch: str) -> float:
    """Most one point-to-point channel streams, one direction (payload bytes/s)."""
    scale = LL128_MAX_BW_PER_CHANNEL_GBPS.get(arch, 20.0) / LL128_MAX_BW_PER_CHANNEL_GBPS["blackwell"]
    return gbyte_per_s(P2P_CHANNEL_GBPS_BLACKWELL * scale)


# Payload throughput of one point-to-point channel sending LL: its send warps write 8-byte flagged lines into the
# peer's FIFO and its receive warps poll them (the CTA's warps split between the two, enqueue.cc / sendrecv.h), far
# below a ring channel's share of llMaxBw. Fitted over the LL rows of the one-server HGX B200 sendrecv and
# all-to-all tables (validation cross.py FITS; NCCL 2.22-2.28 send up to 512 KiB a peer with LL there): sendrecv
# takes 12.6 us more at 512 than at 256 KiB a peer, 64 KiB more on each of its 4 channels (5.2 GB/s); all-to-all
# 15.3 us more at 4 than at 2 MiB (4.3 GB/s). Other generations scale with their one-server llMaxBw (Hopper 2.5,
# Ampere and Ada 1.55 GB/s): an assumption, no table measures them.
P2P_LL_CHANNEL_GBPS_BLACKWELL = 5.0


def p2p_ll_channel_bytes_per_s(arch: str) -> float:
    """Most one point-to-point channel streams with LL, one direction (payload bytes/s)."""
    one_node = LL_MAX_BW_GBPS.get(arch, LL_MAX_BW_GBPS["ampere"])[0]
    return gbyte_per_s(P2P_LL_CHANNEL_GBPS_BLACKWELL * one_node / LL_MAX_BW_GBPS["blackwell"][0])


# perChMaxTreeBw / perChMaxTreeLL128Bw [arch] -> (1 node, 2 nodes, >= 3 nodes) in GB/s: per-channel
# bus-bandwidth ceilings of NCCL's tree kernels (tuning.cc, NCCL 2.30.7)
PER_CHANNEL_MAX_TREE_GBPS = MappingProxyType(
    {
        "volta": (26.5, 18.5, 10.0),
        "ampere": (24.0, 23.6, 17.8),
        "ada": (24.0, 23.6, 17.8),
        "hopper": (38.7, 41.4, 36.0),
        "blackwell": (70.0, 42.8, 24.0),
    }
)
PER_CHANNEL_MAX_TREE_LL128_GBPS = MappingProxyType(
    {
        "volta": (20.0, 20.0, 20.0),
        "ampere": (20.0, 20.0, 20.0),
        "ada": (20.0, 20.0, 20.0),
        "hopper": (36.7, 36.7, 29.0),
        "blackwell": (55.6, 31.67, 20.0),
    }
)

# perChMaxNVLSTreeBw [arch] -> (1 node, 2 nodes, >= 3 nodes) in GB/s (tuning.cc, NCCL 2.30.7)
PER_CHANNEL_MAX_NVLSTREE_GBPS = MappingProxyType({"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)})

# treeCorrectionFactor[proto][log2(nbytes / 64)] for 64 B .. 256 MiB (tuning.cc): NCCL's own
# admission that trees do worse than its model at medium sizes; used for the choice only.
TREE_CORRECTION = MappingProxyType(
    {
        "LL": (
            1.0,
            1.0,
            1.0,
            1.0,
            0.9,
            0.8,
            0.7,
            0.7,
            0.7,
            0.7,
            0.6,
            0.5,
            0.4,
            0.4,
            0.5,
            0.6,
            0.7,
            0.8,
            0.9,
            1.0,
            1.0,
            1.0,
            1.0,
            1.0,
        ),
        "LL128": (
            1.0,
            1.0,
            1.0,
            1.0,
            1.0,
            0.9,
            0.8,
            0.8,
            0.8,
            0.7,
            0.6,
            0.6,
            0.6,
            0.6,
            0.6,
            0.6,
            0.8,
            0.9,
            0.9,
            0.9,
            0.9,
            1.0,
            1.0,
            1.0,
        ),
        "Simple": (
            0.9,
            0.9,
            0.9,
            0.9,
            0.9,
            0.9,
            0.9,
            0.8,
            0.7,
            0.6,
            0.6,
            0.5,
            0.5,
            0.5,
            0.5,
            0.6,
            0.7,
            0.8,
            0.7,
            0.7,
            0.8,
            0.9,
            0.9,
            0.9,
        ),
    }
)


def log2i(n: int) -> int:
    """NCCL's ``log2i`` (src/include/utils.h: ``while (n >>= 1) l++``): log2 of ``n`` >= 1 rounded down,
    which tuning.cc takes of the server count in the Tree, NVLSTree and PAT latencies (3 servers: 1)."""
    return int(n).bit_length() - 1


def node_column(nnodes: int) -> int:
    """Column of NCCL's per-node-count tables: 1 node, 2 nodes, >= 3 nodes."""
    return 0 if nnodes == 1 else (1 if nnodes == 2 else 2)


def tree_channel_max_bytes_per_s(*, protocol: str, arch: str, nnodes: int) -> float:
    """Per-channel bus-bandwidth ceiling of NCCL's tree kernels for Simple (perChMaxTreeBw) or LL128
    (perChMaxTreeLL128Bw) on ``nnodes`` servers. A GPU generation not in the tables takes Ampere's
    row, as NCCL's compCapIndex puts every sm80 to sm89 GPU (tuning.cc)."""
    table = PER_CHANNEL_MAX_TREE_GBPS if protocol == "Simple" else PER_CHANNEL_MAX_TREE_LL128_GBPS
    return gbyte_per_s(table.get(arch, table["ampere"])[node_column(nnodes)])


def tree_correction(protocol: str, nbytes: int) -> float:
    table = TREE_CORRECTION[protocol]
    index = int(math.log2(nbytes / 64)) if nbytes >= 64 else 0
    return table[min(max(index, 0), len(table) - 1)]


# NCCL_NET_OVERHEAD default (tuning.cc): 1 us on Intel/other x86, 2 us on AMD; x3 for Simple.
NET_OVERHEAD_US = MappingProxyType({"intel": 1.0, "amd": 2.0})

# "Ring plateau" correction for multi-node Simple all_reduce rings on sm80+ (tuning.cc).
RING_SIMPLE_PLATEAU_FACTOR = 1.4


def ring_steps(kind_value: str, nranks: int, nnodes: int) -> tuple[int, int]:
    """(nsteps, nInterSteps) of a ring for a collective kind ("all_reduce", ...)."""
    if kind_value == "all_reduce":
        return 2 * (nranks - 1), 2 * (nnodes - 1)
    if kind_value in ("broadcast", "reduce"):
        return nranks, nnodes - 1 if nnodes > 1 else 0
    if kind_value == "sendrecv":
        return 1, 1 if nnodes > 1 else 0
    return nranks - 1, nnodes - 1


def ring_chain_crossings(kind_value: str, nranks: int, nnodes: int, ppn: int | None = None) -> int:
    """Network edges the longest dependency chain of a ring crosses, servers in blocks of ``ppn`` ranks (default
    ``nranks / nnodes``).

    A ring step forwards what the previous step delivered, so the last rank to finish waits on a chain of
    consecutive ring edges: n - 1 for all_gather and reduce_scatter, 2 (n - 1) for all_reduce (reduce-scatter then
    all-gather, one chunk all the way). The ring leaves a server once every ppn edges, so h consecutive edges cross
    at most ceil(h / ppn) of them: N for n - 1 hops (N - 1 with one GPU a server), 2N for all_reduce (2N - 1 at
    ppn 2, 2N - 2 at ppn 1). NCCL's estimate counts N - 1 and 2 (N - 1) (tuning.cc, nInterSteps); rooted
    collectives (broadcast, reduce: a chain from the root, which starts a server) and sendrecv keep NCCL's count.

    >>> [ring_chain_crossings(k, 16, 2) for k in ("all_gather", "all_reduce", "broadcast")]
    [2, 4, 1]
    >>> ring_chain_crossings("all_gather", 2, 2)  # one GPU a server: every edge crosses, as NCCL counts
    1
    """
    nsteps, ninter = ring_steps(kind_value, nranks, nnodes)
    if nnodes <= 1 or kind_value not in ("all_gather", "reduce_scatter", "all_reduce"):
        return ninter
    ppn = max(1, nranks // nnodes if ppn is None else ppn)
    return max(ninter, -(-nsteps // ppn))


def ring_latency_s(
    *,
    kind_value: str,
    protocol: str,
    nranks: int,
    nnodes: int,
    ppn: int,
    intra: str,
    cpu_vendor: str,
    nbytes: int,
    nchannels: int,
    hop_extra_us: float = 0.0,
    chain_crossings: bool = False,
) -> float:
    """NCCL's ring latency for one collective (seconds); ``hop_extra_us`` is added to every
    intra-server hop (the platform's ``GroupLayout.hop_extra_us``; 0 for NCCL's own estimate), and with
    ``chain_crossings`` (the simulated time) the network latency is paid on every crossing of the ring's
    dependency chain (``ring_chain_crossings``) where NCCL pays N - 1 (2 (N - 1) for all_reduce), each in
    place of an intra-server hop.

    Worked number: 2 servers of 8 B200, ring LL all_gather: NCCL 6.6 + 14 x 1.0 + 1 x 2.7 = 23.3 us; the
    simulated time with the platform's 0.7 us a NVLink hop (1.3 us, above the 1.0 us netOverhead) and 2
    crossings: 6.6 + 13 x 1.3 + 2 x 2.7 = 28.9 us.

    >>> kw = dict(kind_value="all_gather", protocol="LL", nranks=16, nnodes=2, ppn=8, intra="nvlink",
    ...     cpu_vendor="intel", nbytes=8, nchannels=16)
    >>> [round(ring_latency_s(**kw, **x) * 1e6, 2) for x in ({}, dict(hop_extra_us=0.7, chain_crossings=True))]
    [23.3, 28.9]
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: {protocol!r} is not known; expected one of {', '.join(PROTOCOLS)}")
    nsteps, ninter = ring_steps(kind_value, nranks, nnodes)
    if chain_crossings:
        ninter = ring_chain_crossings(kind_value, nranks, nnodes, ppn)
    intra_lat = HW_LATENCY_US[intra]["ring"][protocol] + hop_extra_us
    if nnodes > 1:
        overhead = NET_OVERHEAD_US.get(cpu_vendor, 1.0) * (3.0 if protocol == "Simple" else 1.0)
        intra_lat = max(intra_lat, overhead)
    inter_lat = HW_LATENCY_US["net"]["tree" if ppn == 1 else "ring"][protocol]
    latency = BASE_LATENCY_US["ring"][protocol] + (nsteps - ninter) * intra_lat + ninter * inter_lat
    if (
        kind_value == "all_reduce"
        and protocol == "Simple"
        and nnodes > 1
        and nbytes / (max(nchannels, 1) * nranks) >= 64
    ):
        latency *= RING_SIMPLE_PLATEAU_FACTOR
    return latency * 1e-6


# ---- the network transport's proxy (src/transport/net.cc, src/proxy.cc, src/enqueue.cc) ----------------
# Across servers a GPU does not talk to the NIC itself: one proxy thread per GPU (proxy.cc,
# ncclProxyProgress -> progressOps) walks every active network connection of that GPU in turn and,
# for each step of a connection's NCCL_STEPS = 8 slot FIFO (device.h), does the host-side work:
# the sender's sendProxyProgress waits for the GPU to finish the step, posts it (ncclNet isend) and
# tests its completion; the receiver's recvProxyProgress posts the buffer (irecv), tests it, issues a
# GPU Direct flush for Simple (iflush, an RDMA read) and then releases the step to the GPU. One step
# is one chunk (tree) or one slice (ring) of calcCollChunking (enqueue.cc). The thread is serial, so
# a collective cannot end before the busiest proxy has served steps x its connections; it works
# while the data moves, so this is a floor on the step (Step.proxy_s), not a latency added to it.
# NCCL's own model carries the one-connection case: netOverhead, 1 us per step on Intel/other x86,
# 2 us on AMD, x3 for Simple (tuning.cc, getNetOverhead), the floor of each multi-node ring step.

#: host-side cost of one network step on one connection, Intel host, LL and LL128 (us). Fitted once
#: over every shipped multi-node nccl-tests table (fabricsim validate --cross); the
#: AMD figure and Simple's x3 keep NCCL's netOverhead ratios.
PROXY_STEP_US_INTEL = 1.0

# Per-protocol buffers of one connection (init.cc DEFAULT_*_BUFFSIZE): LL 8 lines x 512 threads x
# NCCL_STEPS x 16 B = 512 KiB; LL128 120 elements x 640 threads x NCCL_STEPS x 8 B = 4,915,200 B;
# Simple 4 MiB. One step is buffer / NCCL_STEPS; its payload is half of it for LL, 15/16 for LL128.
NCCL_STEPS = 8
BUFFER_BYTES = MappingProxyType({"LL": 8 * 512 * 8 * 16, "LL128": 120 * 640 * 8 * 8, "Simple": 4 * 1024 * 1024})
# ncclProtoGrainSize (device.h): chunks are rounded down to it.
GRAIN_BYTES = MappingProxyType({"LL": 16, "LL128": 32 * 8 // 16 * 15 * 8, "Simple": 512})
# Ring Simple: a chunk is ALLREDUCE/ALLGATHER/REDUCESCATTER_CHUNKSTEPS = 4 steps, sent in slices of
# SLICESTEPS = 2 (collectives.h): 2 network sends a chunk; broadcast and reduce 1 step, 1 send.
RING_SIMPLE_CHUNK_STEPS = 4
RING_SIMPLE_SLICE_STEPS = 2


def proxy_step_s(*, protocol: str, cpu_vendor: str, step_us: float | None = None) -> float:
    """Proxy time of one network step on one connection (seconds): ``step_us`` (None: the Intel
    default, ``PROXY_STEP_US_INTEL``) scaled as NCCL scales netOverhead, x2 on AMD hosts, x3 for Simple.

    >>> round(proxy_step_s(protocol="Simple", cpu_vendor="amd", step_us=1.0) * 1e6, 6)
    6.0
    """
    base = PROXY_STEP_US_INTEL if step_us is None else step_us
    vendor = NET_OVERHEAD_US.get(cpu_vendor, 1.0) / NET_OVERHEAD_US["intel"]
    return base * vendor * (3.0 if protocol == "Simple" else 1.0) * 1e-6


# A ring's network connections are not served by the proxy's serial work alone: each connection moves one FIFO
# step at a time through a round trip of host and NIC actions (net.cc sendProxyProgress: the proxy posts a step
# only once the GPU has written all of it and advanced its tail, for LL128 "*recvTail > tail"; isend; the NIC's
# RDMA write; test until the completion; the head returned to the GPU), so a ring connection lasts at least its
# steps (ring_proxy_steps) x that round trip, on every GPU at once: the floor of a multi-server ring
# (ring.RingAlgorithm._proxy_s), in place of the busiest GPU's serial proxy work (a 24-channel ring has 6
# connections a GPU and measures a per-connection floor, not 6 connections' sum). A step crosses the network
# whole (store and forward: posted once written, the next rank reads it once its completion is seen), and in a
# one-loop ring step k + 1 of a connection carries what the ring delivered at step k, so within the first loop a
# connection's round trips and its transfers follow each other; later loops have steps in flight together
# (NCCL_STEPS slots) and hide round trips behind transfers. The floor is therefore the longer of
# steps x round trip and first-loop steps x round trip + the connection's whole transfer at its own limit
# (ring_net_floor="connection"; "round_trip" keeps steps x round trip alone, the ablation). LL keeps no such
# floor: its send buffer is host memory whose lines the proxy polls directly (no tail, no GPU Direct read;
# net.cc: LL buffers are never in device memory on the send side), and NCCL's latency already pays netOverhead
# on each of its steps. Simple keeps none either (ring_net_step_s says why); AMD hosts x2.

#: round trip of one LL128 step on one network connection, Intel host (us): the ring's floor and, since, the tree's
#: pipeline floor (tree_net_floor_s). Fitted over the mid sizes of every shipped multi-node table before the tree
#: floor used it; fabricsim validate --cross now puts the optimum at 4.5 us, which the forced-Ring 2x H100 table
#: contradicts (11.1 % -> 27.1 %), so 3.5 is kept and the report names the constant as moving
NET_STEP_US_LL128 = 3.5


def ring_net_step_s(*, protocol: str, cpu_vendor: str) -> float:
    """Floor of one step of one ring network connection (seconds): ``NET_STEP_US_LL128`` for LL128, x2 on AMD
    hosts (NCCL's netOverhead ratio); 0 for LL (the proxy polls its flags itself, and NCCL's latency charges
    netOverhead per step) and 0 for Simple: the floor is fitted on LL128 rows only, no multi-node Simple table in
    the mid band pins one, and NCCL's latency already charges Simple x3 netOverhead a step (a Simple floor of
    LL128's round trip would put a forced-Simple 1 MiB all_reduce on 2 DGX H100 at 427 us, over twice NCCL's own
    estimate of 184 us).

    >>> round(ring_net_step_s(protocol="LL128", cpu_vendor="amd") / ring_net_step_s(protocol="LL128",
    ...     cpu_vendor="intel"), 6), ring_net_step_s(protocol="Simple", cpu_vendor="intel")
    (2.0, 0.0)
    """
    if protocol != "LL128":
        return 0.0
    vendor = NET_OVERHEAD_US.get(cpu_vendor, 1.0) / NET_OVERHEAD_US["intel"]
    return NET_STEP_US_LL128 * vendor * 1e-6


# A tree's network connections move their steps the same way (net.cc: the sender's proxy posts an LL128 step once the
# GPU's tail says all of it is written), and a tree all_reduce is one pipeline of chunks, one step each
# (tree_chunk_bytes), up the tree of servers and back down: a chunk crosses the network 2 x depth times, store and
# forward, each crossing costing the time its chain takes to write the chunk (the chunk at the chain's rate) and then
# the step's round trip. The first chunk pays both at every crossing; each later chunk leaves one stage behind at the
# slower of the round trip and the chunk's write (NCCL_STEPS slots overlap a connection's steps). NCCL's tree latency
# charges the hops of one chunk but no network step (tuning.cc: no netOverhead for Tree), so this is a floor on the
# collective, next to the busiest proxy's work (tree.TreeAlgorithm._proxy_s; ctx.tree_net_floor, for ablation).


def tree_net_floor_s(
    *,
    protocol: str,
    cpu_vendor: str,
    chain_bytes: int,
    chunk_bytes: int,
    crossings: int,
    chain_bytes_per_s: float,
) -> float:
    """Floor of a tree all_reduce's chunks through its network crossings (seconds): with R the step round trip
    (``ring_net_step_s``: LL128 only), k = ceil(chain_bytes / chunk_bytes) chunks and t one chunk's payload at the
    chain's payload rate, ``crossings x (R + t) + (k - 1) x max(R, t)``; 0 without a round trip or crossing.

    Worked number: 2 AMD servers (R = 7 us), 2 crossings, 8 chunks of 34,560 B at 5 GB/s (t = 6.912 us):
    2 x 13.912 + 7 x 7 = 76.824 us.

    >>> round(tree_net_floor_s(protocol="LL128", cpu_vendor="amd", chain_bytes=8 * 34560, chunk_bytes=34560,
    ...     crossings=2, chain_bytes_per_s=5e9) * 1e6, 4)
    76.824
    """
    round_trip_s = ring_net_step_s(protocol=protocol, cpu_vendor=cpu_vendor)
    if round_trip_s <= 0 or crossings < 1 or chain_bytes <= 0 or chunk_bytes <= 0:
        return 0.0
    chunks = -(-chain_bytes // chunk_bytes)
    write_s = min(chunk_bytes, chain_bytes) / chain_bytes_per_s  # payload at the chain's payload cap
    return crossings * (round_trip_s + write_s) + (chunks - 1) * max(round_trip_s, write_s)


def step_payload_bytes(protocol: str) -> int:
    """Payload of one FIFO step (enqueue.cc calcCollChunking): LL 32 KiB, LL128 576,000 B, Simple 512 KiB."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol == "LL":
        return step // 2
    if protocol == "LL128":
        return step // 16 * 15
    return step


def tree_chunk_bytes(*, protocol: str, nbytes: int, nchannels: int, nnodes: int, ppn: int) -> int:
    """Chunk of a tree all_reduce (enqueue.cc calcCollChunking): one step; for LL128 halved while the
    per-channel chunk count is below (1 + log2i(nNodes) + 0.1 ppn) x 64 / ppn (down to 128 KiB) and
    x 16 / ppn (down to 32 KiB); rounded down to the protocol grain.

    Worked number: 2 servers of 8 H100, 1 MiB on 32 tree channels: 576,000 -> 72,000 -> 18,000 B
    (2.8 x 64 / 8 = 22.4 and 2.8 x 16 / 8 = 5.6 chunks a channel wanted), grain 1,920: 17,280 B.

    >>> tree_chunk_bytes(protocol="LL128", nbytes=1 << 20, nchannels=32, nnodes=2, ppn=8)
    17280
    """
    chunk = step_payload_bytes(protocol)
    if protocol == "LL128":
        nsteps = 1 + log2i(nnodes) + 0.1 * ppn
        per_channel = max(nchannels, 1)
        while nbytes // (per_channel * chunk) < nsteps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while nbytes // (per_channel * chunk) < nsteps * 16 / ppn and chunk > 32768:
            chunk //= 2
    return chunk // GRAIN_BYTES[protocol] * GRAIN_BYTES[protocol]


def ring_proxy_steps(*, kind_value: str, protocol: str, nbytes: int, nchannels: int, nranks: int) -> int:
    """Network steps one ring connection posts for a collective (enqueue.cc: nstepsPerLoop x nLoops x
    chunkSteps, one send per slice): per loop 2(n-1) steps for all_reduce, n-1 for all_gather and
    reduce_scatter, 1 for broadcast and reduce; a loop moves channels x chunks-per-loop x chunk bytes.

    >>> ring_proxy_steps(kind_value="all_gather", protocol="LL128", nbytes=2 << 20, nchannels=16, nranks=16)
    15
    """
    if kind_value == "all_reduce":
        per_loop, chunks = 2 * (nranks - 1), nranks
    elif kind_value in ("broadcast", "reduce"):
        per_loop, chunks = 1, 1
    else:
        per_loop, chunks = nranks - 1, nranks
    slices = 1
    chunk = step_payload_bytes(protocol)
    if protocol == "Simple" and kind_value not in ("broadcast", "reduce"):
        chunk *= RING_SIMPLE_CHUNK_STEPS
        slices = RING_SIMPLE_CHUNK_STEPS // RING_SIMPLE_SLICE_STEPS
    loops = max(1, -(-nbytes // (max(nchannels, 1) * chunks * chunk)))
    return per_loop * loops * slices


# ---- P2P read on Ampere NVLink (src/graph/paths.cc ncclTopoCheckP2p, src/transport/p2p.cc) ----------------------
# NCCL reads instead of writes between two sm80 GPUs on an NVLink path ("Enable P2P Read for Ampere/NVLink only":
# both compute capabilities 8.0, path PATH_NVL; NCCL_P2P_READ_ENABLE overrides it; the log says "via P2P/IPC/read").
# Only the Simple buffer moves (p2pSendSetup: "For P2P Read the SIMPLE buffer is tagged on the end of the
# ncclSendMem structure"): the sender writes a slice into its own memory and raises the tail, the receiving CTA
# sees the tail, then loads the slice across NVLink. LL and LL128 keep writing into the receiver. A slice's loads
# can only start once its tail is seen, so each slice a ring CTA moves exposes a flag wait and a load round trip
# that a push (store) ring overlaps with the previous slice: a per-slice cost on the ring's time (Hopper and
# Blackwell push, sm80 only reads).
P2P_READ_SM_VERSION = 80

#: exposed cost of one Simple slice a ring CTA reads over NVLink (P2P read, sm80), in us. Fitted once over the ring
#: Simple rows of the shipped A100 tables (fabricsim validate --cross)
P2P_READ_SLICE_US = 3.0


def p2p_read(*, sm_version: int, intra: str) -> bool:
    """Whether NCCL's intra-server P2P transport reads (Simple only): NVLink between sm80 GPUs (paths.cc)."""
    return intra == "nvlink" and sm_version == P2P_READ_SM_VERSION


def ring_read_slices_s(*, kind_value: str, nbytes: int, nchannels: int, nranks: int) -> float:
    """Exposed P2P read cost of a Simple ring (seconds): every slice one ring CTA moves (``ring_proxy_steps``:
    2(n-1) steps a loop for all_reduce, two slices a step) x ``P2P_READ_SLICE_US``.

    >>> round(ring_read_slices_s(kind_value="all_reduce", nbytes=32 << 20, nchannels=16, nranks=8) * 1e6, 6)
    84.0
    """
    slices = ring_proxy_steps(
        kind_value=kind_value, protocol="Simple", nbytes=nbytes, nchannels=nchannels, nranks=nranks
    )
    return slices * P2P_READ_SLICE_US * 1e-6


def ll_max_bw_bytes_per_s(*, arch: str, cpu_vendor: str, nnodes: int) -> float:
    row = arch if nnodes == 1 else cpu_vendor
    column = 0 if nnodes == 1 else (1 if nnodes == 2 else 2)
    return LL_MAX_BW_GBPS.get(row, LL_MAX_BW_GBPS["intel"])[column] * 1e9


# What NCCL launches for one ring or tree collective (enqueue.cc, topoGetAlgoInfo, "Ring/Tree channel
# tuning"; the same loop since NCCL 2.4): start from the communicator's channels and the protocol's
# most threads per channel (NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640,
# NCCL_SIMPLE_MAX_NTHREADS 512); while nbytes < channels x threads x threshold, drop a channel, and
# with one channel left halve the threads while they are a multiple of 128. Thresholds, bytes per
# thread (NCCL_LL_THREAD_THRESHOLD 8, x nRanks for ring LL; NCCL_LL128_THREAD_THRESHOLD 8;
# NCCL_SIMPLE_THREAD_THRESHOLD 64). NVLS keeps its nvlsChannels; CollNet has its own rule. Each
# launched channel keeps the per-channel protocol ceiling of the communicator (an SM's LL throughput
# does not grow because fewer SMs run), so a small LL/LL128 collective is slower than the model
# with every channel, as measured (DGX H100: 13.7 us at 8 B, 19.5 us at 64 KiB). Fewer threads
# per channel (below one channel) are not modelled as a slower channel: scaling the ceiling by the
# threads made the A100 latency regime 4.8% -> 18% off.
MAX_THREADS = MappingProxyType({"LL": 512, "LL128": 640, "Simple": 512})
THREAD_THRESHOLD_BYTES = MappingProxyType({"LL": 8, "LL128": 8, "Simple": 64})


def launched_channels(*, algorithm: str, protocol: str, nbytes: int, nchannels: int, nranks: int) -> int:
    """Channels NCCL launches for a ``algorithm`` ("ring" or "tree") collective of ``nbytes`` on a
    communicator of ``nchannels`` channels.

    Worked number: ring LL all_reduce of 64 KiB on 8 GPUs, 16 channels: threshold 8 x 8 = 64 B per
    thread, 512 threads, 32 KiB per channel, so 2 channels; 1 MiB or more: all 16.
    """
    threshold = THREAD_THRESHOLD_BYTES[protocol] * (nranks if algorithm == "ring" and protocol == "LL" else 1)
    per_channel = MAX_THREADS[protocol] * threshold
    return max(1, min(nchannels, nbytes // per_channel))  # the largest count with nbytes >= count x per_channel


def protocol_cap_bytes_per_s(*, protocol: str, arch: str, cpu_vendor: str, nnodes: int, nchannels: int) -> float:
    """Payload-rate cap of one channel under ``protocol`` (inf when the protocol has none) on a
    communicator of ``nchannels`` channels (NCCL's LL ceiling is for all of them together)."""
    if protocol == "LL":
        return ll_max_bw_bytes_per_s(arch=arch, cpu_vendor=cpu_vendor, nnodes=nnodes) / max(nchannels, 1)
    if protocol == "LL128":
        return LL128_MAX_BW_PER_CHANNEL_GBPS.get(arch, 20.0) * 1e9
    return float("inf")


# The simulated LL rate of one channel: NCCL's llMaxBw is its tuner's ceiling for every channel together (the
# Ampere row, 87.7 GB/s on one server, is shared with Ada and with AMD hosts across servers); what one channel moves
# is one CTA of NCCL_LL_MAX_NTHREADS 512 threads, each polling an 8-byte line's flag and forwarding its 4 data bytes,
# a rate of the GPU. On Hopper llMaxBw / 16 channels (8.8 GB/s) is what the DGX H100 table moves at 512 KiB-1 MiB;
# between A100s over NVLink the measured LL rows move more than llMaxBw / 16 (5.5 GB/s) a channel at 1 to 8
# channels (at 16 the NVLink share binds): a channel's own rate, fitted (below), replaces NCCL's figure in the
# simulated time of rings (NCCL's choice keeps llMaxBw). Other generations keep llMaxBw / channels.

#: LL payload rate of one channel between Ampere GPUs (the A100; the only Ampere preset) on one NVLink server
#: (GB/s). Fitted over the mid-size LL rows (64 KiB - 64 MiB) of the one-server A100 tables (validate --cross)
LL_CHANNEL_GBPS_AMPERE = 11.0
#: LL128 payload rate of one channel between Ampere GPUs on one NVLink server (GB/s), in place of perChMaxRingLL128Bw
#: (20.0, Volta's figure kept for Ampere), which 16 channels never reach through the NVLink share of 15 GB/s a
#: channel. Fitted once over the LL128 rows of the one-server A100 tables (fabricsim validate --cross)
LL128_CHANNEL_GBPS_AMPERE = 10.5


def ll_net_share_cap_bytes_per_s(*, arch: str, cpu_vendor: str, nnodes: int, nchannels: int, launched: int) -> float:
    """LL payload cap of one of ``launched`` channels of a communicator of ``nchannels`` across ``nnodes`` servers.

    NCCL's llMaxBw across servers is a row of the host's CPU vendor (tuning.cc: "for multi-node, we look at CPU
    type"), a ceiling of the host path LL takes over the network (the send buffer is host memory, net.cc), for the
    collective: the channels it launches share it, a small collective launching fewer (enqueue.cc, ring/tree channel
    tuning). A channel moves no more than its GPU's own LL rate, the generation's one-server llMaxBw over the
    communicator's channels (NCCL's figure for every channel of one server; on Ampere it keeps that figure, not the
    measured one-server channel rate ``LL_CHANNEL_GBPS_AMPERE``, which no multi-server ring table checks). NCCL's
    estimate keeps llMaxBw for all channels (``protocol_cap_bytes_per_s``).

    Worked number: 2 servers of B200 on Intel hosts, 16 channels: 1 launched 17.6 GB/s (282 / 16, the GPU's), 4
    launched 9.75 (39 / 4), 16 launched 2.44 (39 / 16, NCCL's figure).

    >>> [round(ll_net_share_cap_bytes_per_s(arch="blackwell", cpu_vendor="intel", nnodes=2, nchannels=16,
    ...     launched=c) / 1e9, 4) for c in (1, 4, 16)]
    [17.625, 9.75, 2.4375]
    """
    gpu = ll_max_bw_bytes_per_s(arch=arch, cpu_vendor=cpu_vendor, nnodes=1) / max(nchannels, 1)
    host = ll_max_bw_bytes_per_s(arch=arch, cpu_vendor=cpu_vendor, nnodes=nnodes) / max(launched, 1)
    return min(gpu, host)


def simulated_cap_bytes_per_s(
    *,
    protocol: str,
    arch: str,
    cpu_vendor: str,
    nnodes: int,
    nchannels: int,
    intra: str,
    ll_channel: bool = True,
    ll128_channel: bool = True,
    launched: int | None = None,
    ll_net_share: bool = False,
) -> float:
    """The per-channel payload cap the simulated time uses: ``protocol_cap_bytes_per_s``, except between Ampere GPUs
    on one NVLink server LL with ``ll_channel`` (``LL_CHANNEL_GBPS_AMPERE`` a channel, whatever the channels) and
    LL128 with ``ll128_channel`` (``LL128_CHANNEL_GBPS_AMPERE``); and across servers LL with ``ll_net_share``
    (``ll_net_share_cap_bytes_per_s``) on the ``launched`` channels.

    >>> round(simulated_cap_bytes_per_s(protocol="LL", arch="ampere", cpu_vendor="intel", nnodes=1, nchannels=16,
    ...     intra="nvlink") / protocol_cap_bytes_per_s(protocol="LL", arch="ampere", cpu_vendor="intel", nnodes=1,
    ...     nchannels=16), 4)  # 11.0 / (87.7 / 16)
    2.0068
    """
    if ll_net_share and protocol == "LL" and nnodes > 1 and launched is not None:
        return ll_net_share_cap_bytes_per_s(
            arch=arch, cpu_vendor=cpu_vendor, nnodes=nnodes, nchannels=nchannels, launched=launched
        )
    if arch == "ampere" and nnodes == 1 and intra == "nvlink":
        if ll_channel and protocol == "LL":
            return gbyte_per_s(LL_CHANNEL_GBPS_AMPERE)
        if ll128_channel and protocol == "LL128":
            return gbyte_per_s(LL128_CHANNEL_GBPS_AMPERE)
    return protocol_cap_bytes_per_s(
        protocol=protocol, arch=arch, cpu_vendor=cpu_vendor, nnodes=nnodes, nchannels=nchannels
    )


# ---- what NCCL enables by default, per NCCL version (src/graph/tuning.cc, ncclTopoTuneModel) ----------------
#: NCCL minor versions whose default enablement is modelled (2.18 .. 2.30); a version is "2.MINOR", or a
#: release "2.MINOR.PATCH" (the patch does not change what is enabled: checked on the tags 2.18.1/2.18.3, see
#: NCCL_LL128_NVB_MINOR)
NCCL_VERSIONS = tuple(f"2.{minor}" for minor in range(18, 31))
#: the default: the latest modelled, the release whose constants this module carries (2.30.7). For the shipped
#: presets every version from 2.25 enables the same (LL128 on Ampere, Hopper and Blackwell over NVLink, off on
#: PCIe boxes; PAT from 2.23), which covers the tables that state theirs (2.26.2, 2.27.7)
DEFAULT_NCCL_VERSION = "2.30"
# LL128's compute-capability check (the "switch (minCompCap)" of the LL128 block): 2.18-2.24 enable it on
# sm70, sm80 and sm90 only; 2.25 adds sm100 and sm120 (Blackwell); from 2.27 any sm >= 70 (Ada, sm86)
LL128_SM_VERSIONS = ((25, (70, 80, 90, 100, 120)), (18, (70, 80, 90)))  # (first minor, compute capabilities)
LL128_ANY_SM_MINOR = 27
#: the first release where Blackwell (sm100) runs at all (its kernels are built from 2.25; makefiles/common.mk)
BLACKWELL_MINOR = 25
#: PAT (all_gather/reduce_scatter with one GPU per node, ncclPatEnable) exists from 2.23
PAT_MINOR = 23
# GPU-to-NIC path types in NCCL's order (src/graph/topo.h PATH_*: PIX < PXB < PXN < PHB < SYS); LL128 across
# nodes needs the inter-node path <= PXB, or <= PXN on sm90+ (every modelled version)
NIC_PATHS = ("pix", "pxb", "pxn", "phb", "sys")


# NVLS runs all_gather and reduce_scatter from 2.19 (2.18's tuning.cc: Ring only for them)
NVLS_ALLGATHER_MINOR = 19


# Tree Simple's latency constants per release (baseLat[Tree][Simple], hwLat[NVLINK/PCI/NET][Tree][Simple], us):
# 2.18 0 + (4, 6, 14); 2.19 to 2.22 0 + 28 on every link (Tree Simple all but off below tens of MiB); from 2.23
# 8.4 + (4, 4, 14), this module's table. Only NCCL's estimate (the choice) uses another release's figures.
TREE_SIMPLE_LATENCY_US = (
    (23, (8.4, MappingProxyType({"nvlink": 4.0, "pcie": 4.0, "net": 14.0}))),
    (19, (0.0, MappingProxyType({"nvlink": 28.0, "pcie": 28.0, "net": 28.0}))),
    (18, (0.0, MappingProxyType({"nvlink": 4.0, "pcie": 6.0, "net": 14.0}))),
)
#: from 2.23 every algorithm's network latency with one GPU per node is Tree's (``interLat = ppn == 1 ? ...``)
PPN1_TREE_NET_LATENCY_MINOR = 23


def estimate_latency_delta_s(
    *, algorithm: str, kind_value: str, protocol: str, minor: int, nnodes: int, ppn: int, intra: str, nranks: int
) -> float:
    """What NCCL ``2.minor``'s latency estimate adds to this module's (2.30's) for a collective, in seconds:
    Tree Simple's constants (``TREE_SIMPLE_LATENCY_US``), and before 2.23 a one-GPU-per-node ring's network
    steps at Ring's NET latency instead of Tree's. The choice uses it; the simulated time does not.

    >>> round(estimate_latency_delta_s(algorithm="tree", kind_value="all_reduce", protocol="Simple", minor=21,
    ...     nnodes=2, ppn=8, intra="nvlink", nranks=16) * 1e6, 6)  # 0 + 2 (7 x 28 + 1 x 28) - (8.4 + 2 (7 x 4 + 14))
    355.6
    """
    delta_us = 0.0
    if algorithm == "tree" and protocol == "Simple":
        base, hw = next(c for first, c in TREE_SIMPLE_LATENCY_US if minor >= first)
        now_base, now_hw = TREE_SIMPLE_LATENCY_US[0][1]

        def latency(b: float, h: Mapping[str, float]) -> float:
            return b + 2 * ((ppn - 1) * h[intra] + log2i(nnodes) * h["net"])

        delta_us = latency(base, hw) - latency(now_base, now_hw)
    elif algorithm == "ring" and ppn == 1 and nnodes > 1 and minor < PPN1_TREE_NET_LATENCY_MINOR:
        _, ninter = ring_steps(kind_value, nranks, nnodes)
        delta_us = ninter * (HW_LATENCY_US["net"]["ring"][protocol] - HW_LATENCY_US["net"]["tree"][protocol])
    return delta_us * 1e-6


def algorithm_missing(algorithm: str, kind_value: str, minor: int) -> str | None:
    """Why NCCL ``2.minor`` has no ``algorithm`` for ``kind_value`` ("all_gather", ...), None when it has one:
    PAT from 2.23 (ncclPatEnable), NVLS for all_gather/reduce_scatter from 2.19 (ncclTopoTuneModel's list of
    the algorithms each function may use)."""
    if algorithm == "pat" and minor < PAT_MINOR:
        return f"NCCL 2.{minor} has no PAT (from 2.{PAT_MINOR})"
    if algorithm == "nvls" and kind_value in ("all_gather", "reduce_scatter") and minor < NVLS_ALLGATHER_MINOR:
        return f"NCCL 2.{minor} runs {kind_value} with Ring only (NVLS from 2.{NVLS_ALLGATHER_MINOR})"
    return None


def nccl_minor(version: object, *, field: str = "nccl_version") -> int:
    """The minor number of an NCCL version "2.MINOR" or "2.MINOR.PATCH" (a leading "v", a trailing "-1" package
    revision or "+cuda12.8" is ignored), checked against ``NCCL_VERSIONS``.

    >>> nccl_minor("2.26.2+cuda12.8"), nccl_minor("2.30"), nccl_minor("v2.26.2-1")
    (26, 30, 26)
    """
    text = str(version).strip() if isinstance(version, str) else None
    head = text.removeprefix("v").split("+")[0].split("-")[0] if text else ""  # NCCL's tags: v2.26.2-1
    parts = head.split(".")
    if len(parts) in (2, 3) and parts[0] == "2" and all(p.isdigit() for p in parts[1:]):
        minor = int(parts[1])
        if f"2.{minor}" in NCCL_VERSIONS:
            return minor
    raise ValueError(
        f"{field}: {version!r} is not a modelled NCCL version; expected 2.MINOR or 2.MINOR.PATCH with MINOR "
        f"from {NCCL_VERSIONS[0][2:]} to {NCCL_VERSIONS[-1][2:]} (e.g. {DEFAULT_NCCL_VERSION})"
    )


def ll128_disabled(*, minor: int, sm_version: int, intra: str, nnodes: int, nic_path: str) -> str | None:
    """Why NCCL ``2.minor`` keeps LL128 off by default here (None: it is on), as ncclTopoTuneModel decides it
    (src/graph/tuning.cc, the "pEnable == 2 && p == NCCL_PROTO_LL128" block, 2.18.3 to 2.30.7):

    * the intra-node path must be NVLink (``typeIntra <= PATH_NVB``): off on PCIe-only servers;
    * across servers the GPU-to-NIC path must be <= PXB, or <= PXN on sm90+ (``typeInter``; one server: PIX);
    * the compute capability: 70, 80, 90 up to 2.24; also 100 and 120 from 2.25; any >= 70 from 2.27.

    Not modelled: mixed GPU generations (``minCompCap == maxCompCap``), the CUDA 11.8 sm90 two-rank ring
    exception, NCCL_LL128_C2C (Grace C2C links), and 2.18.1's ``typeIntra <= PATH_NVL``.

    >>> ll128_disabled(minor=24, sm_version=100, intra="nvlink", nnodes=1, nic_path="pix")
    'NCCL 2.24 enables LL128 on sm70, sm80 and sm90 only (this GPU: sm100)'
    """
    if intra != "nvlink":
        return "NCCL enables LL128 only over NVLink (this server's GPUs talk over PCIe)"
    if nnodes > 1:
        limit = "pxn" if sm_version >= 90 else "pxb"
        if NIC_PATHS.index(nic_path) > NIC_PATHS.index(limit):
            return (
                f"NCCL enables LL128 across servers only when the GPU-NIC path is {limit.upper()} or closer "
                f"(here {nic_path.upper()})"
            )
    if minor >= LL128_ANY_SM_MINOR:
        return None if sm_version >= 70 else f"NCCL enables LL128 from sm70 (this GPU: sm{sm_version})"
    allowed = next(sms for first, sms in LL128_SM_VERSIONS if minor >= first)
    if sm_version not in allowed:
        listed = ", ".join(f"sm{s}" for s in allowed[:-1]) + f" and sm{allowed[-1]}"
        return f"NCCL 2.{minor} enables LL128 on {listed} only (this GPU: sm{sm_version})"
    return None


def protocols_enabled(
    *, intra: str, minor: int | None = None, sm_version: int = 0, nnodes: int = 1, nic_path: str = "pix"
) -> tuple[str, ...]:
    """The protocols NCCL ``2.minor`` (None: ``DEFAULT_NCCL_VERSION``) enables by default: LL and Simple
    always, LL128 where ``ll128_disabled`` finds nothing against it."""
    minor = nccl_minor(DEFAULT_NCCL_VERSION) if minor is None else minor
    off = ll128_disabled(minor=minor, sm_version=sm_version, intra=intra, nnodes=nnodes, nic_path=nic_path)
    return PROTOCOLS if off is None else ("LL", "Simple")
