"""Tests for topologies.pricing: a fabric's parts priced and powered from the shipped book or a user's file."""

from __future__ import annotations

import doctest
import tomllib

import pytest

from topologies import pricing as pricing_module
from topologies.cost import cost_summary
from topologies.presets import build_system
from topologies.pricing import DEFAULT_PRICES, fabric_price, load_prices

# shipped figures the hand derivations below use (topologies/prices.toml)
QM9700_USD, QM9700_W = 36000, 747
CX7_USD, CX7_W = 1599, 24.9
END_USD, SWITCH_END_W, NIC_END_W = 640, 8.5, 9
DAC_W = 0.2


def test_module_doctests_pass():
    assert doctest.testmod(pricing_module).failed == 0


def test_every_shipped_figure_names_a_source_and_its_kind():
    with DEFAULT_PRICES.open("rb") as f:
        data = tomllib.load(f)
    kinds = ("vendor:", "reseller:", "analyst:", "estimate:")
    figures = 0
    for section, table in data.items():
        for key, fields in table.items():
            for name in fields:
                if name.endswith("_source"):
                    continue
                figures += 1
                source = fields[f"{name}_source"]
                assert source.startswith(kinds), (section, key, name, source)
    assert figures >= 20


def _four_dgx(**options):
    return cost_summary(build_system("dgx-h100", nodes=4), **options)


def test_leaf_spine_of_four_dgx_by_hand():
    # cost module docstring: 12 Quantum-2 switches, 32 ConnectX-7, 32 NIC cables + 32 leaf-spine cables, all
    # optical: 32 ends at a NIC, 32 + 64 = 96 at a switch port
    price = fabric_price(_four_dgx())
    lines = {line.part: (line.count, line.usd, line.watts) for line in price.lines}
    assert lines["switch quantum2_ndr"] == (12, 12 * QM9700_USD, 12 * QM9700_W)
    assert lines["NIC connectx7_ndr"] == (32, 32 * CX7_USD, pytest.approx(32 * CX7_W))
    assert lines["optic 400G at a NIC"] == (32, 32 * END_USD, 32 * NIC_END_W)
    assert lines["optic 400G at a switch port"] == (96, 96 * END_USD, 96 * SWITCH_END_W)
    assert price.capex_usd == 12 * QM9700_USD + 32 * CX7_USD + 128 * END_USD  # 565,088
    assert price.power_w == pytest.approx(12 * QM9700_W + 32 * CX7_W + 32 * NIC_END_W + 96 * SWITCH_END_W)
    assert price.capex_per_gpu_usd == price.capex_usd / 32
    assert (price.unpriced, price.unpowered) == ((), ())


def test_copper_nic_cables_are_a_part_of_their_own():
    # DACs to the NICs: 32 copper cables (power 0.1 W per end, no price in the book), optics only on the
    # 32 leaf-spine cables (64 switch ends)
    price = fabric_price(_four_dgx(nic_cables="copper"))
    lines = {line.part: line for line in price.lines}
    assert lines["copper cable 400G"].count == 32
    assert lines["copper cable 400G"].watts == pytest.approx(32 * DAC_W)
    assert lines["optic 400G at a switch port"].count == 64
    assert "optic 400G at a NIC" not in lines
    assert price.unpriced == ("copper cable 400G",)
    assert price.capex_usd == 12 * QM9700_USD + 32 * CX7_USD + 64 * END_USD
    text = price.format()
    assert "not priced (left out of the total; give them with --prices): copper cable 400G" in text


def test_a_part_the_book_lacks_is_named_never_free():
    # DGX A100 on HDR: Quantum QM8700, ConnectX-6 and 200G optics have no figures in the shipped book
    price = fabric_price(cost_summary(build_system("dgx-a100", nodes=2)))
    assert set(price.unpriced) == {part.part for part in price.lines}
    assert price.capex_usd == 0.0
    assert "switch quantum_hdr" in price.format()


def test_a_users_file_replaces_figures_one_by_one(tmp_path):
    path = tmp_path / "quote.toml"
    path.write_text(
        '[switch.quantum2_ndr]\nusd = 20000\n\n[optic.400]\nusd = 500\nusd_source = "vendor quote 2026-11"\n'
        "[copper.400]\nusd = 150\n"
    )
    book = load_prices(path)
    assert book.figure("switch", "quantum2_ndr", "usd") == (20000.0, "user: quote.toml")
    assert book.figure("switch", "quantum2_ndr", "watts")[0] == QM9700_W  # kept from the shipped book
    assert book.figure("optic", "400", "usd") == (500.0, "vendor quote 2026-11")
    price = fabric_price(_four_dgx(), book)
    assert price.capex_usd == 12 * 20000 + 32 * CX7_USD + 128 * 500
    assert "user: quote.toml" in price.sources()
    copper = fabric_price(_four_dgx(nic_cables="copper"), book)
    assert copper.unpriced == ()
    assert copper.capex_usd == 12 * 20000 + 32 * CX7_USD + 64 * 500 + 32 * 150


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[router.x]\nusd = 1\n", "prices.router: 'router' is not allowed; expected a section of switch, nic"),
        ("[switch.quantum2_ndr]\nusd = -5\n", "prices.switch.quantum2_ndr.usd: -5 is not allowed"),
        ("[switch.quantum2_ndr]\nusd = nan\n", "prices.switch.quantum2_ndr.usd: nan is not allowed"),
        ("[switch.quantum2_ndr]\ncost = 5\n", "prices.switch.quantum2_ndr.cost: 5 is not allowed; expected one of"),
        ("[optic.fast]\nusd = 5\n", "prices.optic.fast: 'fast' is not allowed; expected a port line rate in Gb/s"),
        (
            '[nic.connectx7_ndr]\nusd = 5\nusd_source = ""\n',
            "prices.nic.connectx7_ndr.usd_source: '' is not allowed; expected a non-empty",
        ),
        ("[switch.quantum2-ndr]\nusd = 5\n", "prices.switch.quantum2-ndr: 'quantum2-ndr' is not allowed; expected"),
        ("[optic.0400]\nusd = 5\n", "prices.optic.0400: '0400' is not allowed; expected a port line rate"),
        ('[switch.quantum2_ndr]\nusd = "5"\n', "prices.switch.quantum2_ndr.usd: '5' is not allowed"),
        ("[switch\n", "is not valid TOML"),
    ],
)
def test_a_wrong_price_file_is_one_clear_line(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_prices(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_price_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="prices: .*no such file"):
        load_prices(tmp_path / "absent.toml")
