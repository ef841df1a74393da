"""LL128, PAT and NVLS enablement per NCCL release (nccl_model.ll128_disabled, algorithm_missing), through the
tuner and `--nccl-version`; the rules are those of src/graph/tuning.cc, ncclTopoTuneModel, of each tag."""

from __future__ import annotations

import pytest

from simulator.cli import main
from simulator.collectives import nccl_model, p2p
from simulator.collectives.tuner import CollectivePolicy, candidates, choose
from tests.simulator.test_collectives import context
from workloads.collectives import Collective, CollectiveKind


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("minor", "sm", "enabled"),
    [
        (24, 80, True),  # 2.18-2.24: sm70, sm80, sm90 only
        (24, 90, True),
        (24, 86, False),  # sm86 (A10, RTX 3090) is not in the list
        (24, 100, False),  # Blackwell not yet
        (25, 100, True),  # 2.25 adds sm100 and sm120
        (26, 89, False),  # Ada still off
        (27, 89, True),  # 2.27: any sm >= 70
        (30, 86, True),
        (30, 60, False),
    ],
)
def test_ll128_by_compute_capability_and_release(minor, sm, enabled):
    off = nccl_model.ll128_disabled(minor=minor, sm_version=sm, intra="nvlink", nnodes=1, nic_path="pix")
    assert (off is None) == enabled, off


def test_ll128_needs_nvlink_and_a_close_nic():
    kwargs = dict(minor=30, nnodes=2)
    assert "PCIe" in nccl_model.ll128_disabled(sm_version=90, intra="pcie", nic_path="pix", **kwargs)
    # across servers: <= PXB, or <= PXN from sm90; through the CPU (PHB) never
    assert nccl_model.ll128_disabled(sm_version=80, intra="nvlink", nic_path="pxb", **kwargs) is None
    assert "PXB" in nccl_model.ll128_disabled(sm_version=80, intra="nvlink", nic_path="pxn", **kwargs)
    assert nccl_model.ll128_disabled(sm_version=90, intra="nvlink", nic_path="pxn", **kwargs) is None
    assert "PHB" in nccl_model.ll128_disabled(sm_version=90, intra="nvlink", nic_path="phb", **kwargs)
    # one server: NCCL's inter-node path type stays PIX, whatever the NICs
    assert nccl_model.ll128_disabled(minor=30, nnodes=1, sm_version=80, intra="nvlink", nic_path="phb") is None


def test_versions_are_checked_at_the_edge():
    assert CollectivePolicy(nccl_version="2.26.2+cuda12.8").nccl_version == "2.26"
    assert CollectivePolicy().nccl_version == nccl_model.DEFAULT_NCCL_VERSION
    for bad in ("2.17", "3.1", "2", "two", 2.26, None):
        with pytest.raises(ValueError, match="nccl_version: .* not a modelled NCCL version"):
            CollectivePolicy(nccl_version=bad)


def test_presets_layout_gives_compute_capability_and_nic_path():
    # DGX H100 / A100 / HGX B200: each GPU shares a PCIe switch with its NIC (PIX), so LL128 crosses servers
    for system, sm in (("dgx-a100", 80), ("dgx-h100", 90), ("hgx-b200", 100)):
        ctx = context(system=system, nodes=2)
        layout = ctx.layout(tuple(range(16)))
        assert (layout.sm_version, layout.nic_path) == (sm, "pix")


def test_pat_and_nvls_all_gather_exist_from_their_release():
    # one GPU on each of 2 servers: PAT is NCCL's candidate for all_gather from 2.23
    ctx = context(system="dgx-h100", nodes=2, gpus_per_node=1)
    gather = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=1 << 20, group=(0, 1))
    pat = {c.algorithm: c for c in candidates(gather, ctx, CollectivePolicy(nccl_version="2.22"))}["pat"]
    assert pat.skipped == "NCCL 2.22 has no PAT (from 2.23)" and pat.skipped_by == "--nccl-version"
    assert {c.algorithm: c for c in candidates(gather, ctx)}["pat"].skipped is None
    with pytest.raises(ValueError, match="algorithm pat: NCCL 2.22 has no PAT"):
        choose(gather, ctx, CollectivePolicy(algorithm="pat", nccl_version="2.22"))
    # NVLS all_gather on one H100 server from 2.19; 2.18 runs it with Ring only
    one = context(system="dgx-h100")
    gather8 = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=1 << 30, group=tuple(range(8)))
    nvls = {c.algorithm: c for c in candidates(gather8, one, CollectivePolicy(nccl_version="2.18"))}["nvls"]
    assert "Ring only" in nvls.skipped


def test_blackwell_ll128_by_release_and_before_blackwell_an_error():
    ctx = context(system="hgx-b200")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(8)))
    protocols = {c.protocol for c in candidates(coll, ctx, CollectivePolicy(nccl_version="2.25")) if not c.skipped}
    assert "LL128" in protocols
    with pytest.raises(ValueError, match="nccl_version: '2.24' cannot run Blackwell"):
        choose(coll, ctx, CollectivePolicy(nccl_version="2.24"))


