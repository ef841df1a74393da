"""``fabricsim topo``: a fabric design's switches, ports, cables and optics per tier, its capex and power, and
another design family sized to the same cost or power (``--match-cost`` / ``--match-power``)."""

from __future__ import annotations

from simulator.studies.scenario import FABRIC_DEFAULTS, build_topology
from simulator.studies.sizing import FAMILIES
from topologies.checks import output_file

from .common import fabric_options, system_name


def add_parser(sub) -> None:
    topo = sub.add_parser(
        "topo", help="a fabric design's hardware (switches, ports, cables, optics per tier), capex and power"
    )
    fabric_options(topo, defaults=FABRIC_DEFAULTS)
    topo.add_argument(
        "--nic-cables",
        choices=("optical", "copper"),
        default="optical",
        help="NIC-to-leaf cables: optical (transceivers) or copper DAC; default optical",
    )
    topo.add_argument(
        "--prices",
        default=None,
        metavar="FILE.toml",
        help="prices and power replacing the shipped ones (topologies/prices.toml has the layout and sources)",
    )
    family = ", ".join(FAMILIES)
    match = topo.add_mutually_exclusive_group()
    match.add_argument(
        "--match-cost",
        choices=FAMILIES,
        default=None,
        metavar="FAMILY",
        help=f"also size a design of FAMILY ({family}) to this design's capex: its most capable design within it",
    )
    match.add_argument(
        "--match-power",
        choices=FAMILIES,
        default=None,
        metavar="FAMILY",
        help=f"also size a design of FAMILY ({family}) to this design's power",
    )
    topo.add_argument("--draw", default=None, metavar="FILE.png", help="also draw the switch graph into this file")


def run(args) -> str:
    from simulator.studies.sizing import match
    from topologies.cost import cost_summary
    from topologies.pricing import fabric_price, load_prices

    args.system = system_name(args.system)
    if args.draw is not None:
        output_file("draw", args.draw)
    prices = load_prices(args.prices)
    topology = build_topology(vars(args))
    cost = cost_summary(topology, nic_cables=args.nic_cables)
    out = f"{topology.name}: {topology.description}\n{topology.num_gpus} GPUs, {topology.num_servers} servers\n"
    out += cost.format() + "\n" + fabric_price(cost, prices).format() + "\n"
    family, by = (args.match_cost, "cost") if args.match_power is None else (args.match_power, "power")
    if family is not None:
        sizing = match(vars(args), family, by=by, prices=prices, nic_cables=args.nic_cables)
        out += f"\n{sizing.format()}\n{sizing.price.format()}\n"
    if args.draw is not None:
        from simulator.plotting import draw_fabric

        draw_fabric(topology, args.draw)
        out += f"# wrote {args.draw}\n"
    return out
