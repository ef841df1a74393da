"""``fabricsim sweep``: every scenario of a grid (training steps or collectives) on a Dask cluster, as one table."""

from __future__ import annotations

from topologies.checks import output_file

from .common import positive_int

SWEEP_FORMATS = ("table", "csv", "json")
# the results the printed table shows per kind (every column goes to --out)
HEADLINE = {
    "step": ("step_time_s", "exposed_comm_s", "tokens_per_s", "mfu", "approximate"),
    "bench": ("time_s", "busbw_GBps", "algorithm", "protocol"),
}


def add_parser(sub) -> None:
    sweep = sub.add_parser(
        "sweep", help="simulate every scenario of a grid (TOML) on a Dask cluster; one row per scenario"
    )
    sweep.add_argument(
        "grid",
        metavar="GRID.toml",
        help="shared fields at the top level, [grid] lists to cross, optional [[scenarios]] "
        "(kind = 'step' or 'bench'; see simulator/studies/sweep.py)",
    )
    run_options(sweep)
    sweep.add_argument("--format", choices=SWEEP_FORMATS, default="table", help="what to print; default table")


def run_options(parser) -> None:
    """The options of a command that runs a sweep (sweep, compare): where to write its rows, the cluster, the
    cache, the progress bar."""
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="FILE",
        help="also write every row to FILE (.csv or .parquet); may be repeated",
    )
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS", help="a Dask scheduler (tcp://host:8786)")
    parser.add_argument(
        "--workers", type=positive_int("workers"), default=None, help="local worker processes; default every core"
    )
    parser.add_argument(
        "--cache", default=None, metavar="DIR", help="result cache; default $XDG_CACHE_HOME/fabricsim/sweep (~/.cache)"
    )
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write cached results")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def sweep_options(args) -> dict:
    """``studies.sweep.sweep``'s keyword arguments from :func:`run_options`'s, checked (with the --out names)
    before any work."""
    import sys

    for path in args.out:
        write_table(None, path, check_only=True)
    if args.no_cache and args.cache is not None:
        raise ValueError(f"cache: {args.cache!r} is not allowed with --no-cache; expected one of the two")
    if args.scheduler is not None and args.workers is not None:
        raise ValueError("workers: not allowed with --scheduler (the cluster has its own); expected one of the two")
    return {
        "scheduler": args.scheduler,
        "workers": args.workers,
        "cache_dir": args.cache,
        "cache": not args.no_cache,
        "progress": not args.quiet and sys.stderr.isatty(),
    }


def write_table(frame, path: str, *, check_only: bool = False) -> None:
    """Write ``frame`` to ``path`` (.csv or .parquet; ``check_only``: only check the name, before any work)."""
    if not path.endswith((".csv", ".parquet")):
        raise ValueError(f"out: {path!r} is not allowed; expected a file name ending in .csv or .parquet")
    output_file("out", path)
    if check_only:
        return
    try:
        if path.endswith(".csv"):
            frame.to_csv(path, index=False)
        else:  # a column of mixed types (a size as 1024 and as "1K") as text: Parquet takes one type
            mixed = [c for c in frame if frame[c].dtype == object and frame[c].map(type).nunique() > 1]
            frame.astype(dict.fromkeys(mixed, str)).to_parquet(path, index=False)
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"out: {path!r} cannot be written ({exc})") from None


def run(args) -> str:
    import json

    import pandas as pd

    from simulator.studies.sweep import expand, load_grid, sweep

    options = sweep_options(args)
    scenarios = expand(load_grid(args.grid))
    frame = sweep(scenarios, **options)
    for path in args.out:
        write_table(frame, path)
    if args.format == "csv":
        return frame.to_csv(index=False)
    if args.format == "json":  # every float to the last digit (repr), a missing value as null
        records = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
        return json.dumps(records, indent=1, default=str) + "\n"
    fields = list(dict.fromkeys(k for s in scenarios for k in s))
    varying = [c for c in fields if c != "kind" and len({str(s.get(c)) for s in scenarios}) > 1]
    kind = frame["kind"].fillna("step") if "kind" in frame else pd.Series(["step"] * len(frame))
    kinds = [k for k in HEADLINE if (kind == k).any()]
    shown = ["name"] if "name" in frame else []
    shown += [c for c in varying if c in frame and c not in shown]
    shown += [c for k in kinds for c in HEADLINE[k] if c in frame]
    errors = int((frame["status"] == "error").sum())
    table = frame[shown + (["error"] if errors else [])].to_string(index=False)
    cached = int(frame["cached"].sum())
    tail = f"# {len(frame)} scenarios, {cached} read from the cache, {errors} failed"
    tail += "".join(f"; wrote {path}" for path in args.out)
    return f"# fabricsim sweep {args.grid}\n{table}\n{tail}\n"
