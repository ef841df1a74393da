"""``fabricsim validate``: predictions against the shipped (or your own) measured nccl-tests tables."""

from __future__ import annotations

from pathlib import Path

from simulator.config import NETWORK_MODEL_NAMES
from topologies.checks import output_dir, output_file, reject

from .common import nccl_version_option, positive_int, progress_display, protocol_name


def add_parser(sub) -> None:
    validate = sub.add_parser(
        "validate",
        help="compare predictions with the shipped measured nccl-tests tables "
        "(or your own): |t_pred/t_meas - 1| per table and regime",
        description="Replay measured nccl-tests tables and print the median and p90 of |t_pred / t_meas - 1| per "
        "table and size regime: latency (< 64 KiB), mid (64 KiB to 64 MiB), bandwidth (>= 64 MiB) and all sizes, "
        "then all tables pooled. --rows FILE also writes every compared row.",
    )
    validate.add_argument(
        "--series",
        default=None,
        metavar="SUBSTRING",
        help="only the shipped series whose name contains this (case-insensitive)",
    )
    validate.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="validate your own table instead (CSV, columns as the shipped ones: collective,nranks,"
        "nnodes,gpu,interconnect,size_bytes,time_us,algbw_GBps,busbw_GBps,source,notes), or the JSON NCCL's "
        "profiler plugin inspector writes (told apart by content; median time per collective, size and "
        "communicator shape; needs --system)",
    )
    validate.add_argument(
        "--system", default=None, help="with --data: the system preset (default: from the gpu column)"
    )
    validate.add_argument("--algo", default=None, help="with --data: the algorithm the measurement forced (NCCL_ALGO)")
    validate.add_argument("--proto", default=None, help="with --data: the protocol it forced (NCCL_PROTO)")
    validate.add_argument(
        "--channels", type=positive_int("channels"), default=None, help="with --data: the channel count it forced"
    )
    validate.add_argument(
        "-g",
        "--ngpus",
        type=positive_int("ngpus"),
        default=None,
        help="with --data: GPUs per nccl-tests process (-g); default 1",
    )
    validate.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, default="flow", help="network model")
    nccl_version_option(validate)
    validate.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    validate.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr (there is none when it is not a terminal)"
    )
    validate.add_argument(
        "--rows",
        default=None,
        metavar="FILE",
        help="also write every compared row (.csv, .json or .parquet): table, collective, gpu, system, nranks, "
        "nnodes, size_bytes, regime, measured and predicted time (us) and busbw (GB/s), the predicted algorithm, "
        "protocol and channels, and the signed error t_pred / t_meas - 1 (error, error_pct)",
    )
    validate.add_argument(
        "--cross",
        action="store_true",
        help="instead: fit again each constant that was fitted on the shipped tables, leaving one table out at a "
        "time (held-out errors, and the constants whose value moves between folds); about two minutes",
    )
    validate.add_argument(
        "--training",
        action="store_true",
        help="instead: the shipped training rows (Megatron SC21 Table 1 on A100, NVIDIA DGX Cloud recipes): "
        "per row measured and predicted step time, error and the exposed-communication share; rows on more than "
        "--max-gpus GPUs are skipped and listed",
    )
    validate.add_argument(
        "--max-gpus",
        type=int,
        default=None,
        metavar="N",
        help="with --training: skip rows on more than N GPUs (default 32, about half a minute; 0: every row but the "
        "slow ones, see --slow)",
    )
    validate.add_argument(
        "--every-layout",
        action="store_true",
        help="with --training: every DGX Cloud layout, not only the fewest-GPU one of each recipe and model",
    )
    validate.add_argument(
        "--slow",
        action="store_true",
        help="with --training: the Llama 3.1 405B rows too (minutes each; without it they are listed as skipped)",
    )
    validate.add_argument(
        "--plot",
        default=None,
        metavar="DIR",
        help="also write one PNG per series (predicted vs measured busbw against size) into DIR",
    )


ROW_FILE_SUFFIXES = (".csv", ".json", ".parquet")


def write_rows(reports, path: str) -> int:
    """Write every compared row of ``reports`` to ``path`` (its suffix, one of ``ROW_FILE_SUFFIXES``, gives the
    format); the number of rows written."""
    from simulator.validation.collectives import format_rows, rows_frame

    try:
        if path.endswith(".parquet"):
            frame = rows_frame(reports)
            frame.to_parquet(path, index=False)
            return len(frame)
        text = format_rows(reports, format="json" if path.endswith(".json") else "csv")
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    except OSError as exc:
        raise ValueError(f"rows: {path!r} cannot be written ({exc.strerror}); expected a writable file") from None
    return sum(len(r.comparisons) for r in reports)


def _collective_options(args) -> tuple[tuple[str, object], ...]:
    """The options that describe how a ``--data`` table was measured (system, NCCL's choice, -g, release)."""
    return (
        ("--system", args.system),
        ("--algo", args.algo),
        ("--proto", args.proto),
        ("--channels", args.channels),
        ("-g", args.ngpus),
        ("--nccl-version", args.nccl_version),
    )


