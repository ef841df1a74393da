"""Plots, and the only module that imports matplotlib.

Figures are built with matplotlib's object-oriented API on an Agg canvas (``Figure`` +
``FigureCanvasAgg``), never through pyplot: nothing touches matplotlib's global backend or figure
registry, so plotting works the same in a terminal, under pytest and in a notebook, and there is no
figure to close afterwards.

``busbw_figure(comparisons, title=...)`` draws predicted vs measured bus bandwidth against message
size for one series (one colour per collective / GPU-count group; measured as points, predicted as
a line; log2 size axis). ``write_busbw_plots(tables, directory)`` writes one PNG per series.

``fabric_figure(topology)`` draws a fabric's switch graph (servers at the bottom, then each switch tier; a
dragonfly group by group around a circle); ``draw_fabric(topology, path)`` writes it as a PNG.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported lazily, where a figure is drawn
    from matplotlib.figure import Figure

    from topologies.topology import Topology

PNG_DPI = 100
FIGSIZE_IN = (8.0, 5.0)


def _size_label(nbytes: float) -> str:
    """8 -> '8', 1024 -> '1K', 2**30 -> '1G' (axis ticks are powers of two)."""
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:g}{suffix}"
    return f"{nbytes:g}"


def _group_labels(keys: list[tuple]) -> list[str]:
    """'all_gather, 16 GPUs (2 nodes)', with the GPU named only when the groups differ in it."""
    several_gpus = len({gpu for *_, gpu in keys}) > 1
    labels = []
    for collective, nranks, nnodes, gpu in keys:
        label = f"{collective}, {nranks} GPUs ({nnodes} node{'s' if nnodes > 1 else ''})"
        labels.append(f"{label}, {gpu}" if several_gpus else label)
    return labels


def busbw_figure(comparisons: Sequence, *, title: str) -> Figure:
    """Measured (points) vs predicted (line) busbw in GB/s against size, one colour per group.

    ``comparisons`` are ``simulator.validation.Comparison`` rows (any objects with collective,
    nranks, nnodes, gpu, size_bytes, busbw_meas_GBps and busbw_pred_GBps). A series in which every
    group was measured at one size only (a GPU-count sweep at 8 GiB, say) is drawn with the groups
    side by side instead, since a size axis would stack them all on one point.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    groups: dict[tuple, list] = {}
    for c in comparisons:
        groups.setdefault((c.collective, c.nranks, c.nnodes, c.gpu), []).append(c)
    keys = sorted(groups, key=lambda k: (k[0], k[2], k[1], k[3]))  # collective, nodes, GPUs, GPU name
    labels = _group_labels(keys)
    colours = [f"C{i % 10}" for i in range(len(keys))]
    one_size_each = bool(groups) and all(len({c.size_bytes for c in rows}) == 1 for rows in groups.values())
    wide = len(keys) > 4 and not one_size_each
    fig = Figure(figsize=(FIGSIZE_IN[0] + (3.0 if wide else 0.0), FIGSIZE_IN[1]))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, (colour, key) in enumerate(zip(colours, keys)):
        rows = sorted(groups[key], key=lambda c: c.size_bytes)
        x = [i] * len(rows) if one_size_each else [c.size_bytes for c in rows]
        ax.plot(x, [c.busbw_meas_GBps for c in rows], "o", color=colour, markersize=6, alpha=0.85)
        if one_size_each:
            ax.plot(x, [c.busbw_pred_GBps for c in rows], "_", color=colour, markersize=22, markeredgewidth=2.5)
        else:
            ax.plot(x, [c.busbw_pred_GBps for c in rows], "-", color=colour, linewidth=1.6)
    if one_size_each:
        sizes = sorted({c.size_bytes for rows in groups.values() for c in rows})
        ax.set_xticks(range(len(keys)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(keys) - 0.4)
        ax.set_xlabel(f"group (message size {', '.join(_size_label(s) for s in sizes)})")
    else:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=2, numticks=40))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _size_label(x)))
        ax.set_xlabel("message size (bytes, log2)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    style = [
        Line2D([], [], color="0.3", marker="o", linestyle="", label="measured"),
        Line2D(
            [],
            [],
            color="0.3",
            marker="_" if one_size_each else "",
            markersize=12,
            linestyle="" if one_size_each else "-",
            label="predicted",
        ),
    ]
    handles = (
        style
        if one_size_each
        else style + [Line2D([], [], color=colour, linewidth=3, label=label) for colour, label in zip(colours, labels)]
    )
    if groups:
        if wide:
            ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        else:
            ax.legend(handles=handles, fontsize=8, loc="upper left", frameon=False)
    fig.tight_layout()
    if not one_size_each and len(ax.get_xticks()) > 14:  # every other power of two keeps labels readable
        ax.xaxis.set_major_locator(LogLocator(base=4, numticks=40))
    return fig


