"""``fabricsim goodput``: what each fabric design keeps of a training run under published failure rates."""

from __future__ import annotations

import json
import math

from topologies.checks import output_file

from .common import progress_display


def add_parser(sub) -> None:
    goodput = sub.add_parser(
        "goodput",
        help="effective training time and time to train per fabric design under failure rates (Llama 3's by default)",
    )
    goodput.add_argument(
        "designs",
        nargs="?",
        default=None,
        metavar="GOODPUT.toml",
        help="shared fields, [designs.NAME] fabric tables (nic_failover), [workload], tokens, [checkpoint], "
        "[recovery], [failures.NAME], [reference], [monte_carlo]; default the shipped 16,384-H100 study "
        "(simulator/studies/designs/goodput-16k.toml)",
    )
    goodput.add_argument("--format", choices=("table", "json", "csv"), default="table")
    goodput.add_argument(
        "--out", default=None, metavar="FILE.csv", help="also write the lost time by design and cause as CSV"
    )
    goodput.add_argument("--quiet", action="store_true", help="no stage display on a terminal")


def run(args) -> str:
    from simulator.studies.goodput import goodput

    if args.out is not None:
        if not args.out.endswith(".csv"):
            raise ValueError(f"out: {args.out!r} is not allowed; expected a file name ending in .csv")
        output_file("out", args.out)
    with progress_display("fabricsim goodput", quiet=bool(args.quiet)) as progress:
        result = goodput(args.designs, progress=progress)
    if args.format == "json":  # an infinite interval or time between failures (none drawn) is null
        text = json.dumps(_finite(result.as_dict()), indent=1) + "\n"
    elif args.format == "csv":
        text = result.frame("summary").to_csv(index=False)
    else:
        text = result.format()
    if args.out is not None:
        result.frame("causes").to_csv(args.out, index=False)
        if args.format == "table":
            text += f"# wrote {args.out}\n"
    return text


def _finite(value):
    """``value`` with every infinite or NaN float as None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
