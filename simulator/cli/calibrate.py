"""``fabricsim calibrate``: fit a preset's link bandwidth scale and launch overhead to an nccl-tests log."""

from __future__ import annotations

import sys
from pathlib import Path

from simulator.config import NETWORK_MODEL_NAMES
from topologies.checks import output_file

from .common import nccl_version_option, positive_int, progress_display, protocol_name


def add_parser(sub) -> None:
    calibrate = sub.add_parser(
        "calibrate", help="fit a preset's link bandwidth scale and per-collective overhead to your nccl-tests output"
    )
    calibrate.add_argument(
        "log",
        help="saved stdout of one nccl-tests run (e.g. all_reduce_perf -b 8 -e 8G -f 2), or the JSON NCCL's "
        "profiler plugin inspector writes (told apart by content; median time per size); - reads standard input",
    )
    calibrate.add_argument(
        "--system", default=None, help="system preset measured (default: from the log's device names)"
    )
    calibrate.add_argument(
        "--nodes", type=positive_int("nodes"), default=None, help="servers (default: the log's distinct hosts, else 1)"
    )
    calibrate.add_argument(
        "--gpus-per-node",
        type=positive_int("gpus-per-node"),
        default=None,
        help="GPUs used per server (default: ranks / nodes)",
    )
    calibrate.add_argument(
        "--nranks", type=positive_int("nranks"), default=None, help="ranks (default: the log's '#  Rank N' lines)"
    )
    calibrate.add_argument(
        "-g",
        "--ngpus",
        type=positive_int("ngpus"),
        default=None,
        help="GPUs per nccl-tests process, -g (default: the log's nGpus, else 1)",
    )
    calibrate.add_argument(
        "--collective",
        default=None,
        help="the test run (default: from the log, e.g. 'Collective test starting: all_reduce_perf')",
    )
    calibrate.add_argument(
        "--algo",
        default=None,
        help="the algorithm the measurement forced (default: the "
        "log's NCCL settings, from 'NCCL INFO ... set by environment' lines)",
    )
    calibrate.add_argument("--proto", default=None, help="the protocol it forced")
    calibrate.add_argument(
        "--channels", type=positive_int("channels"), default=None, help="the channel count it forced"
    )
    calibrate.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, default="flow", help="network model")
    nccl_version_option(calibrate)
    calibrate.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr (there is none when it is not a terminal)"
    )
    calibrate.add_argument(
        "--out",
        default=None,
        metavar="FILE.json",
        help="write the calibration here, for `fabricsim bench --calibration FILE.json`",
    )


def run(args) -> str:
    import json

    from simulator.validation.calibration import calibrate, format_result, parse_measurements, read_measurements

    if args.out is not None:
        output_file("out", args.out)  # before the fit runs
    # an inspector trace may hold several communicators: the options pick one
    pick = dict(collective=args.collective, nranks=args.nranks, nodes=args.nodes)
    if args.log == "-":
        log = parse_measurements(sys.stdin.read(), name="<stdin>", **pick)
    else:
        log = read_measurements(args.log, **pick)
    with progress_display("fabricsim calibrate", quiet=bool(args.quiet)) as progress:
        result = calibrate(
            log,
            system=args.system,
            collective=args.collective,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            nranks=args.nranks,
            gpus_per_process=args.ngpus,
            algorithm=args.algo,
            protocol=protocol_name(args.proto),
            nchannels=args.channels,
            net_model=args.net_model,
            nccl_version=args.nccl_version,
            progress=progress,
        )
    if args.out is not None:
        try:
            Path(args.out).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
        except OSError as exc:
            raise ValueError(f"out: {args.out!r} cannot be written ({exc.strerror})") from None
    return format_result(result, out=args.out)