def test_default_is_the_previous_rule_on_every_preset():
    # before the knob LL128 was on exactly over NVLink: every preset (sm80, sm90, sm100 with PIX NICs; sm89 on
    # PCIe) gets the same from the default release, so no result moves
    for system, nodes in (("dgx-a100", 2), ("dgx-h100", 2), ("hgx-h200", 1), ("hgx-b200", 2), ("pcie-rtx4090", 1)):
        layout = context(system=system, nodes=nodes).layout(tuple(range(8 * nodes)))
        enabled = nccl_model.protocols_enabled(
            intra=layout.intra, sm_version=layout.sm_version, nnodes=layout.nnodes, nic_path=layout.nic_path
        )
        assert ("LL128" in enabled) == (layout.intra == "nvlink"), system


def test_nccl_version_on_the_command_line(capsys):
    code, out, err = run(
        capsys, "bench", "all_reduce", "--system", "hgx-b200", "-b", "1M", "-e", "1M", "--nccl-version", "2.24"
    )
    assert code == 2 and "nccl_version: '2.24' cannot run Blackwell" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "bench", "all_reduce", "-b", "1M", "-e", "1M", "--nccl-version", "1.0")
    assert code == 2 and "not a modelled NCCL version" in err
    # 1 GPU on each of 2 servers, 1 MiB all_gather: PAT where the release has it, Ring before
    argv = ["bench", "all_gather", "--nodes", "2", "--gpus-per-node", "1", "-b", "1M", "-e", "1M"]
    code, out, _ = run(capsys, *argv, "--nccl-version", "2.22")
    assert code == 0 and "NCCL 2.22's enablement" in out and " pat " not in out and " ring " in out
    code, out, _ = run(capsys, *argv)
    assert code == 0 and " pat " in out


def test_the_release_latency_moves_the_estimate_only():
    ctx = context(system="dgx-h100", nodes=2)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(16)))

    def tree_simple(version):
        found = candidates(coll, ctx, CollectivePolicy(nccl_version=version))
        return next(c for c in found if c.algorithm == "tree" and c.protocol == "Simple")

    # 2.21: 0 + 2 (7 x 28 + log2i(2) x 28) = 448 us; 2.30: 8.4 + 2 (7 x 4.0 + 1 x 14) = 92.4 us
    assert tree_simple("2.21").latency_s - tree_simple("2.30").latency_s == pytest.approx(355.6e-6, rel=1e-12)
    # 2.18: 0 + 2 (7 x 4 + 14) = 84 us, 8.4 us less than 2.30
    assert tree_simple("2.18").latency_s - tree_simple("2.30").latency_s == pytest.approx(-8.4e-6, rel=1e-9)
    # the default release's estimate is the tree's own: 8.4 + 2 (7 x 4.0 + 1 x 14) = 92.4 us
    assert tree_simple(nccl_model.DEFAULT_NCCL_VERSION).latency_s == pytest.approx(92.4e-6, rel=1e-12)


def test_one_gpu_per_node_ring_network_latency_before_2_23():
    def delta(minor):
        return nccl_model.estimate_latency_delta_s(
            algorithm="ring",
            kind_value="all_reduce",
            protocol="LL",
            minor=minor,
            nnodes=4,
            ppn=1,
            intra="nvlink",
            nranks=4,
        )

    # ring all_reduce on 4 servers x 1 GPU: 2 (4 - 1) = 6 network steps; LL NET latency Ring 2.7 vs Tree 5.0 us
    assert delta(22) == pytest.approx(6 * (2.7 - 5.0) * 1e-6, rel=1e-12)
    assert delta(23) == 0.0


def test_p2p_ll_threshold_by_release():
    # enqueue.cc addP2pToPlan, NCCL_P2P_LL_THRESHOLD 16 KiB. One HGX B200, 8 ranks, 32 p2p channels: 32 a peer
    # (p2pnChannelsPerPeer), a send starting on 32 / 8 = 4 (nChannelsMin) or fewer, one per 64 KiB (512 KiB / 8)
    one = context(system="hgx-b200").layout(tuple(range(8)))
    ll = [p2p.uses_ll(n << 10, one, 8, 32, minor) for minor in (21, 28, 30) for n in (16, 32, 512, 1024)]
    # 2.21: a channel's part <= 16 KiB; 32 KiB is one 32 KiB part: Simple
    # 2.22-2.28: <= 32 x 16 KiB = 512 KiB
    # 2.29+: <= the send's channels x 16 KiB: 32 KiB runs on 1 channel, 512 KiB on 4: Simple
    assert ll == [True, False, False, False, True, True, True, False, True, False, False, False]
    # two servers, 16 ranks: 2 channels a network peer, so up to 32 KiB on 2.22-2.28
    two = context(system="hgx-b200", nodes=2).layout(tuple(range(16)))
    assert [p2p.uses_ll(n << 10, two, 16, 16, 28) for n in (32, 64)] == [True, False]


def test_p2p_protocol_follows_the_release(capsys):
    # sendrecv of 256 KiB on one HGX B200: LL in 2.28 (the measured table's switch is between 512 KiB and 1 MiB),
    # Simple in 2.30
    ctx = context(system="hgx-b200")
    coll = Collective(kind=CollectiveKind.SENDRECV, nbytes=256 << 10, group=tuple(range(8)))
    assert choose(coll, ctx, CollectivePolicy(nccl_version="2.28")).protocol == "LL"
    assert choose(coll, ctx, CollectivePolicy(nccl_version="2.30")).protocol == "Simple"
