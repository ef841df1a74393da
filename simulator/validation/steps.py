"""The shipped training rows in one table: predicted against measured step time (``fabricsim validate --training``).

Two tables, each simulated by its own module's public check with the settings its rows ran:

* Megatron SC21 Table 1 (``sc21.sc21_check``: GPT 1.7B-1T on 32-3072 A100). SC21 reports TFLOP/s per GPU from
  eq. 3's FLOPs F; the measured step time is F / (GPUs x measured TFLOP/s), so with the predicted TFLOP/s
  F / (GPUs x predicted step): measured step = predicted step x predicted TFLOP/s / measured TFLOP/s, and
  the step-time error is measured TFLOP/s / predicted TFLOP/s - 1.
* NVIDIA DGX Cloud recipes (``dgxc.dgxc_check``: Llama 3.1, GPT3-175B, Nemotron4 on H100 in BF16 and FP8, and the
  GB200 NVL72 rows where a system preset exists; 8-2304 GPUs), step times as published, each row on its system
  with its precision. The 405B proxies (fewer layers) stay in ``python -m simulator.validation.dgxc
  --proxy``.

Per row: predicted and measured step time, error = predicted / measured - 1 (positive: the simulator is too
slow), and the exposed-communication share, time in network / predicted step time. A row costs from under a
second (SC21, with its exact reductions) to minutes (the 405B recipes), so rows on more than ``max_gpus`` GPUs
(default ``DEFAULT_MAX_GPUS``) are skipped and, by default, only the fewest-GPU layout of each DGX Cloud recipe
and model is run (the weak-scaling layouts above it differ in data parallelism only); the 405B rows
(``SLOW_MODELS``) run only with ``slow``. ``max_gpus=None, every_layout=True`` runs every other row, the
mixture-of-experts ones reported in their own means; the table names every row it skipped and why. Nothing is
fitted here.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from topologies.checks import choice, flag, integer

from .dgxc import DGXC_MODELS, DgxcRow, dgxc_cases, dgxc_check, dgxc_why_not
from .sc21 import Sc21Row, sc21_check, sc21_layout, sc21_rows

__all__ = (
    "DEFAULT_MAX_GPUS",
    "SLOW_MODELS",
    "TRAINING_FORMATS",
    "TrainingRow",
    "Skipped",
    "TrainingCheck",
    "training_check",
    "format_training",
)

# interactive: SC21's GPT-1.7B and the fewest-GPU Llama 3.1 8B and Nemotron4 15B recipes, half a minute in all
DEFAULT_MAX_GPUS = 32
# the recipes whose rows take minutes each (Llama 3.1 405B on 512 H100: about 5 CPU-minutes, measured), run only
# on request (``slow``); every other DGX Cloud row takes seconds to a minute
SLOW_MODELS = frozenset({"Llama 3.1 405B"})
TRAINING_FORMATS = ("table", "csv", "json")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingRow:
    """One measured training step against its simulation."""

    table: str  # "SC21" or "DGX Cloud <recipe release>"
    model: str
    precision: str  # as the table states it: FP16 (SC21), BF16, FP8
    moe: bool  # a mixture-of-experts model (reported apart from the dense rows)
    system: str  # the topologies.presets system simulated
    gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    vp: int
    global_batch: int
    measured_step_s: float
    predicted_step_s: float
    exposed_comm_s: float
    bubble_s: float
    wall_s: float  # how long the simulation took

    @property
    def error(self) -> float:
        """Step time, predicted / measured - 1."""
        return self.predicted_step_s / self.measured_step_s - 1

    @property
    def exposed_share(self) -> float:
        """Time in network over the predicted step time."""
        return self.exposed_comm_s / self.predicted_step_s

    def as_dict(self) -> dict:
        return asdict(self) | {"error": self.error, "exposed_share": self.exposed_share}


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped:
    """A measured row left out, and why."""

    table: str
    model: str
    gpus: int
    reason: str

    def __str__(self) -> str:
        return f"{self.table} {self.model} on {self.gpus} GPUs: {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingCheck:
    """The simulated rows, and each row left out with the reason."""

    rows: tuple[TrainingRow, ...]
    skipped: tuple[Skipped, ...]


def _from_sc21(r: Sc21Row) -> TrainingRow:
    return TrainingRow(
        table="SC21",
        model=r.model,
        precision="FP16",  # SC21's run_table_1.sh trains in fp16 (sc21.sc21_layout)
        moe=False,
        system="dgx-a100",
        gpus=r.gpus,
        tp=r.tp,
        pp=r.pp,
        cp=1,
        ep=1,
        dp=r.dp,
        vp=r.vp,
        global_batch=r.micro_batch * r.microbatches * r.dp,
        # eq. 3's F over GPUs x measured TFLOP/s, F = predicted TFLOP/s x GPUs x predicted step (module docstring)
        measured_step_s=r.step_time_s * r.predicted_tflops / r.measured_tflops,
        predicted_step_s=r.step_time_s,
        exposed_comm_s=r.exposed_comm_s,
        bubble_s=r.bubble_s,
        wall_s=r.wall_s,
    )


def _from_dgxc(r: DgxcRow) -> TrainingRow:
    c = r.case
    return TrainingRow(
        table=f"DGX Cloud {c.version}",
        model=c.model,
        precision=c.precision,
        moe=c.moe,
        system=str(c.system_preset),
        gpus=c.gpus,
        tp=c.tp,
        pp=c.pp,
        cp=c.cp,
        ep=c.ep,
        dp=c.dp,
        vp=c.vp,
        global_batch=c.global_batch,
        measured_step_s=c.measured_step_s,
        predicted_step_s=r.predicted_step_s,
        exposed_comm_s=r.exposed_comm_s,
        bubble_s=r.bubble_s,
        wall_s=r.wall_s,
    )


def training_check(
    *,
    max_gpus: int | None = DEFAULT_MAX_GPUS,
    every_layout: bool = False,
    slow: bool = False,
    progress: Callable[[TrainingRow], object] | None = None,
) -> TrainingCheck:
    """Simulate the SC21 rows, then the DGX Cloud rows, on up to ``max_gpus`` GPUs (None: all); with
    ``every_layout`` every DGX Cloud layout, else the fewest-GPU one of each recipe release and model; the
    ``SLOW_MODELS`` rows only with ``slow``.
    ``progress`` is called with each row as it is simulated."""
    if max_gpus is not None:
        integer("max_gpus", max_gpus, low=1, expected="None or an integer >= 1")
    flag("every_layout", every_layout)
    flag("slow", slow)
    sc21_progress = None if progress is None else (lambda r: progress(_from_sc21(r)))
    dgxc_progress = None if progress is None else (lambda r: progress(_from_dgxc(r)))
    rows = [_from_sc21(r) for r in sc21_check(max_gpus=max_gpus, progress=sc21_progress)]
    skipped = [
        Skipped(table="SC21", model=row["model"], gpus=spec.world_size, reason=f"more than {max_gpus} GPUs")
        for row in sc21_rows()
        for _, spec in (sc21_layout(row),)
        if max_gpus is not None and spec.world_size > max_gpus
    ]
    models = None if slow else tuple(m for m in DGXC_MODELS if m not in SLOW_MODELS)
    done = dgxc_check(models=models, max_gpus=max_gpus, smallest=not every_layout, progress=dgxc_progress)
    rows += [_from_dgxc(r) for r in done]
    ran = {r.case for r in done}
    for case in dgxc_cases():
        if case.proxy or case in ran:
            continue
        reason = dgxc_why_not(case)
        if reason is not None:
            why = reason.split(";")[0]
        elif max_gpus is not None and case.gpus > max_gpus:
            why = f"more than {max_gpus} GPUs"
        elif not slow and case.model in SLOW_MODELS:
            why = "slow (minutes a row; --slow)"
        else:
            why = "weak-scaling layout"
        skipped.append(Skipped(table=f"DGX Cloud {case.version}", model=case.model, gpus=case.gpus, reason=why))
    return TrainingCheck(rows=tuple(rows), skipped=tuple(skipped))


def _short(model: str) -> str:
    """The table's model name within 16 characters: without "(MoE)" (the group says it), then its last word."""
    name = model.removesuffix(" (MoE)")
    return name if len(name) <= 16 else name.rsplit(" ", 1)[0]