def _cross(args) -> str:
    import json

    from simulator.validation.collectives import select_series
    from simulator.validation.cross import cross_validate, format_cross, held_out_pool

    given = [
        flag
        for flag, value in (
            ("--data", args.data),
            ("--rows", args.rows),
            ("--plot", args.plot),
            *_collective_options(args),
        )
        if value
    ]
    if given or args.net_model != "flow":
        flag = given[0] if given else "--net-model"
        raise ValueError(
            f"cross: {flag} is not allowed with --cross, which refits on the shipped tables with the flow model; "
            "expected --cross with --series and --format only"
        )
    if args.format == "csv":
        raise ValueError("format: 'csv' is not allowed with --cross; expected table or json")
    series = select_series(args.series)
    with progress_display("fabricsim validate --cross", quiet=bool(args.quiet)) as progress:
        reports = cross_validate(series=series, progress=progress)
    if args.format == "json":
        return json.dumps([r.as_dict() for r in reports], indent=1, allow_nan=False) + "\n"
    return format_cross(reports, held_out_pool(reports, series))


def _training(args) -> str:
    from simulator.validation.steps import DEFAULT_MAX_GPUS, format_training, training_check

    given = [
        flag
        for flag, value in (
            ("--series", args.series),
            ("--data", args.data),
            ("--rows", args.rows),
            ("--plot", args.plot),
            ("--cross", args.cross or None),
            ("--net-model", None if args.net_model == "flow" else args.net_model),
            *_collective_options(args),
        )
        if value is not None
    ]
    if given:
        raise ValueError(
            f"training: {given[0]} is not allowed with --training, which runs the shipped training rows with their "
            "own settings; expected --training with --max-gpus, --every-layout, --slow and --format only"
        )
    max_gpus = DEFAULT_MAX_GPUS if args.max_gpus is None else args.max_gpus
    if max_gpus < 0:
        raise reject("max_gpus", max_gpus, "an integer >= 1, or 0 for every row")
    with progress_display("fabricsim validate --training", quiet=bool(args.quiet)) as progress:
        check = training_check(
            max_gpus=max_gpus or None,
            every_layout=args.every_layout,
            slow=args.slow,
            progress=None if progress is None else (lambda r: progress(f"simulated {r.model} on {r.gpus} GPUs")),
        )
    return format_training(check, format=args.format)


def run(args) -> str:
    import dataclasses

    from simulator.collectives.tuner import CollectivePolicy
    from simulator.validation.collectives import (
        Series,
        data_series,
        format_report,
        recorded_choice,
        run_validation,
        select_series,
    )

    if args.training:
        return _training(args)
    for flag, value in (
        ("--max-gpus", args.max_gpus),
        ("--every-layout", args.every_layout or None),
        ("--slow", args.slow or None),
    ):
        if value is not None:
            raise ValueError(f"{flag.lstrip('-')}: {value!r} is not allowed without --training; expected --training")
    if args.cross:
        return _cross(args)

    # a --data table's measurement settings (the release also applies to the shipped tables)
    described = [flag for flag, value in _collective_options(args) if value is not None and flag != "--nccl-version"]
    if args.data is None and described:
        raise ValueError(
            f"{described[0]}: describes a --data table; the shipped series carry their own settings "
            "(expected --data FILE.csv with it)"
        )
    if args.plot is not None:
        output_dir("plot", args.plot)  # before any simulation: an existing file is no directory
    if args.rows is not None:  # before any simulation too
        if not args.rows.endswith(ROW_FILE_SUFFIXES):
            raise reject("rows", args.rows, f"a file name ending in {', '.join(ROW_FILE_SUFFIXES)}")
        output_file("rows", args.rows)
    series: tuple[Series, ...]
    if args.data is not None:
        if not args.data.strip():
            raise reject("data", args.data, "a CSV file (or a shipped table's name)")
        if args.series is not None:
            raise ValueError("--series: selects shipped series; expected either --series or --data, not both")
        series = (
            data_series(
                Path(args.data),
                system=args.system,
                algorithm=args.algo,
                protocol=protocol_name(args.proto),
                nchannels=args.channels,
                gpus_per_process=args.ngpus or 1,
            ),
        )
    else:
        series = select_series(args.series)
    if args.nccl_version is not None:  # every table replayed as that release chooses
        version = CollectivePolicy(nccl_version=args.nccl_version).nccl_version
        series = tuple(dataclasses.replace(s, nccl_version=version) for s in series)
    with progress_display("fabricsim validate", quiet=args.quiet) as progress:
        reports = run_validation(series, net_model=args.net_model, progress=progress)
    out = format_report(reports, format=args.format, net_model=args.net_model)
    choice = recorded_choice(reports)
    if choice is not None and args.format == "table":
        out += choice + "\n"
    if args.rows is not None:
        count = write_rows(reports, args.rows)
        if args.format == "table":
            out += f"# wrote {count} rows to {args.rows}\n"
    if args.plot is not None:
        from simulator.plotting import write_busbw_plots

        try:
            paths = write_busbw_plots([(r.series.name, r.comparisons) for r in reports], args.plot)
        except OSError as exc:
            raise ValueError(
                f"plot: {args.plot!r} cannot be written ({exc.strerror}); expected a writable directory"
            ) from None
        if args.format == "table":
            out += f"# wrote {len(paths)} plot(s) to {args.plot}: {', '.join(p.name for p in paths)}\n"
    return out
