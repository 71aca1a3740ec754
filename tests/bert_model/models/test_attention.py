"""models/attention.py: one attention plan for every layout and kernel.

The dense-mask ``sdpa`` path is the reference. ``flex_attention`` runs on the CPU and must give the same
logits within 1e-5 in fp32, for BERT and ModernBERT (whose local layers attend within a window), padded and
packed. FlashAttention's varlen kernels need a CUDA GPU (``benchmarks/gpu_check.sh`` checks them there); here
their plumbing is checked with a stand-in of the same contract (the segments of ``cu_seqlens``, the window as
``(left, right)``), so that only the kernel itself is left to the GPU.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from batch_factory import loader_batch, shard_rows, tiny_config
from bertprep.bert_model.collate import layout_indices
from bertprep.bert_model.models import attention
from bertprep.bert_model.models.attention import AttentionPlan, configure_attention, resolve_attn_implementation
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(architecture: str) -> PretrainingModel:
    torch.manual_seed(0)
    config = tiny_config(architecture)
    if architecture == "modernbert":  # layers 1 and 2 attend within 8 tokens: rows of up to 40 reach beyond
        config.local_attention = 8
    return PretrainingModel(build_model(config)).eval()


def _batch(packing: bool) -> dict[str, torch.Tensor]:
    return loader_batch(packing, shard_rows(7, seed=0, lengths=(6, 40)))


def _set_kernel(model: PretrainingModel, name: str) -> None:
    for module in model.modules():
        if hasattr(module, "attn_implementation"):
            module.attn_implementation = name


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_flex_attention_gives_the_dense_masks_logits_within_1e_5(architecture, packing):
    model, batch = _model(architecture), _batch(packing)
    with torch.no_grad():
        reference = model(**batch)
        _set_kernel(model, "flex_attention")
        flex = model(**batch)
    real = batch["masked_lm_ids"] != -100
    torch.testing.assert_close(flex.prediction_logits[real], reference.prediction_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(flex.mlm_loss, reference.mlm_loss, atol=1e-5, rtol=1e-5)
    if architecture == "bert":
        torch.testing.assert_close(flex.seq_relationship_logits, reference.seq_relationship_logits, atol=1e-5, rtol=0)


def _reference_varlen(q, k, v, cu_seqlens, max_seqlen, dropout_p=0.0, window_size=(-1, -1)):
    """FlashAttention's varlen contract, one segment at a time through SDPA: query i of a segment sees the keys
    j of the same segment with i - left <= j <= i + right (-1 = no limit)."""
    assert cu_seqlens.dtype == torch.int32 and int(cu_seqlens[-1]) == q.size(0)
    assert max_seqlen >= int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for a, b in itertools.pairwise(bounds):
        index = torch.arange(b - a)
        offset = index[:, None] - index[None, :]  # (i - j)
        left, right = (b - a if w < 0 else w for w in window_size)
        mask = (offset <= left) & (-offset <= right)
        y = F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v)), attn_mask=mask)
        out[a:b] = y.transpose(0, 1)
    return out


@pytest.mark.parametrize("window", [None, 8])
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_the_varlen_plumbing_attends_as_the_dense_mask(monkeypatch, window, packing):
    """The segments the loader computes, the (B * T) view and the window reach the kernel as FlashAttention
    reads them: a stand-in of the kernel's contract gives the dense path's outputs at every real token."""
    monkeypatch.setattr(attention, "flash_varlen_attention", _reference_varlen)
    batch = _batch(packing)
    B, T = batch["input_ids"].shape
    q, k, v = (torch.randn(B, T, 2, 16) for _ in range(3))
    layout = {"attention_mask": batch["attention_mask"], "sequence_ids": batch.get("sequence_ids")}
    dense = AttentionPlan.build("sdpa", batch["input_ids"], **layout).attend(q, k, v, window, 0.0)
    plan = AttentionPlan.build("varlen", batch["input_ids"], **layout, cu_seqlens=batch["cu_seqlens"])
    varlen = plan._varlen(q, k, v, window, 0.0, "varlen")
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(varlen[real], dense[real], atol=1e-6, rtol=1e-6)
    # Without the loader's segments the plan finds the same ones on the device.
    derived = AttentionPlan.build("varlen", batch["input_ids"], **layout)
    torch.testing.assert_close(derived._segments(), batch["cu_seqlens"])


def test_a_flash_kernel_in_fp32_falls_back_to_the_dense_mask(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("FlashAttention has no fp32 path")

    monkeypatch.setattr(attention, "flash_varlen_attention", must_not_run)
    model, batch = _model("modernbert"), _batch(True)
    with torch.no_grad():
        reference = model(**batch)
        _set_kernel(model, "varlen")
        out = model(**batch)
    torch.testing.assert_close(out.prediction_logits, reference.prediction_logits, atol=0, rtol=0)


def test_layout_indices_of_a_padded_batch():
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    out = layout_indices(mask - 1)
    assert out["cu_seqlens"].tolist() == [0, 3, 4, 8, 9, 12] and out["cu_seqlens"].dtype == np.int32
    assert out["sequence_starts"].tolist() == [0, 4, 8]


def test_auto_is_sdpa_on_the_cpu_and_flash_kernels_are_refused_there():
    cpu = torch.device("cpu")
    assert resolve_attn_implementation("auto", cpu, half_precision=True) == "sdpa"
    assert resolve_attn_implementation("flex_attention", cpu, half_precision=False) == "flex_attention"
    with pytest.raises(ValueError, match=r"needs a CUDA device, not cpu; use sdpa$"):  # (flex cannot train there)
        resolve_attn_implementation("varlen", cpu, half_precision=True)
    with pytest.raises(ValueError, match="must be one of"):
        resolve_attn_implementation("flash", cpu, half_precision=True)


def test_flex_attention_refuses_a_model_that_trains_with_attention_dropout():
    model = _model("bert").train()
    with pytest.raises(ValueError, match=r"no attention dropout.*--attention-probs-dropout-prob 0"):
        configure_attention(model, "flex_attention", torch.device("cpu"), half_precision=False)
    model.eval()
    assert configure_attention(model, "flex_attention", torch.device("cpu"), half_precision=False) == "flex_attention"


def test_flex_attention_is_refused_for_training_on_the_cpu_and_kept_for_inference():
    """PyTorch has no flex attention backward on the CPU: before, training failed at its first step with a
    NotImplementedError traceback, leaving an empty metrics.jsonl."""
    model = _model("bert")
    for module in model.modules():
        if hasattr(module, "dropout_p"):
            module.dropout_p = 0.0
    model.train()
    with pytest.raises(ValueError, match=r"flex_attention cannot train on the CPU.*use sdpa"):
        configure_attention(model, "flex_attention", torch.device("cpu"), half_precision=False)
    model.eval()
    assert configure_attention(model, "flex_attention", torch.device("cpu"), half_precision=False) == "flex_attention"


def test_train_with_flex_attention_on_the_cpu_is_one_line_and_leaves_no_run_folder(tiny_shards, tmp_path):
    from click.testing import CliRunner

    from bertprep.cli.main import cli

    out = tmp_path / "run"
    args = ["train", "--shards", str(tiny_shards / "train"), "-o", str(out), "--preset", "tiny", "--max-steps", "2"]
    args += ["--warmup-steps", "0", "--attention-probs-dropout-prob", "0", "--attn-implementation", "flex_attention"]
    result = CliRunner().invoke(cli, [*args, "--no-progress", "--device", "cpu", "--num-workers", "0"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: --attn-implementation flex_attention cannot")
    assert not out.exists()  # no empty metrics.jsonl


def test_the_kernel_is_logged_once(caplog):
    attention._log_kernel_once.cache_clear()
    model, batch = _model("bert"), _batch(False)
    with caplog.at_level(logging.INFO, logger="bertprep.attention"), torch.no_grad():
        model(**batch)
        model(**batch)
    assert [r.getMessage() for r in caplog.records if r.name == "bertprep.attention"] == [
        "attention kernel: sdpa on cpu"
    ]
