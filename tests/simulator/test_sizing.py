"""simulator.studies.sizing and ``fabricsim topo --match-cost/--match-power``: a design family sized to what a
reference design costs or draws, checked on hand-derived bills of materials."""

from __future__ import annotations

import pytest

from simulator.cli import main
from simulator.studies.sizing import match, price_design
from topologies.presets import dragonfly_shape

# shipped figures (topologies/prices.toml)
SWITCH_USD, SWITCH_W = 36000, 747  # Quantum-2 QM9700
NIC_USD, NIC_W = 1599, 24.9  # ConnectX-7
END_USD, SWITCH_END_W, NIC_END_W = 640, 8.5, 9  # one 400G optical cable end

FOUR_DGX = {"system": "dgx-h100", "nodes": 4}


def _leaf_spine_usd(uplinks: int) -> int:
    """4 DGX H100 (32 NICs) on a rail-optimised leaf-spine: 8 leaves of 4 NICs with ``uplinks`` each, as many
    spines; 32 NIC cables and 8 x uplinks leaf-spine cables, two optical ends each."""
    switches = 8 + uplinks
    cables = 32 + 8 * uplinks
    return switches * SWITCH_USD + 32 * NIC_USD + 2 * cables * END_USD


def test_leaf_spine_at_the_cost_of_its_2_to_1_self():
    # a leaf of 4 NICs takes ceil(4 / R) uplinks: 2 at R = 2 (8 + 2 switches, 48 cables): 472,608 USD. The knob
    # runs over every split of 64 ports, R = d / (64 - d) from d = 32: the first R >= 2 is d = 43, R = 43/21
    # (d = 42 gives 42/22 < 2: 3 uplinks, 518,848 USD, over the budget)
    reference = FOUR_DGX | {"oversubscription": 2.0}
    assert price_design(reference)[2].capex_usd == _leaf_spine_usd(2) == 472_608
    sizing = match(reference, "leaf-spine")
    assert sizing.settings["oversubscription"] == 43 / 21
    assert sizing.value == sizing.target == _leaf_spine_usd(2)
    assert dict(sizing.tried)[(42 / 22,)] == _leaf_spine_usd(3) > sizing.target


def test_leaf_spine_at_the_power_of_its_2_to_1_self():
    # the same 10 switches, 32 NICs, 32 NIC ends and 32 + 32 switch ends: 9,098.8 W
    watts = 10 * SWITCH_W + 32 * NIC_W + 32 * NIC_END_W + 64 * SWITCH_END_W
    sizing = match(FOUR_DGX | {"oversubscription": 2.0}, "leaf-spine", by="power")
    assert sizing.target == pytest.approx(watts)
    assert sizing.settings["oversubscription"] == 43 / 21
    assert sizing.price.capex_usd == _leaf_spine_usd(2)


def test_a_budget_of_the_non_blocking_design_buys_it():
    # the 1:1 leaf-spine (4 uplinks per leaf, 565,088 USD) is the family's most capable design; sized to its own
    # cost, the search ends at R = 1
    sizing = match(FOUR_DGX, "leaf-spine")
    assert sizing.settings["oversubscription"] == 1.0
    assert sizing.value == _leaf_spine_usd(4) == 565_088


def test_dragonfly_at_the_cost_of_a_fat_tree_by_hand():
    # 128 DGX H100 (1,024 NICs) on the rail-optimised fat-tree: 32 edges and 32 aggregations of 64 ports, 1,024
    # NIC and 1,024 edge-aggregation cables: 64 x 36,000 + 1,024 x 1,599 + 2 x 2,048 x 640 = 6,562,816 USD.
    # Dragonflies of balanced shape (a = 2p): p = 8 holds 16 servers per group (8 groups of 16 routers, 128
    # routers: 4,608,000 USD of switches alone with the NICs and NIC cables over budget); p = 16 holds 64 per
    # group, g = 2 groups of 32 routers, with a (a - 1)/2 = 496 local cables per group and a h global ports per
    # group all to the other group: 64 routers and 1,024 + 992 + 32 h cables. h = 1: 6,562,816 USD, the same
    # bill as the fat-tree; h = 2 adds 32 cables (40,960 USD) and is over budget.
    reference = {"system": "dgx-h100", "nodes": 128, "topology": "fat-tree"}
    fat_tree = 64 * SWITCH_USD + 1024 * NIC_USD + 2 * 2048 * END_USD
    sizing = match(reference, "dragonfly")
    assert sizing.target == fat_tree == 6_562_816
    assert tuple(sizing.settings[k] for k in ("dragonfly_p", "dragonfly_a", "dragonfly_h")) == (16, 32, 1)
    assert dragonfly_shape("dgx-h100", nodes=128, dragonfly_p=16) == (16, 32, 16, 2)
    assert sizing.value == 64 * SWITCH_USD + 1024 * NIC_USD + 2 * (1024 + 992 + 32) * END_USD == fat_tree
    assert dict(sizing.tried)[(16, 32, 2)] == fat_tree + 2 * 32 * END_USD


