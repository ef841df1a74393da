"""The DGX Cloud H100 BF16 recipe check (simulator.validation.dgxc)."""

from __future__ import annotations

import pytest

from simulator.validation.dgxc import DGXC_MODELS, dgxc_cases, dgxc_check, dgxc_layout, format_dgxc
from simulator.validation.dgxc import main as _main


def test_the_table_holds_every_layout_with_its_step_time_and_mfu():
    cases = dgxc_cases()
    assert {c.model for c in cases} == set(DGXC_MODELS)
    # the measured MFU follows from the step time: MFU x step time is the same within one weak-scaling series
    # (equal FLOPs per GPU), to the three printed digits
    for c in cases:
        assert 0.4 < c.measured_mfu < 0.7 and c.measured_step_s > 0
        assert c.gpus == c.tp * c.pp * c.cp * c.dp
    eight = [c for c in cases if c.model == "Llama 3.1 8B" and c.gpus == 8]
    assert [(c.version, c.measured_step_s, c.measured_mfu) for c in eight] == [
        ("v24.11.1", 12.91, 0.5937),
        ("v25.04.01", 12.27, 0.6247),
    ]


def test_layouts_follow_the_recipes():
    by_key = {(c.version, c.model, c.gpus): c for c in dgxc_cases() if not c.proxy}
    # 405B on p 8 x v 8 = 64 chunks: 126 layers + embedding + loss = 128 fill them two by two
    model, spec = dgxc_layout(by_key["v25.04.01", "Llama 3.1 405B", 512])
    assert spec.account_for_embedding_in_pipeline_split and spec.account_for_loss_in_pipeline_split
    assert spec.schedule == "interleaved" and spec.sequence_parallel and spec.zero == 1
    # NeMo's recipes: distributed optimizer with both overlaps, TP communication overlap, fp32 Llama gradients
    assert spec.dp_overlap and spec.overlap_param_gather and spec.tp_comm_overlap and not spec.grad_reduce_in_bf16
    assert spec.overlap_p2p_comm  # NeMo's callback with vp > 1
    _, spec = dgxc_layout(by_key["v24.11.1", "GPT3-175B", 128])
    assert spec.tp_comm_overlap and spec.grad_reduce_in_bf16  # its performance recipe reduces bf16 gradients
    # p 9 x v 7 = 63 chunks of 2 layers: no accounting
    _, spec = dgxc_layout(by_key["v24.11.1", "Llama 3.1 405B", 576])
    assert not spec.account_for_embedding_in_pipeline_split
    _, spec = dgxc_layout(by_key["v24.11.1", "Llama 3.1 8B", 8])
    assert (spec.tp, spec.cp, spec.dp, spec.schedule, spec.sequence_parallel) == (1, 2, 4, "1f1b", False)
    assert not spec.tp_comm_overlap and spec.overlap_param_gather
    proxy = next(c for c in dgxc_cases() if c.proxy)
    assert dgxc_layout(proxy)[0].layers == proxy.layers < model.layers


def test_llama_8b_on_one_server_within_ten_percent():
    rows = dgxc_check(models=("Llama 3.1 8B",), max_gpus=8)
    assert [r.case.version for r in rows] == ["v24.11.1", "v25.04.01"]
    for r in rows:
        # the bound: the two releases measure the same layout 12.91 and 12.27 s apart (5.2 %), and the model
        # sits between them (-6.0 % and -1.1 %): 10 % is that spread with room for the later release's gain
        assert abs(r.error) <= 0.10
        # NVIDIA's MFU moves inversely with the step time; the simulator's own MFU counts the same FLOPs
        assert r.predicted_mfu * r.predicted_step_s == pytest.approx(r.case.measured_mfu * r.case.measured_step_s)
        assert r.simulator_mfu == pytest.approx(r.predicted_mfu, rel=0.01)
    text = format_dgxc(rows)
    assert "mean |error|" in text and "Llama 3.1 8B" in text


def test_bad_selection(capsys):
    with pytest.raises(ValueError, match=r"models: 'Llama 2' is not allowed"):
        dgxc_check(models=("Llama 2",))
    with pytest.raises(ValueError, match=r"models: 'GPT3-175B' is not allowed"):
        dgxc_check(models="GPT3-175B")
    with pytest.raises(SystemExit):
        _main(["--models", "Llama 2"])
    assert "models: 'Llama 2' is not allowed" in capsys.readouterr().err
