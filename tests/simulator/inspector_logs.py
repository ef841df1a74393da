"""A small trace in the JSON NCCL's profiler plugin "inspector" writes, to test its reader, `calibrate` and
`validate --data`.

Format: inspector output format "v4.0" as NCCL 2.30.7 writes it (github.com/NVIDIA/nccl, tag v2.30.7-1,
plugins/profiler/inspector/inspector_json.cc: inspectorCommInfoHeader, inspectorCommInfoMetaHeader,
inspectorCompletedColl, inspectorCompletedP2p; README.md "Output Example" and "Output Example Verbose"); 2.28.3
writes the same without the header's comm_name and without p2p_perf objects. One object a line.

The records are made up (not measured): two servers of 8 H100 (16-rank all_reduce, an 8-rank all_gather inside
one server), times of the magnitude nccl-tests shows on such machines. What each group must give is derived in
the tests.
"""

from __future__ import annotations

import json


def _record(rank: int, nranks: int, nnodes: int, coll: str, msg: int, time_us: int, channels: int = 0) -> str:
    perf: dict = {
        "coll": coll,
        "coll_sn": 100 + rank,
        "coll_msg_size_bytes": msg,
        "coll_exec_time_us": time_us,
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": msg / time_us * 1e-3 if time_us else 0.0,
        "coll_busbw_gbs": 0.0,
    }
    if channels:  # verbose output: one kernel event per channel launched
        perf["event_trace_sn"] = {
            "coll_start_sn": 1,
            "coll_stop_sn": 2,
            "kernel_events": [
                {"channel_id": c, "kernel_start_sn": 3 + c, "kernel_stop_sn": 40 + c, "kernel_record_sn": 39 + c}
                for c in range(channels)
            ],
        }
    return json.dumps(
        {
            "header": {
                "id": f"0x{nranks:x}a1",
                "comm_name": "unknown",
                "rank": rank,
                "n_ranks": nranks,
                "nnodes": nnodes,
            },
            "metadata": {
                "inspector_output_format_version": "v4.0",
                "git_rev": "",
                "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": 1790000000000000 + rank,
                "hostname": f"node{rank // 8}",
                "pid": 4000 + rank,
            },
            "coll_perf": perf,
        }
    )


MIB = 1 << 20
# (rank, n_ranks, nnodes, function, coll_msg_size_bytes, coll_exec_time_us, kernel events)
RECORDS = (
    (0, 16, 2, "AllReduce", MIB, 60, 4),
    (8, 16, 2, "AllReduce", MIB, 64, 4),
    (15, 16, 2, "AllReduce", MIB, 58, 0),
    (0, 16, 2, "AllReduce", 4 * MIB, 101, 16),
    (8, 16, 2, "AllReduce", 4 * MIB, 95, 16),
    (0, 16, 2, "AllReduce", 64 * MIB, 560, 0),
    (8, 16, 2, "AllReduce", 64 * MIB, 571, 0),
    (15, 16, 2, "AllReduce", 64 * MIB, 566, 0),
    (0, 16, 2, "AllReduce", 64 * MIB, 0, 0),  # below the clock: skipped
    (0, 8, 1, "AllGather", MIB // 2, 30, 0),
    (1, 8, 1, "AllGather", MIB // 2, 32, 0),
)
P2P = json.dumps(
    {
        "header": {"id": "0x2b", "comm_name": "unknown", "rank": 0, "n_ranks": 2, "nnodes": 2},
        "metadata": {"inspector_output_format_version": "v4.0", "hostname": "node0"},
        "p2p_perf": {"p2p": "Send", "p2p_sn": 7, "p2p_peer": 1, "p2p_msg_size_bytes": MIB, "p2p_exec_time_us": 40},
    }
)


def inspector_trace_text() -> str:
    """The trace: every record of RECORDS one a line, a point-to-point record after the first."""
    lines = [_record(*r) for r in RECORDS]
    return "\n".join(lines[:1] + [P2P] + lines[1:]) + "\n"
