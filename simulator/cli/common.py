"""What every subcommand shares: the one-line usage error, option types, the fabric options."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from topologies.checks import reject
from topologies.dragonfly import ARRANGEMENTS
from topologies.presets import FABRICS, TOPOLOGIES

if TYPE_CHECKING:
    from simulator.validation.calibration import Calibration

from simulator.studies.scenario import DEFAULT_SYSTEM, FABRIC_DEFAULTS


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr, not a usage dump."""

    def error(self, message: str):  # noqa: D401
        raise UsageError(f"fabricsim: error: {message}")


def bounded(name: str, cast=int, low: float = 1, *, strict: bool = False):
    """argparse type: ``cast`` of the text (a float: finite), at least ``low`` (more than it when ``strict``)."""
    kind = "an integer" if cast is int else "a finite number"
    expected = f"{kind} {'>' if strict else '>='} {low:g}"

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(str(reject(name, text, expected))) from None
        if cast is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(str(reject(name, text, expected)))
        if not (value > low if strict else value >= low):
            raise argparse.ArgumentTypeError(str(reject(name, text, expected)))
        return value

    return parse


def system_name(settings_system: str | None) -> str:
    """The --system given (an empty one is an error, not the default), else DEFAULT_SYSTEM."""
    return DEFAULT_SYSTEM if settings_system is None else settings_system


positive_int = bounded  # positive_int(name): an integer >= 1
stepfactor = bounded("stepfactor", float, 1, strict=True)


def fabric_options(p: argparse.ArgumentParser, *, defaults: Mapping) -> None:
    """The options that choose and wire the fabric (bench, topo and step), with the values of ``defaults`` for
    the FABRIC_DEFAULTS keys as their defaults, which their help texts name (step then makes every default
    None, 'not given', so that its scenario file can set them)."""
    p.add_argument(
        "--system",
        help=f"system preset (see `fabricsim systems`), or a file: `nvidia-smi topo -m` output or an NCCL topology "
        f"XML dump (NCCL_TOPO_DUMP_FILE); default {DEFAULT_SYSTEM}",
    )
    p.add_argument(
        "--gpu",
        help="GPU preset of a --system FILE that does not name it (nvidia-smi topo -m does not), e.g. h100",
    )
    p.add_argument("--nodes", type=positive_int("nodes"), help=f"servers; default {defaults['nodes']}")
    p.add_argument("--topology", help=f"wiring: {', '.join(TOPOLOGIES)}; default {defaults['topology']}")
    p.add_argument(
        "--fabric",
        help=f"fabric technology: {', '.join(FABRICS)}, or a TOML/JSON file describing a custom one (link, switch, "
        "nic, radix, switch_latency_us); default the preset's own",
    )
    p.add_argument(
        "--oversubscription",
        type=bounded("oversubscription", float),
        help=f"leaf down:up ratio R (R:1), 1 non-blocking; default {defaults['oversubscription']:g}",
    )
    p.add_argument(
        "--no-rail-optimised",
        dest="rail_optimised",
        action="store_false",
        help="cable every NIC of a server to the same top-of-rack leaf",
    )
    p.add_argument("--nics-per-node", type=positive_int("nics-per-node"), help="NICs per server; default the preset's")
    p.add_argument(
        "--planes",
        type=positive_int("planes"),
        help=f"independent fabric planes, NIC j on plane j %% P; default {defaults['planes']}",
    )
    p.add_argument(
        "--no-gdr",
        dest="gdr",
        action="store_false",
        help="GPUDirect RDMA off: network traffic staged through host memory (NCCL 'GDR 0')",
    )
    for letter, what in (("p", "NIC ports per router"), ("a", "routers per group"), ("h", "global links per router")):
        p.add_argument(
            f"--dragonfly-{letter}",
            type=positive_int(f"dragonfly-{letter}"),
            help=f"dragonfly {letter}: {what}; default balanced (a = 2p = 2h), the smallest p that holds the nodes",
        )
    p.add_argument(
        "--dragonfly-arrangement",
        choices=ARRANGEMENTS,
        help="how a dragonfly's global links pair groups; default absolute",
    )
    p.set_defaults(**{name: defaults[name] for name in FABRIC_DEFAULTS})


def nccl_version_option(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """``--nccl-version``: the NCCL release whose default enablement the tuner follows."""
    from simulator.collectives.nccl_model import DEFAULT_NCCL_VERSION, NCCL_VERSIONS

    p.add_argument(
        "--nccl-version",
        default=default,
        metavar="2.MINOR",
        help=f"the NCCL release whose tuner enables LL128, PAT and NVLS as modelled ({NCCL_VERSIONS[0]} to "
        f"{NCCL_VERSIONS[-1]}, a patch release such as 2.26.2 is its minor); default {DEFAULT_NCCL_VERSION}",
    )


def protocol_name(proto: str | None) -> str | None:
    if proto is None:
        return None
    return {"ll": "LL", "ll128": "LL128", "simple": "Simple"}.get(proto.lower(), proto)


@contextlib.contextmanager
def progress_display(what: str, *, quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """A one-line display on stderr of the stage a long command is in (``what: stage``), cleared when it ends;
    None (no display) with ``--quiet`` or when stderr is not a terminal (a pipe, a file, a notebook's capture)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=None, file=sys.stderr, bar_format="{desc} [{elapsed}]", leave=False) as bar:

        def show(stage: str) -> None:
            bar.set_description_str(f"{what}: {stage}")
            bar.update()

        yield show


def load_calibration(path: str, system: str | None) -> Calibration:
    """The calibration file of ``--calibration``; ``system``, the system the command was given (None: none), must
    be the one it was fitted on (the caller then runs on ``calibration.system``)."""
    from simulator.validation.calibration import Calibration

    calibration = Calibration.load(path)
    if system is not None and system != calibration.system:
        raise ValueError(
            f"calibration: {path} was fitted on system {calibration.system!r}, not {system!r}; expected --system "
            f"{calibration.system} (or no --system)"
        )
    return calibration