def test_a_dragonfly_line_whose_fewest_global_links_cannot_join_its_groups_is_still_searched():
    # 64 DGX H100 on the default dragonfly p=4 a=8 h=4: 16 groups, so a router needs a h >= g - 1 = 15 global
    # ports per group (h >= 2) to reach every other group; h = 1 cannot be built, yet the line is searched. The
    # reference's own wiring cables floor(8 x 4 / 15) = 2 links per pair of groups, as h = 5 does (floor(40 / 15)),
    # so the line's design at the reference's cost is h = 5 and the search finds one at least as capable.
    reference = {"system": "dgx-h100", "nodes": 64, "topology": "dragonfly"}
    assert dragonfly_shape("dgx-h100", nodes=64) == (4, 8, 4, 16)
    sizing = match(reference, "dragonfly")
    tried = dict(sizing.tried)
    assert tried[(4, 8, 5)] == sizing.target and (4, 8, 1) not in tried
    p, a, h = (sizing.settings[k] for k in ("dragonfly_p", "dragonfly_a", "dragonfly_h"))
    _, _, _, g = dragonfly_shape("dgx-h100", nodes=64, dragonfly_p=p, dragonfly_a=a, dragonfly_h=h)
    # global cables per terminal: the reference 2 x 15 / (8 x 4); the chosen its own
    assert (a * h // (g - 1)) * (g - 1) / (a * p) >= 2 * 15 / (8 * 4)
    assert sizing.value <= sizing.target


def test_a_reference_without_a_fabric_or_a_family_that_cannot_be_built_is_refused():
    with pytest.raises(ValueError, match=r"^match_cost: dgx-h100 has no fabric to size against \(cost 0\)"):
        match({"system": "dgx-h100", "nodes": 1}, "leaf-spine")
    # the family's own refusal, not an infinite price
    with pytest.raises(ValueError, match=r"^match_cost: no dragonfly design .* can be built: rail_optimised: False"):
        match({"system": "dgx-h100", "nodes": 16, "rail_optimised": False}, "dragonfly")


def test_a_reference_with_unpriced_parts_is_refused():
    with pytest.raises(ValueError) as info:
        match({"system": "dgx-a100", "nodes": 2}, "leaf-spine")
    message = str(info.value)
    assert message.startswith("match_cost: dgx-a100 x2 has parts without a price (switch quantum_hdr")
    assert "--prices FILE.toml" in message


def test_a_budget_below_the_family_is_refused():
    # rail-only 4 DGX: 8 rail leaves, no spine: 8 x 36,000 + 32 x 1,599 + 64 ends x 640 = 380,128 USD, below the
    # leaf-spine's least (R = 63: one uplink per leaf, 426,368 USD)
    with pytest.raises(ValueError, match=r"match_cost: no leaf-spine design .* least it can be built for is 426,368"):
        match(FOUR_DGX | {"topology": "rail-only"}, "leaf-spine")


def test_wrong_family_or_measure():
    with pytest.raises(ValueError, match="match.family: 'torus' is not allowed; expected one of 'fat-tree'"):
        match(FOUR_DGX, "torus")
    with pytest.raises(ValueError, match="match.by: 'area' is not allowed; expected one of 'cost', 'power'"):
        match(FOUR_DGX, "leaf-spine", by="area")


def test_topo_command_prints_capex_and_the_sized_design(capsys):
    assert main(["topo", "--nodes", "4", "--oversubscription", "2", "--match-cost", "leaf-spine"]) == 0
    out = capsys.readouterr().out
    assert "fabric capex and power: dgx-h100 x4" in out
    assert f"{_leaf_spine_usd(2):,}" in out
    assert "# leaf-spine at the cost of dgx-h100 x4 (472,608 USD): oversubscription = 2.04762" in out


def test_topo_command_refuses_an_unknown_family(capsys):
    assert main(["topo", "--match-power", "torus"]) == 2
    assert "--match-power" in capsys.readouterr().err
