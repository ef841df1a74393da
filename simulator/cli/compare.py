"""``fabricsim compare``: fabric designs side by side on the same workloads, with why they tie or differ."""

from __future__ import annotations

from topologies.checks import output_file

from .sweep import run_options, sweep_options, write_table


def add_parser(sub) -> None:
    compare = sub.add_parser(
        "compare", help="fabric designs side by side on the same workloads (a sweep), with why they tie or differ"
    )
    compare.add_argument(
        "designs",
        nargs="?",
        default=None,
        metavar="DESIGNS.toml",
        help="shared fields, [designs.NAME] fabric tables, [workloads.NAME] step or bench tables, baseline; "
        "default the shipped 4,096-H100 comparison (simulator/studies/designs/h100-4096.toml)",
    )
    compare.add_argument("--report", default=None, metavar="FILE.png", help="also draw the designs side by side")
    run_options(compare)


def run(args) -> str:
    from simulator.studies.compare import compare

    options = sweep_options(args)
    if args.report is not None:
        if not args.report.endswith(".png"):
            raise ValueError(f"report: {args.report!r} is not allowed; expected a file name ending in .png")
        output_file("report", args.report)
    comparison = compare(args.designs, **options)
    text = comparison.format()
    for path in args.out:
        write_table(comparison.table, path)
        text += f"# wrote {path}\n"
    if args.report is not None:
        from simulator.plotting import comparison_figure

        comparison_figure(comparison).savefig(args.report, dpi=100)
        text += f"# wrote {args.report}\n"
    return text
