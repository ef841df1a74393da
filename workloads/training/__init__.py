"""One training step as per-rank programs, one module per parallelism dimension. Pure data.

``program`` (the builder: walks each rank's schedule and asks every dimension for its tasks), ``pipeline``
(schedules and stage-to-stage transfers), ``data_parallel`` (gradient buckets, ZeRO/FSDP, optimizer),
``tensor_parallel`` (TP/SP collectives per layer), ``context_parallel`` (ring attention), ``expert_parallel``
(MoE all-to-alls), ``compute`` (the work a compute task carries and the table that times it), ``common``
(streams, element types, the result type).
"""

from .common import (
    GRANULARITIES,
    GROUP_TAGS,
    PARTS,
    STREAM_COMPUTE,
    STREAM_CP,
    STREAM_DP,
    STREAM_NAMES,
    STREAM_PARAM,
    STREAM_RECV_NEXT,
    STREAM_RECV_PREV,
    STREAM_SEND_NEXT,
    STREAM_SEND_PREV,
    STREAM_TP,
    TrainingWorkload,
    gradient_bytes_per_param,
)
from .compute import PassWork, StepCompute, resolve
from .pipeline import pipeline_schedule, stage_of_chunk
from .program import training_step
from .tensor_parallel import TP_OVERLAP, TP_OVERLAP_BACKWARD, TP_OVERLAP_FORWARD, TpOverlap

__all__ = (
    "STREAM_COMPUTE",
    "STREAM_DP",
    "STREAM_PARAM",
    "STREAM_CP",
    "STREAM_SEND_NEXT",
    "STREAM_RECV_PREV",
    "STREAM_SEND_PREV",
    "STREAM_RECV_NEXT",
    "STREAM_TP",
    "STREAM_NAMES",
    "GRANULARITIES",
    "GROUP_TAGS",
    "PARTS",
    "PassWork",
    "StepCompute",
    "TrainingWorkload",
    "pipeline_schedule",
    "resolve",
    "stage_of_chunk",
    "training_step",
    "TP_OVERLAP",
    "TP_OVERLAP_FORWARD",
    "TP_OVERLAP_BACKWARD",
    "TpOverlap",
    "gradient_bytes_per_param",
)
