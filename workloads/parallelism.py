"""How a training job is split over GPUs: the parallelism layout and its process groups. Pure data.

A :class:`ParallelismSpec` holds the sizes of the five kinds of parallelism and the step's shape:

* tensor parallelism t (``tp``): each layer's GEMMs split over t GPUs (Megatron-LM);
* pipeline parallelism p (``pp``) with ``vp`` virtual stages per GPU (interleaved 1F1B);
* context parallelism c (``cp``): the sequence split over c GPUs (ring attention);
* data parallelism d (``dp``): replicas of the model, gradients averaged; ZeRO stage 0-3 / FSDP;
* expert parallelism e (``ep``) and expert tensor parallelism (``etp``, Megatron-Core's
  ``expert_tensor_parallel_size``, None = t, its default): the MoE layers regroup the t x c x d ranks of each
  pipeline stage as etp x e x edp ("MoE parallel folding", Megatron-Core >= 0.10): each expert's weights split
  over etp GPUs, the experts over e GPUs, edp = t c d / (etp e) copies averaging their gradients.

The world is t x c x d x p GPUs (ep does not multiply it). With ``dp=None`` it is derived from
``gpus``: d = gpus / (t c p). A step runs ``global_batch`` sequences as m = B / (d b) micro-batches
of ``micro_batch`` sequences on every replica.

Rank numbering follows Megatron-Core's ``RankGenerator``: ``order`` lists the dimensions from the
fastest-varying (innermost) to the slowest, default ``"tp-cp-ep-dp-pp"``, so the t ranks of a
tensor-parallel group are consecutive (one NVLink server) and pipeline stages are furthest apart::

    rank = i_tp + t (i_cp + c (i_dp + d i_pp))          (order tp-cp-dp-pp; ep is not a dimension of
                                                          the dense layers)

Expert groups (megatron/core/parallel_state.py, initialize_model_parallel: a second RankGenerator,
``expert_decoder_rank_generator``, of tp = expert_tensor_parallel_size, ep, dp = world / (etp ep pp), pp and
cp = 1, on the same ``order``; the pipeline groups of both generators must be equal). With etp = t (the
default) this is: among the d c ranks of one (tensor, pipeline) coordinate, sorted by rank, consecutive blocks
of e ranks form the expert-parallel groups; the expert-data-parallel group of a rank are the ranks at the same
position of the other blocks (they hold the same experts and average their gradients); the expert
tensor-parallel group is the tensor group. With etp != t the expert generator's numbering, order "tp-ep-dp-pp"
for the default order (cp dropped: size 1)::

    rank = i_etp + etp (i_ep + e (i_edp + edp i_pp))

Worked number (folding): t 2, d 4, p 1, e 8, etp 1: edp = 2 x 4 / 8 = 1, one expert-parallel group 0..7
(it spans both tensor ranks of every replica), the expert tensor-parallel groups are single ranks, and
the expert-data-parallel groups too (every expert once in the world).

Worked number (SC21 Table 1, GPT-145.6B): 1536 GPUs, t 8, p 8 -> d = 1536 / 64 = 24; B 2304, b 2 ->
m = 2304 / 48 = 48 micro-batches; rank 100 = 4 + 8 (12 + 24 x 0): tensor rank 4, data-parallel rank
12, stage 0; its tensor group is 96..103, its pipeline group 100, 292, ..., 1444 (stride t d = 192).

Every MoE layout (e > 1 or etp != t) takes its expert groups from that generator, so a non-default order places
``ep`` as Megatron does; Megatron's order checks apply (an order must name ep when e > 1, both generators' pipeline
groups must be equal, and an order not ending in pp needs edp = d when p > 1).

What is ignored here: heterogeneous stage sizes, uneven micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.checks import finite_nonnegative, flag, integer, is_int, option, reject

from .model import ModelSpec
from .options import CpCommType, Dtype, PipelineSchedule, names

__all__ = (
    "SCHEDULES",
    "DTYPES",
    "GROUP_KINDS",
    "DEFAULT_ORDER",
    "DDP_BUCKET_BYTES",
    "MCORE_BUCKETS",
    "RankCoords",
    "ParallelismSpec",
)

# the largest parallel size, batch or sequence a ParallelismSpec takes (2^24: 16M GPUs, sequences or tokens)
MAX_COUNT = 1 << 24
SCHEDULES = names(PipelineSchedule)
DTYPES = names(Dtype)
# Process-group kinds: the five parallelisms, the gradient-averaging group of dense weights (data x
# context parallel ranks hold the same dense weights; Megatron-Core reduces over that group) and the
# expert-data-parallel group that averages expert gradients, and the expert tensor-parallel group ("etp") that
# splits each expert's weights (Megatron-Core get_expert_tensor_parallel_group).
GROUP_KINDS = ("tp", "cp", "ep", "dp", "pp", "dp_cp", "edp", "etp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"  # Megatron-Core parallel_state.initialize_model_parallel default order
# PyTorch DistributedDataParallel bucket_cap_mb = 25, converted as bucket_cap_mb * 1024 * 1024 bytes
# (torch/nn/parallel/distributed.py): 25 MiB.
DDP_BUCKET_BYTES = 25 * 1024 * 1024
# Megatron-Core's gradient buckets (the default ``bucket_bytes``): DistributedDataParallelConfig.bucket_size
# None becomes max(40,000,000, 1,000,000 x data-and-context-parallel size) parameters ("larger DP sizes need
# larger buckets to ensure collectives do not become latency-bound", distributed_data_parallel_config.py and
# distributed_data_parallel.py); one bucket without overlap_grad_reduce, and one per model chunk after the
# first (get_model: disable_bucketing=(model_chunk_idx > 0), "overlapped with compute anyway").
MCORE_BUCKETS = "megatron-core"
MCORE_BUCKET_MIN_PARAMS = 40_000_000
MCORE_BUCKET_PARAMS_PER_DP = 1_000_000

_DENSE_DIMS = ("tp", "cp", "dp", "pp")


def _reject(field: str, value: object, expected: str) -> ValueError:
    return reject(f"ParallelismSpec.{field}", value, expected)


@dataclass(frozen=True, slots=True)
class RankCoords:
    """Where one rank sits: its index in each dimension (``ep`` = position of its expert group block,
    ``ep_rank`` = its index inside the expert-parallel group)."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    ep_rank: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelismSpec:
    """A training layout. See the module docstring for the meaning of each size.

    >>> p = ParallelismSpec(tp=8, pp=8, gpus=1536, micro_batch=2, global_batch=2304)
    >>> p.dp, p.microbatches, p.world_size
    (24, 48, 1536)
    """

    tp: int = 1
    pp: int = 1
    dp: int = None  # type: ignore[assignment]  # None: gpus / (tp x cp x pp), filled in by __post_init__
    cp: int = 1
    ep: int = 1
    # Megatron-Core --expert-tensor-parallel-size (ModelParallelConfig.expert_tensor_parallel_size; None = tp,
    # parallel_state.initialize_model_parallel: "if expert_tensor_parallel_size is None: ... = tensor_model_
    # parallel_size"): the GPUs each expert's weights are split over, regrouping each stage's t c d ranks as
    # etp x ep x edp for the MoE layers ("MoE parallel folding"); the resolved value is ``expert_tp``
    etp: int | None = None
    vp: int = 1  # model chunks (virtual stages) per pipeline rank, interleaved 1F1B
    gpus: int | None = None
    zero: int = 0  # ZeRO stage 0-3 (3 = parameters sharded too, like FSDP)
    fsdp: bool = False  # PyTorch FSDP FULL_SHARD: ZeRO-3 semantics
    micro_batch: int = 1  # sequences per micro-batch (b)
    global_batch: int = None  # type: ignore[assignment]  # sequences per step (B); None: dp x micro_batch
    seq_len: int | None = None  # None = the model's
    schedule: str = "1f1b"
    sequence_parallel: bool = False
    scatter_gather: bool = True  # SC21 sec. 4.1: send 1/t of the activation, all-gather over NVLink
    # bytes per gradient bucket; None = one bucket of all gradients; MCORE_BUCKETS = Megatron-Core's default
    bucket_bytes: int | str | None = MCORE_BUCKETS
    dp_overlap: bool = True  # reduce gradient buckets during the backward (DDP); False = after it
    # Megatron-Core --overlap-param-gather (default off): with the distributed optimizer (ZeRO 1/2) the updated
    # parameters are all-gathered bucket by bucket at the start of the next step, each bucket before the first
    # forward that uses it, instead of all after the optimizer (DistributedDataParallelConfig.overlap_param_gather)
    overlap_param_gather: bool = False
    # Megatron-Core DistributedDataParallelConfig.align_param_gather (default off; Megatron-LM's training script
    # on, --no-align-param-gather off; NeMo's MegatronCommOverlapCallback on when d > 1, p > 1 and vp > 1): with
    # overlap_param_gather and the interleaved schedule the schedule dispatches each model chunk's parameter
    # all-gathers itself (config.param_sync_func): chunks 0 and 1 at the step's start, chunk c >= 2 before the
    # forward whose virtual micro-batch k has k + stage = the first of chunk c - 1 (schedules.py,
    # forward_step_helper), instead of every chunk's back to back from the start; interleaved schedule only
    align_param_gather: bool = False
    # Megatron-Core ModelParallelConfig.defer_embedding_wgrad_compute (default off; NeMo's llama3_70b (limit 22),
    # llama31_405b (50), gpt3_175b (50) and nemotron4_340b (22) performance recipes turn it on,
    # MegatronCommOverlapCallback) and wgrad_deferral_limit (default 0: every micro-batch; 0 without the deferral):
    # the last pipeline stage keeps the output layer's weight-gradient GEMM of its first
    # ``wgrad_deferral_limit`` micro-batches and runs them after the schedule, in the pipeline flush
    # (tensor_parallel/layers.py; schedules.py finish_embedding_wgrad_compute); needs p > 1, as Megatron
    defer_embedding_wgrad_compute: bool = False
    wgrad_deferral_limit: int = 0
    # Megatron-Core --grad-reduce-in-bf16 (default off: bf16 training keeps and reduces fp32 main gradients,
    # accumulate_allreduce_grads_in_fp32); on, the gradient buffers and their reduction are bf16
    grad_reduce_in_bf16: bool = False
    # Megatron-Core --tp-comm-overlap (default off; TransformerConfig.tp_comm_overlap): Transformer Engine's
    # userbuffers overlap the sequence-parallel all-gathers and reduce-scatters with the GEMMs around them
    # (workloads.training.tensor_parallel); needs sequence parallelism, as in Megatron
    tp_comm_overlap: bool = False
    # Megatron's overlap_p2p_comm (interleaved schedule only): stage-to-stage sends do not block the next pass but
    # the next pass of the same phase, and a steady-state forward's receive is posted one pass earlier, beside the
    # backward before it (workloads.training.pipeline). Megatron-Core's ModelParallelConfig default is off;
    # Megatron-LM's training script turns it on for the interleaved schedule (--no-overlap-p2p-communication
    # turns it off) and NeMo's MegatronCommOverlapCallback on when vp > 1
    overlap_p2p_comm: bool = False
    # Megatron-Core --cp-comm-type (default "p2p"): ring attention, all-to-all or K/V all-gather
    # (workloads.training.context_parallel); "a2a+p2p" (hierarchical) is not modelled
    cp_comm_type: str = "p2p"
    order: str = DEFAULT_ORDER
    dtype: str = "bf16"
    ep_imbalance: float = 0.0  # busiest expert-parallel rank receives (1 + x) x the average tokens
    # the embedding (loss) counts as a layer when the layers are split over pipeline stages, so the first (last)
    # stage holds one transformer layer fewer: Megatron-Core --account-for-embedding-in-pipeline-split
    # (--account-for-loss-in-pipeline-split); with both, Llama 3 405B's 126 layers + 2 fill pp 16 x vp 8 chunks
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    def __post_init__(self) -> None:
        # numpy integers are stored as ints, option names as their enum members (checks.option)
        for name in ("tp", "pp", "cp", "ep", "vp", "micro_batch"):
            object.__setattr__(
                self, name, integer(f"ParallelismSpec.{name}", getattr(self, name), low=1, high=MAX_COUNT)
            )
        for name in ("dp", "gpus", "global_batch", "seq_len", "etp"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or not 1 <= value <= MAX_COUNT):
                raise _reject(name, value, f"None or an integer from 1 to {MAX_COUNT}")
            object.__setattr__(self, name, None if value is None else int(value))
        if not is_int(self.zero) or not 0 <= self.zero <= 3:
            raise _reject("zero", self.zero, "0, 1, 2 or 3")
        object.__setattr__(self, "zero", int(self.zero))
        for name in (
            "fsdp",
            "sequence_parallel",
            "scatter_gather",
            "dp_overlap",
            "overlap_param_gather",
            "align_param_gather",
            "defer_embedding_wgrad_compute",
            "grad_reduce_in_bf16",
            "tp_comm_overlap",
            "overlap_p2p_comm",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ):
            object.__setattr__(self, name, flag(f"ParallelismSpec.{name}", getattr(self, name)))
        if self.fsdp and self.zero not in (0, 3):
            raise _reject("zero", self.zero, "0 or 3 with fsdp=True (FSDP full sharding is ZeRO stage 3)")
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise _reject(
                "tp_comm_overlap",
                True,
                "False without sequence_parallel (Megatron overlaps the sequence-parallel "
                "all-gathers and reduce-scatters only)",
            )
        if self.overlap_param_gather and (self.zero_stage not in (1, 2) or not self.dp_overlap):
            raise _reject(
                "overlap_param_gather",
                True,
                "False unless zero is 1 or 2 (Megatron's distributed optimizer) and dp_overlap is True "
                "(Megatron requires --overlap-grad-reduce with it)",
            )
        object.__setattr__(
            self,
            "wgrad_deferral_limit",
            integer("ParallelismSpec.wgrad_deferral_limit", self.wgrad_deferral_limit, low=0, high=MAX_COUNT),
        )
        if self.defer_embedding_wgrad_compute and self.pp < 2:
            raise _reject(
                "defer_embedding_wgrad_compute", True, "False with pp 1 (Megatron defers it to the pipeline flush)"
            )
        if self.align_param_gather and not self.overlap_param_gather:
            raise _reject(
                "align_param_gather", True, "False without overlap_param_gather (it times the overlapped all-gathers)"
            )
        object.__setattr__(self, "schedule", option("ParallelismSpec.schedule", self.schedule, PipelineSchedule))
        object.__setattr__(self, "dtype", option("ParallelismSpec.dtype", self.dtype, Dtype))
        object.__setattr__(self, "cp_comm_type", option("ParallelismSpec.cp_comm_type", self.cp_comm_type, CpCommType))
        if self.grad_reduce_in_bf16 and self.dtype == "fp16":
            raise _reject("grad_reduce_in_bf16", True, "False with dtype 'fp16' (its gradients are fp16 already)")
        if self.bucket_bytes is not None and self.bucket_bytes != MCORE_BUCKETS:
            if not is_int(self.bucket_bytes) or self.bucket_bytes < 4:
                raise _reject("bucket_bytes", self.bucket_bytes, f"None, {MCORE_BUCKETS!r} or an integer >= 4")
            object.__setattr__(self, "bucket_bytes", int(self.bucket_bytes))
        finite_nonnegative("ParallelismSpec.ep_imbalance", self.ep_imbalance, "a finite number >= 0")
        self._parse_order(self.order)
        if self.overlap_p2p_comm and self.schedule != "interleaved":
            raise _reject(
                "overlap_p2p_comm", True, "False unless schedule is 'interleaved' (Megatron overlaps it there only)"
            )
        if self.align_param_gather and self.schedule != "interleaved":
            raise _reject(
                "align_param_gather",
                True,
                "False unless schedule is 'interleaved' (Megatron's interleaved schedule dispatches the gathers)",
            )
        if self.wgrad_deferral_limit and not self.defer_embedding_wgrad_compute:
            raise _reject(
                "wgrad_deferral_limit",
                self.wgrad_deferral_limit,
                "0 unless defer_embedding_wgrad_compute is True (it limits the deferred micro-batches)",
            )
        if self.schedule == "interleaved":
            if self.vp < 2:
                raise _reject("vp", self.vp, "an integer >= 2 with schedule 'interleaved' (model chunks per stage)")
            if self.pp < 2:
                raise _reject("pp", self.pp, "an integer >= 2 with schedule 'interleaved'")
        elif self.vp != 1:
            raise _reject("vp", self.vp, f"1 with schedule {self.schedule!r}; virtual stages need 'interleaved'")
        inner = self.tp * self.cp * self.pp
        if self.dp is None:
            if self.gpus is None:
                raise _reject("dp", None, "an integer >= 1, or gpus= to derive it as gpus / (tp x cp x pp)")
            if self.gpus % inner:
                raise _reject(
                    "gpus", self.gpus, f"a multiple of tp x cp x pp = {self.tp} x {self.cp} x {self.pp} = {inner}"
                )
            object.__setattr__(self, "dp", self.gpus // inner)
        elif self.gpus is not None and self.gpus != inner * self.dp:
            raise _reject(
                "gpus",
                self.gpus,
                f"tp x cp x dp x pp = {self.tp} x {self.cp} x {self.dp} x {self.pp} = {inner * self.dp}",
            )
        # parallel_state.initialize_model_parallel: "decoder world_size ... is not divisible by
        # expert_tensor_model_pipeline_parallel size" (etp x ep x pp must divide the world: etp x ep | t c d)
        stage = self.tp * self.cp * self.dp
        if stage % (self.expert_tp * self.ep):
            if self.etp is None:
                raise _reject(
                    "ep",
                    self.ep,
                    f"a divisor of dp x cp = {self.dp} x {self.cp} = {self.dp * self.cp} with etp None (= tp: "
                    "expert parallelism carved out of the data/context-parallel ranks); a smaller etp folds "
                    "tensor ranks into it",
                )
            raise _reject(
                "etp",
                self.etp,
                f"a value with etp x ep dividing tp x cp x dp = {self.tp} x {self.cp} x {self.dp} = {stage} "
                f"(ep {self.ep}; Megatron-Core regroups each stage's ranks as etp x ep x edp)",
            )
        if self._expert_generator:
            self._check_expert_order()
        per_step = self.dp * self.micro_batch
        if self.global_batch is None:
            object.__setattr__(self, "global_batch", per_step)
        elif self.global_batch % per_step:
            raise _reject(
                "global_batch",
                self.global_batch,
                f"a multiple of dp x micro_batch = {self.dp} x {self.micro_batch} = {per_step}",
            )
        if self.schedule == "interleaved" and self.microbatches % self.pp:
            raise _reject(
                "global_batch",
                self.global_batch,
                f"a value giving a number of micro-batches divisible by pp ({self.pp}) for the interleaved "
                f"schedule (Megatron's rule); it gives {self.microbatches}",
            )

    # ---- sizes ----------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism in effect: ``etp``, or t when None (Megatron-Core's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: t c d / (etp ep), the copies of each expert shard (parallel_state.py,
        expert_data_parallel_size = decoder world size // (etp x ep x pp))."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def folded(self) -> bool:
        """Whether the MoE layers are regrouped (etp != t): expert groups then cross tensor ranks."""
        return self.expert_tp != self.tp

    @property
    def microbatches(self) -> int:
        """m = B / (d b): micro-batches each replica runs per step."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def aligned_param_gather(self) -> bool:
        """Whether the interleaved schedule dispatches each model chunk's parameter all-gathers itself
        (``align_param_gather``, which __post_init__ accepts with the interleaved schedule only)."""
        return self.align_param_gather and self.schedule == "interleaved"

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage in effect (3 with fsdp=True)."""
        return 3 if self.fsdp else self.zero

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element kept and reduced by the data-parallel reduction: 2 for fp16 training or
        with ``grad_reduce_in_bf16``, else 4 (fp32 main gradients, Megatron's accumulate_allreduce_grads_in_fp32).

        >>> ParallelismSpec(dp=2).grad_bytes, ParallelismSpec(dp=2, grad_reduce_in_bf16=True).grad_bytes
        (4, 2)
        """
        return 2 if self.dtype == "fp16" or self.grad_reduce_in_bf16 else 4

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (it only means something with tp > 1)."""
        return self.sequence_parallel and self.tp > 1

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.vp

    @property
    def split_slots(self) -> tuple[int, int]:
        """(embedding, loss) slots counted as layers when splitting the layers over the pipeline."""
        return (int(self.account_for_embedding_in_pipeline_split), int(self.account_for_loss_in_pipeline_split))

    def chunk_layers(self, model: ModelSpec) -> tuple[range, ...]:
        """Layers of each model chunk (virtual stage), in pipeline order."""
        return model.stage_layers(pp=self.virtual_stages, split_slots=self.split_slots)

    def seq(self, model: ModelSpec) -> int:
        return model.seq_len if self.seq_len is None else self.seq_len

    def bucket_elements(self, chunk: int, grad_bytes: int) -> int | None:
        """Gradient elements per bucket of model chunk ``chunk`` (None: one bucket of all its gradients).

        >>> ParallelismSpec(dp=128).bucket_elements(0, 4)  # max(40e6, 1e6 x 128) parameters
        128000000
        >>> spec = ParallelismSpec(dp=8, pp=2, vp=2, schedule="interleaved", global_batch=16)
        >>> spec.bucket_elements(0, 4), spec.bucket_elements(1, 4)  # max(40e6, 8e6); chunk 1: one bucket
        (40000000, None)
        >>> ParallelismSpec(dp=8, bucket_bytes=2**20).bucket_elements(0, 4)  # 1 MiB of fp32 gradients
        262144
        """
        if self.bucket_bytes is None:
            return None
        if isinstance(self.bucket_bytes, int):
            return max(1, self.bucket_bytes // grad_bytes)
        if not self.dp_overlap or chunk > 0:
            return None
        return max(MCORE_BUCKET_MIN_PARAMS, MCORE_BUCKET_PARAMS_PER_DP * self.dp * self.cp)

    # ---- checks against a model ------------------------------------------------------------------
    def check(self, model: ModelSpec) -> ParallelismSpec:
        """Raise ValueError if this layout cannot run ``model`` (a workloads.model.ModelSpec). Returns self."""
        if self.tp > 1 and (model.heads % self.tp or model.kv_heads % self.tp):
            raise _reject(
                "tp", self.tp, f"a divisor of the model's heads ({model.heads}) and kv_heads ({model.kv_heads})"
            )
        if model.ffn_hidden % self.tp:
            raise _reject("tp", self.tp, f"a divisor of the model's ffn_hidden ({model.ffn_hidden})")
        slots = model.layers + sum(self.split_slots)
        if self.pp * self.vp > slots:
            raise _reject(
                "pp",
                self.pp,
                f"a value with pp x vp = {self.pp} x {self.vp} = {self.pp * self.vp} at "
                f"most the model's layers ({model.layers})"
                + (f" and {slots - model.layers} embedding/loss slots" if slots > model.layers else "")
                + "; chunks get slots // (pp vp) layers, the first slots % (pp vp) one more"
                + (
                    ""
                    if self.split_slots == (1, 1)
                    else " (--account-for-embedding-in-pipeline-split and "
                    "--account-for-loss-in-pipeline-split count the embedding and the loss as a layer each)"
                ),
            )
        s = self.seq(model)
        if s % self.cp:
            raise _reject("cp", self.cp, f"a divisor of seq_len ({s})")
        if (
            self.cp > 1
            and self.cp_comm_type == "a2a"
            and ((model.heads // self.tp) % self.cp or (model.kv_heads // self.tp) % self.cp)
        ):
            raise _reject(
                "cp",
                self.cp,
                f"a divisor of the heads ({model.heads}) and kv_heads ({model.kv_heads}) per tensor rank "
                f"(tp {self.tp}) with cp_comm_type 'a2a' (the all-to-all splits the heads over the context ranks)",
            )
        if self.ep > 1:
            if not model.is_moe:
                raise _reject("ep", self.ep, f"1 for the dense model {model.name!r} (no experts to distribute)")
            if model.experts % self.ep:
                raise _reject("ep", self.ep, f"a divisor of the model's experts ({model.experts})")
        if self.etp is not None and not model.is_moe and self.etp != self.tp:
            raise _reject("etp", self.etp, f"None or tp ({self.tp}) for the dense model {model.name!r}")
        if model.is_moe:
            # each expert's fc1 columns and fc2 rows split over etp (TEGroupedMLP / SequentialMLP with
            # expert_tensor_parallel_size; moe/experts.py)
            fe = model.expert_ffn_hidden or 0
            if fe % self.expert_tp:
                raise _reject(
                    "etp", self.expert_tp, f"a divisor of the model's expert_ffn_hidden ({fe}) (None means tp)"
                )
        if model.is_moe and self.tp > 1 and not self.sequence_parallel:
            raise _reject("sequence_parallel", False, "True for a MoE model with tp > 1 (Megatron requires it)")
        if model.is_moe and self.tp > 1 and self.tp_comm_overlap:
            raise _reject(
                "tp_comm_overlap", True, "False for a MoE model (userbuffers overlap of expert layers is not modelled)"
            )
        return self

    # ---- rank numbering --------------------------------------------------------------------------
    @staticmethod
    def _order_dims(order: str) -> tuple[str, ...]:
        """The dimensions ``order`` names, innermost first, ep included."""
        return tuple(order.strip().lower().split("-"))

    @classmethod
    def _parse_order(cls, order: str) -> tuple[str, ...]:
        if not isinstance(order, str):
            raise _reject("order", order, "a string such as 'tp-cp-ep-dp-pp'")
        dims = cls._order_dims(order)
        dense = tuple(d for d in dims if d != "ep")
        if sorted(dense) != sorted(_DENSE_DIMS) or len(dims) - len(dense) > 1:
            raise _reject(
                "order",
                order,
                "a '-'-joined permutation of tp, cp, dp, pp (and optionally ep), "
                "innermost first, e.g. 'tp-cp-ep-dp-pp'",
            )
        return dense

    def _expert_dims(self) -> tuple[str, ...]:
        """The expert generator's dimensions, innermost first: the order without cp (Megatron passes cp=1), with
        ep appended when the order leaves it out (RankGenerator appends a missing dimension of size 1; one of size
        > 1 is refused by ``_check_expert_order``)."""
        dims = tuple(d for d in self._order_dims(self.order) if d != "cp")
        return dims if "ep" in dims or self.ep > 1 else (*dims, "ep")

    @property
    def _expert_generator(self) -> bool:
        """Whether the expert groups come from Megatron's expert RankGenerator (e > 1 or a folded layout); with
        e = 1 and etp = t they are the trivial ones (single-rank expert groups, the data/context group)."""
        return self.ep > 1 or self.folded

    def _expert_sizes(self) -> dict[str, int]:
        return {"tp": self.expert_tp, "ep": self.ep, "dp": self.edp, "pp": self.pp}

    def _expert_strides(self) -> dict[str, int]:
        return _strides_of(self._expert_dims(), self._expert_sizes())

    def _check_expert_order(self) -> None:
        """Megatron's checks of an MoE layout's order (parallel_state.py): RankGenerator refuses an order
        without a dimension of size > 1, and initialize_model_parallel an order not ending in pp with edp != d at
        p > 1 and an expert generator whose pipeline groups differ from the dense ones."""
        if self.ep > 1 and "ep" not in self._expert_dims():
            raise _reject("order", self.order, f"an order naming ep with ep {self.ep} > 1 (Megatron's RankGenerator)")
        # parallel_state.initialize_model_parallel: "When not using pp-last rank ordering, the data parallel size of
        # the attention and moe layers must be the same"
        if self.pp > 1 and self._order_dims(self.order)[-1] != "pp" and self.edp != self.dp:
            raise _reject(
                "order",
                self.order,
                f"an order ending in pp when the expert layers' data parallelism (edp {self.edp}) differs from the "
                f"dense layers' (dp {self.dp}) at pp {self.pp} (Megatron-Core's rule)",
            )
        strides, sizes = self._expert_strides(), self._expert_sizes()
        expert_pp = sorted(
            tuple(base + i * strides["pp"] for i in range(self.pp))
            for base in (
                sum(v * strides[d] for d, v in zip(("tp", "ep", "dp"), vs))
                for vs in _product([range(sizes[d]) for d in ("tp", "ep", "dp")])
            )
        )
        if expert_pp != self.groups("pp"):
            raise _reject(
                "order",
                self.order,
                f"an order whose expert layers (etp {self.etp}, ep {self.ep}, edp {self.edp}) keep the pipeline "
                "groups of the dense layers (Megatron-Core requires them equal; e.g. pp last)",
            )

    def _sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}

    def _strides(self) -> dict[str, int]:
        return _strides_of(self._parse_order(self.order), self._sizes())

    def rank_of(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """The rank with these coordinates."""
        coords, sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}, self._sizes()
        for dim, value in coords.items():
            if not is_int(value) or not 0 <= value < sizes[dim]:
                raise reject(f"rank_of.{dim}", value, f"an integer in 0..{sizes[dim] - 1}")
        strides = self._strides()
        return sum(coords[d] * strides[d] for d in _DENSE_DIMS)

    def coords(self, rank: int) -> RankCoords:
        """Coordinates of ``rank`` in every dimension."""
        if not is_int(rank) or not 0 <= rank < self.world_size:
            raise reject("rank", rank, f"an integer in 0..{self.world_size - 1}")
        strides, sizes = self._strides(), self._sizes()
        c = {d: (rank // strides[d]) % sizes[d] for d in _DENSE_DIMS}
        # position in the expert block (the d x c ranks of this tensor shard and stage, sorted by rank):
        # the dimension with the larger stride is the more significant one
        inner, outer = sorted(("cp", "dp"), key=lambda d: strides[d])
        position = c[outer] * sizes[inner] + c[inner]
        if self._expert_generator:  # the expert generator's coordinates: ep = its expert-data-parallel index
            es, ez = self._expert_strides(), self._expert_sizes()
            return RankCoords(
                tp=c["tp"],
                cp=c["cp"],
                dp=c["dp"],
                pp=c["pp"],
                ep=(rank // es["dp"]) % ez["dp"],
                ep_rank=(rank // es["ep"]) % ez["ep"],
            )
        return RankCoords(
            tp=c["tp"], cp=c["cp"], dp=c["dp"], pp=c["pp"], ep=position // self.ep, ep_rank=position % self.ep
        )

    def _expert_block(self, tp: int, pp: int) -> list[int]:
        """The d x c ranks holding tensor shard ``tp`` of stage ``pp``, sorted by rank."""
        strides = self._strides()
        base = tp * strides["tp"] + pp * strides["pp"]
        return sorted(base + c * strides["cp"] + d * strides["dp"] for c in range(self.cp) for d in range(self.dp))

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Process groups of ``kind`` (one of GROUP_KINDS): every rank is in exactly one group of each
        kind; members are listed in increasing coordinate (for pp: stage 0 first).

        >>> ParallelismSpec(tp=2, pp=2, dp=2).groups("pp")
        [(0, 4), (1, 5), (2, 6), (3, 7)]
        """
        if kind not in GROUP_KINDS:
            raise ValueError(f"groups.kind: {kind!r} is not known; expected one of {', '.join(GROUP_KINDS)}")
        sizes = self._sizes()
        if kind in _DENSE_DIMS or kind == "dp_cp":
            varying = ("cp", "dp") if kind == "dp_cp" else (kind,)
            fixed = [d for d in _DENSE_DIMS if d not in varying]
            out = []
            strides = self._strides()
            offsets = [
                sum(v * strides[d] for d, v in zip(varying, vs)) for vs in _product([range(sizes[d]) for d in varying])
            ]
            for f in _product([range(sizes[d]) for d in fixed]):
                base = sum(v * strides[d] for d, v in zip(fixed, f))
                out.append(tuple(sorted(base + o for o in offsets)))
            return sorted(out)
        if kind == "etp" and not self._expert_generator:
            return self.groups("tp")
        if self._expert_generator:  # Megatron's expert RankGenerator: get_ranks("ep" | "dp" | "tp")
            dim = {"ep": "ep", "edp": "dp", "etp": "tp"}[kind]
            esizes, estrides = self._expert_sizes(), self._expert_strides()
            fixed = [d for d in ("tp", "ep", "dp", "pp") if d != dim]
            out = []
            for f in _product([range(esizes[d]) for d in fixed]):
                base = sum(v * estrides[d] for d, v in zip(fixed, f))
                out.append(tuple(base + i * estrides[dim] for i in range(esizes[dim])))
            return sorted(out)
        out = []
        for tp in range(self.tp):
            for pp in range(self.pp):
                block = self._expert_block(tp, pp)
                if kind == "ep":
                    out += [tuple(block[i : i + self.ep]) for i in range(0, len(block), self.ep)]
                else:
                    out += [tuple(block[i :: self.ep]) for i in range(self.ep)]
        return sorted(out)

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The group of ``kind`` that holds ``rank``."""
        for group in self.groups(kind):
            if rank in group:
                return group
        raise reject("rank", rank, f"an integer in 0..{self.world_size - 1}")


def _strides_of(dims: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    """RankGenerator's strides: each dimension's the product of the sizes of those inside it (innermost first)."""
    strides, stride = {}, 1
    for dim in dims:
        strides[dim] = stride
        stride *= sizes[dim]
    return strides


def _product(ranges: list[range]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for r in ranges:
        out = [t + (i,) for t in out for i in r]
    return out
