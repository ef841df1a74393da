"""Pipeline parallelism: the order of forward (F) and backward (B) passes on each stage, and the transfers of
activations and their gradients between stages. Pure data.

Schedules (:func:`pipeline_schedule`), for p stages, m micro-batches, stage s:

* GPipe: F0 .. F(m-1), then B(m-1) .. B0 (backward in reverse order, as torchgpipe).
* 1F1B (PipeDream-Flush, Narayanan et al. SC21 sec. 2.2.1): warm-up min(p - s - 1, m) forwards, then
  m - warm-up pairs (F, B), then the remaining backwards. Balanced stages of forward f and backward b
  per micro-batch take (m + p - 1)(f + b): the bubble is (p - 1)(f + b).
* Interleaved 1F1B (SC21 sec. 2.2.2, Megatron's forward_backward_pipelining_with_interleaving): v
  model chunks per stage, virtual stage c p + s; forward step k runs micro-batch (k // pv) p + k % p
  of chunk (k % pv) // p (chunks reversed for backward); warm-up (p - s - 1) 2 + (v - 1) p steps (all
  m v when m = p); the bubble shrinks to (p - 1)(f + b) / v.

Transfers: the activation of a micro-batch leaving virtual stage j and its gradient coming back, s b h D / c
bytes each, divided by t with sequence parallelism or SC21's scatter/gather (then the receiver all-gathers
the t slices over NVLink: an all_gather of s b h D / c in its tensor group). Each transfer is
ONE-DIRECTIONAL: an ``alltoall`` over the 2-rank group (sender, receiver) whose split matrix is
[[0, S], [0, 0]], so ``Collective.nbytes`` = S, exactly the bytes that cross. Sends and receives are
blocking as in Megatron: a send is issued when its producing pass ends and the next pass waits for it; a
receive is posted when the pass before its consumer ends, and the consumer waits for it. The interleaved
schedule runs its steady-state (F, B) pairs back to back and exchanges after the pair (Megatron's
send_forward_backward_recv_forward_backward): there F's sends block the pass after B, and a backward's
receive is posted with the pair before. Sends and receives towards the two neighbours run on separate
streams (4-7), so Megatron's batched send/recv calls progress together; these rules reproduce its ordering
and never deadlock (checked for every schedule in the tests). With ``overlap_p2p_comm`` (interleaved schedule,
Megatron's non-blocking isend/irecv with wait handles) a pass's sends are waited for by the next pass of the
same phase, not the next pass, and a steady-state forward's receive is posted when the forward before it ends,
so both run beside the backward between them (Megatron waits for the forward handles before the next forward,
the backward handles before the next backward); the warm-up and cool-down keep their order (Megatron overlaps
them only with --overlap-p2p-communication-warmup-flush, not modelled).

Representative transfers (``tensor_rank0_p2p=True``, t > 1): only tensor rank 0 of a stage boundary sends
and receives; its collective stands for the t identical transfers (``collective_weights``). Exact by symmetry
when the t pairs use disjoint paths (tensor ranks inside a server, rail-optimised fabric: rank i's transfer
uses rail i) and tensor-parallel collectives in every pass re-synchronise the tensor group (they do for
t > 1); the other t - 1 transfers' link bytes are then not counted by the network model.

Worked number: s 2048, b 1, h 4096, bf16 (D 2 B): one activation is 2048 x 1 x 4096 x 2 = 16,777,216 B
(16 MiB) per micro-batch and boundary, 2 MiB with t = 8 and sequence parallelism. 1F1B on p = 4 stages with
m = 8 micro-batches of f = 1 ms and b = 2 ms per stage takes (8 + 4 - 1)(1 + 2) = 33 ms on an infinitely
fast network, a bubble of (4 - 1)(1 + 2) = 9 ms; interleaved with v = 2 chunks per stage, 24 + 9 / 2 = 28.5 ms.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from topologies.checks import integer, reject

from ..collectives import Collective, CollectiveKind
from .common import STREAM_RECV_NEXT, STREAM_RECV_PREV, STREAM_SEND_NEXT, STREAM_SEND_PREV

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("pipeline_schedule", "stage_of_chunk", "Pipeline")


def pipeline_schedule(
    schedule: str, *, pp: int, stage: int, microbatches: int, vp: int = 1
) -> tuple[tuple[str, int, int], ...]:
    """The passes stage ``stage`` runs, in order: ("F" or "B", micro-batch, model chunk).

    >>> [f"{p}{m}" for p, m, _ in pipeline_schedule("1f1b", pp=4, stage=1, microbatches=4)]
    ['F0', 'F1', 'F2', 'B0', 'F3', 'B1', 'B2', 'B3']
    """
    pp = integer("pp", pp, low=1)
    microbatches = integer("microbatches", microbatches, low=1)
    vp = integer("vp", vp, low=1)
    stage = integer("stage", stage, low=0, high=pp - 1, expected=f"an integer in 0..{pp - 1}")
    m = microbatches
    if schedule == "gpipe" or (schedule == "1f1b" and vp == 1):
        if vp != 1:
            raise reject("vp", vp, "1 with the gpipe schedule")
        if schedule == "gpipe":
            return tuple(("F", i, 0) for i in range(m)) + tuple(("B", i, 0) for i in reversed(range(m)))
        warmup = min(pp - stage - 1, m)
        order = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i, 0), ("B", i, 0)]
        order += [("B", i, 0) for i in range(m - warmup, m)]
        return tuple(order)
    if schedule != "interleaved":
        raise reject("schedule", schedule, "one of 'gpipe', '1f1b', 'interleaved'")
    if m % pp:
        raise reject("microbatches", m, f"a multiple of pp ({pp}) for the interleaved schedule")
    total = m * vp
    warmup = total if m == pp else min((pp - stage - 1) * 2 + (vp - 1) * pp, total)

    def chunk(k: int, forward: bool) -> int:
        c = (k % (pp * vp)) // pp
        return c if forward else vp - 1 - c

    def micro(k: int) -> int:
        return (k // (pp * vp)) * pp + k % pp

    order = [("F", micro(k), chunk(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        k = warmup + i
        order += [("F", micro(k), chunk(k, True)), ("B", micro(i), chunk(i, False))]
    order += [("B", micro(k), chunk(k, False)) for k in range(total - warmup, total)]
    return tuple(order)


def stage_of_chunk(virtual_stage: int, pp: int) -> tuple[int, int]:
    """(pipeline rank, model chunk) of virtual stage j: chunk j // p on rank j % p (Megatron interleaving)."""
    return virtual_stage % pp, virtual_stage // pp


