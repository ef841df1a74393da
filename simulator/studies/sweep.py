"""Sweeps: many scenarios (training steps or single collectives), each simulated on a Dask worker, cached on
disk, gathered into one tidy table (a pandas DataFrame, one row per scenario: its inputs, then its results in
unit-suffixed columns).

A grid (a TOML file for ``fabricsim sweep``, or a dict) names the fields every scenario shares at its top
level, a ``[grid]`` table of lists whose cartesian product varies them, and optionally ``[[scenarios]]``,
explicit variants each crossed with the grid::

    kind = "step"              # "step" (a training step, the fields of `fabricsim step`) or "bench"
    model = "llama3-8b"
    [grid]
    nodes = [8, 16]
    topology = ["leaf-spine", "fat-tree"]

A step scenario takes the fields of ``fabricsim step``'s scenario file (``scenario.STEP_DEFAULTS``) but its
outputs (format, trace, trace_ranks) and calibration; a bench scenario (one collective at one size, as one row
of ``fabricsim bench``) takes ``BENCH_DEFAULTS``. Both take NCCL settings as ``NCCL_*`` fields; the process
environment's NCCL variables do not apply, so a scenario's row depends on its fields only.

Each result is cached under ``cache_dir`` by a hash of its scenario and of fabricsim's source, so an
interrupted sweep resumes where it stopped and a repeated one is read back; a scenario whose settings are
refused or whose simulation fails becomes a row with ``status`` "error" and the message, not a dead sweep.
Sweeps run on a ``dask.distributed`` cluster: a local one on every core by default, or the scheduler at the
address given.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from topologies import checks
from topologies.io import is_file
from topologies.presets import SYSTEMS
from workloads.collectives import CollectiveKind

from .nccl_tests import BENCH_COLLECTIVES
from .scenario import (
    FABRIC_DEFAULTS,
    NETWORK_DEFAULTS,
    SETTING_CHECKS,
    STEP_DEFAULTS,
    build_topology,
    network_config,
    prepare_step,
    run_step,
    step_settings,
)

__all__ = ("KINDS", "BENCH_DEFAULTS", "expand", "load_grid", "run_scenario", "scenario_key", "sweep")

KINDS = ("step", "bench")
# step settings a sweep row cannot use: outputs of the command, and calibration files (the validation layer's)
STEP_REFUSED = ("format", "trace", "trace_ranks", "calibration")
# one collective at one size, as one row of `fabricsim bench`
BENCH_DEFAULTS: dict[str, Any] = {
    "collective": "all_reduce",
    "size": "64M",
    "datatype": "float",
    "op": "sum",
    "root": 0,
    "gpus_per_node": None,
    "system": STEP_DEFAULTS["system"],
    **FABRIC_DEFAULTS,
    **NETWORK_DEFAULTS,
}
_RESULT_COLUMNS = ("status", "error", "cached")


def load_grid(path: str | os.PathLike) -> dict:
    """A grid from a TOML file (see the module docstring)."""
    import tomllib

    text = checks.read_text("grid", str(path))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"grid: {path} is not valid TOML ({exc})") from None


def expand(grid: Mapping[str, Any]) -> list[dict]:
    """The scenarios of ``grid``: its top-level fields, crossed with each ``scenarios`` entry (default one
    empty) and with every combination of the ``grid`` table's lists, in that order (the last list varies
    fastest). A scenario's field replaces the top level's; a field both a scenario and the grid set is refused.

    >>> [s["nodes"] for s in expand({"kind": "bench", "grid": {"nodes": [1, 2], "size": ["1M", "1G"]}})]
    [1, 1, 2, 2]
    """
    if not isinstance(grid, Mapping):
        raise checks.reject("grid", grid, "a table of fields, with an optional [grid] table and [[scenarios]]")
    base = {k: v for k, v in grid.items() if k not in ("grid", "scenarios")}
    table = grid.get("grid", {})
    if not isinstance(table, Mapping):
        raise checks.reject("grid.grid", table, "a table of lists")
    for name, values in table.items():
        if not isinstance(values, list) or not values:
            raise checks.reject(f"grid.{name}", values, "a non-empty list of values")
    cases = grid.get("scenarios", [{}])
    if not isinstance(cases, list) or not cases or any(not isinstance(c, Mapping) for c in cases):
        raise checks.reject("grid.scenarios", cases, "a non-empty list of tables ([[scenarios]])")
    names = list(table)
    for i, case in enumerate(cases):
        both = sorted(set(case) & set(names))
        if both:
            raise checks.reject(f"grid.scenarios[{i}].{both[0]}", case[both[0]], "no value: the [grid] varies it")
    out = []
    for case in cases:
        for combo in itertools.product(*(table[n] for n in names)):
            out.append(base | dict(case) | dict(zip(names, combo)))
    return out


def _source_fingerprint() -> str:
    """A hash of fabricsim's own source files: cached results of another version are not reused."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in ("simulator", "topologies", "workloads"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def scenario_key(scenario: Mapping[str, Any], fingerprint: str = "") -> str:
    """The cache key of ``scenario``: a hash of its fields (in any order), of ``fingerprint`` and, when its system
    is a file (``nvidia-smi topo -m``, NCCL XML), of that file's bytes, so an edited file is simulated again."""
    system = scenario.get("system")
    content = ""
    if isinstance(system, str) and system not in SYSTEMS and is_file(system):
        content = hashlib.sha256(Path(system).read_bytes()).hexdigest()
    text = json.dumps(
        {"scenario": scenario, "source": fingerprint, "system_file": content}, sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


# ---- one scenario -----------------------------------------------------------------------------------------
def _split(scenario: Mapping[str, Any]) -> tuple[str, dict, dict]:
    """(kind, its settings, the NCCL_* environment) of a scenario."""
    from simulator.collectives.tuner import NCCL_ENVIRONMENT

    fields: dict[str, Any] = {}
    environ: dict[str, str] = {}
    for key, value in scenario.items():
        if str(key).startswith("NCCL_"):
            if key not in NCCL_ENVIRONMENT:
                raise checks.reject(
                    key, value, f"no value: not an NCCL setting fabricsim models ({', '.join(NCCL_ENVIRONMENT)})"
                )
            environ[key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
            continue
        name = str(key).replace("-", "_")
        if name in fields:
            raise checks.reject(str(key), value, f"one spelling of {name!r} per scenario")
        fields[name] = value
    kind = fields.pop("kind", "step")
    if kind not in KINDS:
        raise checks.reject("kind", kind, f"one of {', '.join(KINDS)}")
    fields.pop("name", None)  # a label for the row, not a setting
    return kind, fields, environ


def _step_row(fields: dict, environ: dict) -> dict:
    refused = [name for name in STEP_REFUSED if name in fields]
    if refused:
        raise checks.reject(refused[0], fields[refused[0]], "no value in a sweep (a sweep row is a table row)")
    setup = prepare_step(step_settings(fields), environ=environ)
    r = run_step(setup)
    row: dict[str, Any] = {
        "gpus": r.gpus,
        "topology_description": setup.topology.description or setup.topology.name,
        "dp_size": r.parallelism.dp,
        "step_time_s": r.step_time_s,
        "tokens_per_s": r.tokens_per_s,
        "tflops_per_gpu": r.tflops_per_gpu,
        "mfu": r.mfu,
        "compute_s": r.compute_s,
        "bubble_s": r.bubble_s,
        "exposed_comm_s": r.exposed_comm_s,
        "comm_s": r.comm_s,
        "memory_bytes_per_gpu": r.memory_bytes_per_gpu,
        "out_of_memory": r.out_of_memory,
        "approximate": r.approximate,
        "step_time_low_s": r.step_time_low_s,
        "step_time_high_s": r.step_time_high_s,
        "exposed_comm_low_s": r.exposed_comm_low_s,
        "exposed_comm_high_s": r.exposed_comm_high_s,
    }
    for group, entry in r.breakdown["group"].items():
        row[f"{group}_time_s"] = entry["time_s"]
        row[f"{group}_exposed_s"] = entry["exposed_s"]
        row[f"{group}_bytes"] = entry["nbytes"]
    for tier, nbytes in r.breakdown["link_tier_bytes"].items():
        row[f"{tier}_bytes"] = nbytes
    row["notes"] = " | ".join(r.notes)
    return row


def _bench_row(fields: dict, environ: dict) -> dict:
    from .nccl_tests import run_bench

    unknown = [name for name in fields if name not in BENCH_DEFAULTS]
    if unknown:
        raise ValueError(
            f"scenario: {unknown[0]!r} is not a field of a bench scenario; expected one of {', '.join(BENCH_DEFAULTS)}"
        )
    checked = {
        name: SETTING_CHECKS[name](name, value) if name in SETTING_CHECKS else value for name, value in fields.items()
    }
    s = BENCH_DEFAULTS | checked
    kind = CollectiveKind.parse(s["collective"]) if isinstance(s["collective"], str) else None
    if kind is None or kind.value not in BENCH_COLLECTIVES:
        raise checks.reject("collective", s["collective"], f"one of {', '.join(BENCH_COLLECTIVES)}")
    size = checks.size_bytes("size", s["size"])
    config = network_config(s, environ)
    topology = build_topology(s)
    (row,) = run_bench(
        kind,
        system=topology,
        nodes=s["nodes"],
        gpus_per_node=s["gpus_per_node"],
        sizes=[size],
        dtype=s["datatype"],
        op=s["op"],
        root=s["root"],
        config=config,
        links=True,
    )
    busiest, busiest_tier, busiest_share = row.busiest_link or ("", "", 0.0)  # none when nothing moved
    return {
        "gpus": (s["gpus_per_node"] or len(topology.servers[0].gpus)) * topology.num_servers,
        "topology_description": topology.description or topology.name,
        "size_bytes": row.size_bytes,
        "time_s": row.time_us * 1e-6,
        "algbw_GBps": row.algbw_GBps,
        "busbw_GBps": row.busbw_GBps,
        "algorithm": row.algorithm,
        "protocol": row.protocol,
        "channels": row.channels,
        **{f"{tier}_bytes": nbytes for tier, nbytes in row.tier_bytes.items()},
        "busiest_link": busiest,
        "busiest_link_tier": busiest_tier,
        "busiest_link_share": busiest_share,
    }


def run_scenario(scenario: Mapping[str, Any]) -> dict:
    """The result columns of one scenario (``status`` "ok"), or ``status`` "error" and the one-line message
    of the setting it refused (a ValueError: as deterministic as a result, so cached like one). Any other
    failure is raised: :func:`sweep` makes it an error row that is not cached."""
    try:
        kind, fields, environ = _split(scenario)
        row = (_step_row if kind == "step" else _bench_row)(fields, environ)
        return {"status": "ok", "error": ""} | row
    except ValueError as exc:
        return {"status": "error", "error": str(exc).splitlines()[0]}


# ---- the sweep --------------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fabricsim/sweep`` (``~/.cache/fabricsim/sweep`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fabricsim" / "sweep"


def _cached(path: Path) -> dict | None:
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # absent, or cut short by an interruption: recomputed
    return row if isinstance(row, dict) and "status" in row else None


def _store(path: Path, row: dict) -> None:
    """Write ``row`` to ``path`` whole or not at all (a temporary file of its own, then renamed); a failure
    to write is a warning: the sweep goes on without caching that row."""
    import tempfile
    import warnings

    try:
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp.write(json.dumps(row, default=float))
        os.replace(tmp.name, path)
    except OSError as exc:
        warnings.warn(f"cache: {str(path)!r} cannot be written ({exc}); the row is not cached", stacklevel=2)


def sweep(
    grid: Mapping[str, Any] | Iterable[Mapping[str, Any]] | str | os.PathLike,
    *,
    scheduler: str | None = None,
    client: Any = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
    progress: bool | Callable[[int, int], None] = False,
) -> Any:
    """Simulate every scenario of ``grid`` (a grid mapping or TOML file, see :func:`expand`, or a list of
    scenarios) and return one pandas DataFrame: a row per scenario in order, its fields, then ``status``,
    ``error``, ``cached`` (read back from the cache) and its results.

    Runs on ``client`` (a ``dask.distributed.Client``), else on the scheduler at ``scheduler``, else on a
    local cluster of ``workers`` processes (default: every core). ``cache_dir`` (default
    :func:`default_cache_dir`) keeps each result as it arrives; ``cache=False`` neither reads nor writes it.
    ``progress``: True for a progress bar on stderr (done/total and ETA), or a callable(done, total).
    """
    import pandas as pd

    if isinstance(grid, (str, os.PathLike)):
        grid = load_grid(grid)
    scenarios = expand(grid) if isinstance(grid, Mapping) else [dict(s) for s in grid]
    if not scenarios:
        raise checks.reject("grid", grid, "at least one scenario")
    if workers is not None:
        workers = checks.integer("workers", workers, low=1)
        if client is not None or scheduler is not None:
            raise checks.reject("workers", workers, "None with a client or a scheduler (the cluster has its own)")
    if client is not None and scheduler is not None:
        raise checks.reject("scheduler", scheduler, "None with a client (the client names its scheduler)")
    folder = checks.output_dir("cache", cache_dir) if cache_dir is not None else default_cache_dir()
    if cache:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cache: {str(folder)!r} cannot be created ({exc.strerror})") from None
    fingerprint = _source_fingerprint()
    paths = [folder / f"{scenario_key(s, fingerprint)}.json" for s in scenarios]
    rows: list[dict | None] = [_cached(p) if cache else None for p in paths]
    for row in rows:
        if row is not None:
            row["cached"] = True
    todo = [i for i, row in enumerate(rows) if row is None]
    total, done = len(scenarios), len(scenarios) - len(todo)
    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=done, desc="fabricsim sweep", unit="scenario", file=None)
    report = progress if callable(progress) else None
    if todo:
        own_cluster = own_client = None
        futures: dict = {}
        try:
            from dask.distributed import Client, LocalCluster, as_completed

            if client is None and scheduler is not None:
                try:
                    client = own_client = Client(scheduler, timeout="5s")
                except Exception as exc:  # noqa: BLE001 - whatever the address holds, one line
                    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ValueError(f"scheduler: {scheduler!r} cannot be reached ({message})") from None
            elif client is None:
                own_cluster = LocalCluster(
                    n_workers=workers or os.cpu_count() or 1,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: never a clash with another cluster
                )
                client = own_client = Client(own_cluster)
            futures = {client.submit(run_scenario, scenarios[i], pure=False): i for i in todo}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    row = future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker: an error row, not cached
                    row = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
                else:
                    if cache:
                        _store(paths[i], row)
                rows[i] = dict(row, cached=False)
                done += 1
                if bar is not None:
                    bar.update(1)
                if report is not None:
                    report(done, total)
        finally:
            if bar is not None:
                bar.close()
            if own_client is not None:
                own_client.close()
            elif futures:  # the caller's cluster: what this sweep left running stops
                client.cancel(list(futures))
            if own_cluster is not None:
                own_cluster.close()
    elif bar is not None:
        bar.close()
    records = []
    for scenario, row in zip(scenarios, rows):
        assert row is not None
        inputs = {
            k: (json.dumps(v, default=str) if isinstance(v, (list, tuple, dict)) else v) for k, v in scenario.items()
        }
        results = {k: row[k] for k in _RESULT_COLUMNS if k in row}
        results |= {k: v for k, v in row.items() if k not in _RESULT_COLUMNS}
        records.append(inputs | results)
    return pd.DataFrame.from_records(records)