def comparison_figure(comparison: Any) -> Figure:
    """A ``studies.compare.Comparison`` side by side: one panel per workload, the designs along x; a collective
    as its bus bandwidth (GB/s), a step as compute and bubble (blue) under its time in the network (red), s;
    then what each design costs (capex, million USD) and draws (kW)."""
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    workloads = comparison.workloads
    fig = Figure(figsize=(5.2 * (len(workloads) + 1), 5.4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(workloads) + 1, squeeze=False)[0]
    designs = list(comparison.designs)
    x = list(range(len(designs)))
    labels = [textwrap.fill(d, 14) for d in designs]
    table = comparison.table
    for ax, workload in zip(axes, workloads):
        rows = table[table["workload"] == workload].set_index("design").loc[designs]
        ok = rows["status"] == "ok"
        if rows["kind"].iloc[0] == "bench":
            ax.bar(x, rows["busbw_GBps"].where(ok, 0.0), 0.6, color="tab:green", label="bus bandwidth")
            ax.set_ylabel("bus bandwidth (GB/s)")
        else:
            exposed = rows["exposed_comm_s"].where(ok, 0.0)
            hidden = rows["step_time_s"].where(ok, 0.0) - exposed
            ax.bar(x, hidden, 0.6, color="tab:blue", label="compute and bubble")
            ax.bar(x, exposed, 0.6, bottom=hidden, color="tab:red", label="time in network (exposed)")
            ax.set_ylabel("step time (s)")
        for i, good in enumerate(ok):
            if not good:
                ax.text(i, 0, "failed", ha="center", va="bottom", color="tab:red", fontsize=8)
        ax.set_title(workload)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_xlabel("design")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    hardware = comparison.hardware.loc[designs]
    ax = axes[-1]
    ax.bar([i - 0.2 for i in x], hardware["capex USD"] / 1e6, 0.4, color="tab:gray", label="capex (million USD)")
    ax.set_ylabel("capex (million USD)")
    power = ax.twinx()
    power.bar([i + 0.2 for i in x], hardware["power kW"], 0.4, color="tab:orange", label="power (kW)")
    power.set_ylabel("power (kW)")
    ax.set_title("fabric: switches, NICs, optics, cables")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlabel("design")
    handles = ax.get_legend_handles_labels()[0] + power.get_legend_handles_labels()[0]
    labels = [h.get_label() for h in handles]
    ax.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def training_figure(rows: Sequence, *, title: str = "training steps: predicted vs measured") -> Figure:
    """Predicted against measured step time of ``validation.steps.TrainingRow``s (log axes): one marker per table
    (SC21, DGX Cloud), the line predicted = measured and a band of +-10 %, each point labelled with its model and
    GPUs; a second panel the exposed-communication share per row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(11, 5))
    FigureCanvasAgg(fig)
    ax, share = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    tables = list(dict.fromkeys(r.table.split(" v")[0] for r in rows))
    for table, marker in zip(tables, "osD^v"):
        mine = [r for r in rows if r.table.split(" v")[0] == table]
        ax.scatter([r.measured_step_s for r in mine], [r.predicted_step_s for r in mine], marker=marker, label=table)
        for r in mine:
            ax.annotate(
                f"{r.model} ({r.gpus})",
                (r.measured_step_s, r.predicted_step_s),
                fontsize=7,
                xytext=(4, 2),
                textcoords="offset points",
            )
    times = [t for r in rows for t in (r.measured_step_s, r.predicted_step_s)] or [1.0]
    lo, hi = min(times) / 1.3, max(times) * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="gray", alpha=0.2, label="+-10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    labels = [f"{r.model}, {r.gpus} GPUs ({r.table})" for r in rows]
    share.barh(range(len(rows)), [100 * r.exposed_share for r in rows], color="tab:red")
    share.set_yticks(range(len(rows)), labels, fontsize=7)
    share.invert_yaxis()
    share.set_xlabel("time in network, % of the predicted step")
    share.set_title("exposed communication")
    fig.tight_layout()
    return fig


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (for ``IPython.display.Image`` in a notebook)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PNG_DPI)
    return buffer.getvalue()


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "series"


def write_busbw_plots(tables: Iterable[tuple[str, Sequence]], directory: str | Path) -> list[Path]:
    """One PNG per (name, comparisons) in ``directory`` (created if missing); returns the paths.

    Files are numbered in the given order: ``01-h100-8-gpu-reduce-scatter-nccl-algo-ring.png``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, comparisons) in enumerate(tables, start=1):
        path = directory / f"{i:02d}-{_slug(name)}.png"
        path.write_bytes(figure_png(busbw_figure(comparisons, title=name)))
        paths.append(path)
    return paths