class Pipeline:
    """The pipeline dimension of one build: each stage's schedule (built once per stage) and the transfers a
    rank program (``program._RankProgram``) makes around its passes."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        model, spec, seq = b.model, b.spec, b.seq
        self.tensor_rank0_p2p = b.tensor_rank0_p2p
        # pipeline transfers: s b h D / c, split over t by sequence parallelism or SC21's scatter/gather (then the
        # receiver all-gathers the full tensor in its tensor group)
        self.scatter_gather = spec.tp > 1 and spec.scatter_gather and not spec.sp
        self.nbytes = model.pp_activation_bytes(
            micro_batch=spec.micro_batch,
            seq_len=seq,
            tp=spec.tp,
            sp=spec.sp,
            cp=spec.cp,
            scatter_gather=self.scatter_gather,
        )
        self.full_bytes = (
            model.pp_activation_bytes(micro_batch=spec.micro_batch, seq_len=seq, tp=spec.tp, cp=spec.cp)
            if self.scatter_gather
            else None
        )
        self._schedules: dict[int, tuple[tuple[tuple[str, int, int], ...], dict[int, int]]] = {}

    def schedule(self, stage: int) -> tuple[tuple[tuple[str, int, int], ...], dict[int, int]]:
        """The passes of ``stage`` (:func:`pipeline_schedule`) and the index of each chunk's last backward."""
        entry = self._schedules.get(stage)
        if entry is None:
            spec = self.b.spec
            ops = pipeline_schedule(spec.schedule, pp=spec.pp, stage=stage, microbatches=self.b.m, vp=spec.vp)
            last_b: dict[int, int] = {}
            for i, (phase, _, chunk) in enumerate(ops):
                if phase == "B":
                    last_b[chunk] = i
            entry = self._schedules[stage] = (ops, last_b)
        return entry

    def p2p(self, key: Hashable, src: int, dst: int, nbytes: int, name: str) -> int:
        """The one-directional transfer of ``nbytes`` from ``src`` to ``dst`` (module docstring)."""
        b = self.b

        def make() -> Collective:
            return Collective(
                kind=CollectiveKind.ALL_TO_ALL,
                nbytes=nbytes,
                group=(src, dst),
                dtype=b.act_dtype,
                splits=((0, nbytes), (0, 0)),
            )

        return b.collective(key, make, "pp", name, weight=b.spec.tp if self.tensor_rank0_p2p else 1)

    @staticmethod
    def peer(rp: _RankProgram, virtual_stage: int) -> int:
        """The rank holding ``virtual_stage`` in ``rp``'s pipeline (``rp`` itself for its own virtual stages)."""
        stage, _ = stage_of_chunk(virtual_stage, rp.b.spec.pp)
        return rp.pp_group[stage]  # pipeline groups list their members stage 0 first

    def transfers(self, rp: _RankProgram) -> bool:
        """Whether ``rp`` moves its pipeline tensors itself (False: tensor rank 0 stands for it)."""
        return not self.tensor_rank0_p2p or bool(rp.ask("first", "tp"))

    def recv(self, rp: _RankProgram, mb: int, v_from: int, direction: str, label: str, post: tuple[int, ...]) -> None:
        """Receive the activation (forward) or gradient (backward) of ``mb`` from virtual stage v_from."""
        b = self.b
        if self.transfers(rp):
            key = ("pp", direction, mb, v_from, rp.pp_group)
            v_to = v_from + 1 if direction == "act" else v_from - 1
            index = self.p2p(
                key,
                self.peer(rp, v_from),
                self.peer(rp, v_to),
                self.nbytes,
                f"pp {direction} mb{mb} v{v_from}->v{v_to}",
            )
            stream = STREAM_RECV_PREV if direction == "act" else STREAM_RECV_NEXT
            task = rp.prog.side(index, f"pp recv {direction} {label}", stream, post)
            rp.prog.pending.append(task)
        if self.scatter_gather:
            full_bytes = self.full_bytes
            assert full_bytes is not None  # computed with scatter_gather
            tp_group = rp.group("tp")
            gi = b.simple(
                ("pp-gather", direction, mb, v_from, tp_group),
                CollectiveKind.ALL_GATHER,
                full_bytes,
                tp_group,
                b.act_dtype,
                "tp",
                f"pp allgather {direction} mb{mb}",
            )
            rp.prog.add_comm(gi, f"pp allgather {direction} {label}")

    def send(self, rp: _RankProgram, mb: int, v: int, direction: str, label: str) -> list[int]:
        """Send the activation (forward) or gradient (backward) of ``mb`` leaving virtual stage v; returns the
        send tasks (the next pass waits for them: blocking sends)."""
        if not self.transfers(rp):
            return []
        v_to = v + 1 if direction == "act" else v - 1
        dst = self.peer(rp, v_to)
        key = ("pp", direction, mb, v, rp.pp_group)
        index = self.p2p(key, self.peer(rp, v), dst, self.nbytes, f"pp {direction} mb{mb} v{v}->v{v_to}")
        stream = STREAM_SEND_NEXT if direction == "act" else STREAM_SEND_PREV
        return [rp.prog.side(index, f"pp send {direction} {label}", stream, rp.prog.last0)]
