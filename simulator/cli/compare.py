"""``fabricsim compare``: fabric designs side by side on the same workloads, with why they tie or differ."""

from __future__ import annotations

from topologies.checks import output_file

from .common import positive_int


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
    compare.add_argument(
        "--out", action="append", default=[], metavar="FILE", help="also write every row (.csv or .parquet)"
    )
    compare.add_argument("--report", default=None, metavar="FILE.png", help="also draw the designs side by side")
    compare.add_argument("--scheduler", default=None, metavar="ADDRESS", help="a Dask scheduler (tcp://host:8786)")
    compare.add_argument(
        "--workers", type=positive_int("workers"), default=None, help="local worker processes; default every core"
    )
    compare.add_argument("--cache", default=None, metavar="DIR", help="result cache (as fabricsim sweep's)")
    compare.add_argument("--no-cache", action="store_true", help="neither read nor write cached results")
    compare.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def run(args) -> str:
    import sys

    from simulator.studies.compare import compare

    from .sweep import write_table

    for path in args.out:
        write_table(None, path, check_only=True)
    if args.report is not None:
        if not args.report.endswith(".png"):
            raise ValueError(f"report: {args.report!r} is not allowed; expected a file name ending in .png")
        output_file("report", args.report)
    if args.no_cache and args.cache is not None:
        raise ValueError(f"cache: {args.cache!r} is not allowed with --no-cache; expected one of the two")
    if args.scheduler is not None and args.workers is not None:
        raise ValueError("workers: not allowed with --scheduler (the cluster has its own); expected one of the two")
    comparison = compare(
        args.designs,
        scheduler=args.scheduler,
        workers=args.workers,
        cache_dir=args.cache,
        cache=not args.no_cache,
        progress=not args.quiet and sys.stderr.isatty(),
    )
    text = comparison.format()
    for path in args.out:
        write_table(comparison.table, path)
        text += f"# wrote {path}\n"
    if args.report is not None:
        from simulator.plotting import comparison_figure

        comparison_figure(comparison).savefig(args.report, dpi=100)
        text += f"# wrote {args.report}\n"
    return text
