"""``fabricsim topo``: a fabric design's switches, ports, cables and optics per tier."""

from __future__ import annotations

from simulator.studies.scenario import FABRIC_DEFAULTS, build_topology
from topologies.checks import output_file

from .common import fabric_options, system_name


def add_parser(sub) -> None:
    topo = sub.add_parser("topo", help="a fabric design's summary and cost (switches, ports, cables, optics per tier)")
    fabric_options(topo, defaults=FABRIC_DEFAULTS)
    topo.add_argument(
        "--nic-cables",
        choices=("optical", "copper"),
        default="optical",
        help="NIC-to-leaf cables: optical (transceivers) or copper DAC; default optical",
    )
    topo.add_argument("--draw", default=None, metavar="FILE.png", help="also draw the switch graph into this file")


def run(args) -> str:
    from topologies.cost import cost_summary

    args.system = system_name(args.system)
    if args.draw is not None:
        output_file("draw", args.draw)
    topology = build_topology(vars(args))
    out = f"{topology.name}: {topology.description}\n{topology.num_gpus} GPUs, {topology.num_servers} servers\n"
    out += cost_summary(topology, nic_cables=args.nic_cables).format().rstrip("\n") + "\n"
    if args.draw is not None:
        from simulator.plotting import draw_fabric

        draw_fabric(topology, args.draw)
        out += f"# wrote {args.draw}\n"
    return out