def _group(r: TrainingRow) -> str:
    """The rows a mean is taken over: the table family, the system and, on DGX Cloud, dense or MoE."""
    family = r.table.split(" v")[0]
    if family == "SC21":
        return family
    return f"{family} {r.system} {'MoE' if r.moe else 'dense'}"


def _mean_abs(rows: list[TrainingRow]) -> float:
    return math.fsum(abs(r.error) for r in rows) / len(rows)


def format_training(check: TrainingCheck, *, format: str = "table") -> str:
    """The check as a text table (with the mean |error| per table and what was skipped), CSV (one line per row,
    the skipped rows as ``# skipped:`` comment lines at the end) or JSON (``rows`` and ``skipped``)."""
    choice("format", format, TRAINING_FORMATS)
    if format == "json":
        data = {"rows": [r.as_dict() for r in check.rows], "skipped": [asdict(s) for s in check.skipped]}
        return json.dumps(data, indent=1) + "\n"
    if format == "csv":
        out = io.StringIO()
        names = [*TrainingRow.__dataclass_fields__, "error", "exposed_share"]
        writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(r.as_dict() for r in check.rows)
        return out.getvalue() + "".join(f"# skipped: {s}\n" for s in check.skipped)
    lines = [
        f"{'table':<20}{'model':<17}{'prec':<5}{'system':<11}{'GPUs':>6}"
        f"{'t':>3}{'p':>3}{'c':>3}{'e':>3}{'d':>5}{'v':>3}{'GBS':>6}"
        f"{'meas s':>9}{'pred s':>9}{'error':>8}{'exposed':>9}"
    ]
    for r in check.rows:
        lines.append(
            f"{r.table:<20}{_short(r.model):<17}{r.precision:<5}{r.system:<11}{r.gpus:>6}{r.tp:>3}{r.pp:>3}{r.cp:>3}"
            f"{r.ep:>3}{r.dp:>5}"
            f"{r.vp:>3}{r.global_batch:>6}{r.measured_step_s:>9.3f}{r.predicted_step_s:>9.3f}{r.error:>+8.1%}"
            f"{r.exposed_share:>9.1%}"
        )
    lines.append("# error: predicted / measured step time - 1; exposed: time in network / predicted step time")
    rows = list(check.rows)
    for group in dict.fromkeys(_group(r) for r in rows):
        part = [r for r in rows if _group(r) == group]
        errors = [abs(r.error) for r in part]
        lines.append(
            f"# {group}: mean |error| {_mean_abs(part):.1%}, max {max(errors):.1%} over {len(part)} rows, "
            f"exposed {math.fsum(r.exposed_share for r in part) / len(part):.1%} of the step on average"
        )
    if check.skipped:
        lines.append(
            f"# skipped {len(check.skipped)} rows (--max-gpus N or 0 for all, --every-layout for the weak-scaling "
            "layouts, --slow for the 405B; its proxies: python -m simulator.validation.dgxc --proxy):"
        )
        # one line per table, model and reason: how many layouts, on how many GPUs
        groups: dict[tuple[str, str, str], list[int]] = {}
        for s in check.skipped:
            groups.setdefault((s.table.split(" v")[0], s.model, s.reason), []).append(s.gpus)
        for (table, model, reason), gpus in groups.items():
            span = f"{min(gpus)}" if min(gpus) == max(gpus) else f"{min(gpus)}-{max(gpus)}"
            lines.append(
                f"#   {table} {model}: {len(gpus)} layout{'s' if len(gpus) > 1 else ''} on {span} GPUs, {reason}"
            )
    return "\n".join(lines) + "\n"