def fabric_figure(topology: Topology, *, title: str | None = None) -> Figure:
    """The switch graph of ``topology``: servers (one dot each) at the bottom, then each switch
    tier; a dragonfly (one tier) is drawn group by group around a circle. Edges are cables
    (parallel cables drawn once)."""
    import networkx as nx
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from topologies.topology import NodeKind

    graph = topology.graph
    switches = [n for n, d in graph.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH]
    drawn = nx.Graph()
    for n in switches:
        drawn.add_node(n, layer=int(graph.nodes[n].get("tier", 1)))
    for s, info in enumerate(topology.servers):
        node = ("server", s)
        drawn.add_node(node, layer=0)
        for nic in info.nics:
            link = topology.nic_leaf_link.get(nic)
            if link is not None:
                drawn.add_edge(node, int(topology.link_dst[link]))
    for u, v in graph.edges():
        if u in drawn and v in drawn and u != v:
            drawn.add_edge(u, v)
    layers = {d["layer"] for _, d in drawn.nodes(data=True)}
    if layers <= {0, 1} and any("group" in graph.nodes[n] for n in switches):
        pos = nx.circular_layout(sorted(switches, key=lambda n: (graph.nodes[n].get("group", 0), n)))
        pos.update(nx.circular_layout([n for n in drawn if n not in pos], scale=1.3))
    else:
        pos = nx.multipartite_layout(drawn, subset_key="layer", align="horizontal")
    fig = Figure(figsize=FIGSIZE_IN)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    nx.draw_networkx_edges(drawn, pos, ax=ax, width=0.3, alpha=0.4)
    colours = {0: "tab:gray", 1: "tab:blue", 2: "tab:orange", 3: "tab:red"}
    for layer in sorted(layers):
        nodes = [n for n, d in drawn.nodes(data=True) if d["layer"] == layer]
        label = "servers" if layer == 0 else f"tier {layer} switches"
        nx.draw_networkx_nodes(
            drawn,
            pos,
            nodelist=nodes,
            ax=ax,
            node_size=12 if layer == 0 else 20,
            node_color=colours.get(layer, "black"),
            label=f"{label} ({len(nodes)})",
        )
    ax.set_title(title or topology.description or topology.name, fontsize=9)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_axis_off()
    return fig


def draw_fabric(topology: Topology, path: str | Path) -> Path:
    """Write ``fabric_figure(topology)`` as a PNG to ``path``."""
    path = Path(path)
    try:
        path.write_bytes(figure_png(fabric_figure(topology)))
    except OSError as exc:
        raise ValueError(f"draw: {str(path)!r} cannot be written ({exc.strerror})") from None
    return path
