"""Render measured table rows as the stdout nccl-tests prints, to test the log reader and `calibrate`.

The shipped tables keep nccl-tests' out-of-place columns only; the rendered in-place columns repeat
them (or print N/A, or are left out), which the reader ignores either way. Format as printed by
nccl-tests 2.13+ (``# Collective test starting``, ``#  Rank N Group ... device`` lines, two header rows).
"""

from __future__ import annotations

from simulator.validation.collectives import read_table

A100_TABLE = "a100_sxm4_80gb_1node_8gpu.csv"


def a100_mpirun_rows() -> list[dict[str, str]]:
    """The 30 rows of the 8x A100 ``mpirun -np 8`` run (run 2) of the shipped table."""
    return [r for r in read_table(A100_TABLE) if "run 2" in r["source"]]


def render_nccl_tests_log(
    rows: list[dict[str, str]],
    *,
    binary: str = "all_reduce_perf",
    nranks: int = 8,
    gpus_per_thread: int = 1,
    hosts: tuple[str, ...] = ("thanos",),
    device: str = "NVIDIA A100-SXM4-80GB",
    in_place: str = "same",
    redop: str = "sum",
    root: int = -1,
    starting_line: bool = True,
    rank_lines: bool = True,
    noise: bool = True,
) -> str:
    """nccl-tests stdout for ``rows`` (the table's columns). ``in_place``: 'same', 'na' or 'absent'."""
    per_host = nranks // len(hosts)
    lines = []
    if starting_line:
        lines.append(f"# Collective test starting: {binary}")
    lines += [
        f"# nThread 1 nGpus {gpus_per_thread} minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    if rank_lines:
        for rank in range(nranks):
            host = hosts[rank // per_host]
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid {4000 + rank:6d} on {host:>10} device {rank % per_host:2d} "
                f"[0x{7 + 8 * (rank % per_host):02x}] {device}"
            )
    if noise:
        lines.append(f"{hosts[0]}:4000:4000 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>")
        lines.append("1 more process has sent help message help-mpi-btl-openib.txt / no device params found")
    lines += [
        "#",
        "#                                                              out-of-place                       "
        "in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
        "   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
        "  (GB/s)       ",
    ]
    for r in rows:
        size = int(r["size_bytes"])
        out = f"{r['time_us']:>8} {r['algbw_GBps']:>7} {r['busbw_GBps']:>7} {'0':>6}"
        tail = {"same": f" {out}", "na": f" {'N/A':>8} {'N/A':>7} {'N/A':>7} {'N/A':>6}", "absent": ""}[in_place]
        lines.append(f"{size:>12}  {size // 4:>12}  {'float':>8}  {redop:>6}  {root:>6}  {out}{tail}")
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {sum(float(r['busbw_GBps']) for r in rows) / len(rows):.4g}",
        "#",
        f"# Collective test concluded: {binary}",
        "",
    ]
    return "\n".join(lines)
