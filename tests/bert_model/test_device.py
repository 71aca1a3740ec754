"""Device-correct by construction: every tensor the models, heads, losses, metrics and optimizer make follows its
inputs' device and dtype.

The proof without a GPU: a whole training step (forward, backward, gradient clipping, AdamW, the metrics' sums)
with the model and the batch on PyTorch's ``meta`` device, where a tensor created on the default (CPU) device
meets a meta tensor and raises ("Tensor on device cpu is not on the expected device meta"). The batches are the
loader's (``collate``), so the padded and packed layouts are both covered, with every pre-training head (BERT's
MLM + NSP, ModernBERT's sparse MLM) and every fine-tuning head of both families. And bf16 autocast on the CPU,
the default dtype left alone: every loss finite and within 2% of fp32's.
"""

from __future__ import annotations

import pytest
import torch

from batch_factory import loader_batch, shard_rows, tiny_config
from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.metrics import PretrainingMetrics
from bertprep.bert_model.models import attention
from bertprep.bert_model.models.attention import AttentionPlan
from bertprep.bert_model.models.heads import HEADS
from bertprep.bert_model.optim import create_optimizer, create_scheduler, optimizer_step
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model
from bertprep.bert_model.tasks.feature_based import (
    BertFeatureBasedForTokenClassification,
    ModernBertFeatureBasedForTokenClassification,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(architecture: str):
    return tiny_config(architecture)


def _rows(n: int = 6, seed: int = 0) -> list[dict]:
    return shard_rows(n, seed)


def _batch(packing: bool) -> dict[str, torch.Tensor]:
    return loader_batch(packing)


def _to(batch: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _assert_all_on(tensors, device: str) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor):
            assert t.device.type == device, t.device


# ------------------------------------------------------------------------------------------------- meta


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_a_pretraining_step_runs_on_the_meta_device(architecture, packing):
    model = build_model(_config(architecture)).to("meta")
    optimizer = create_optimizer(model)
    scheduler = create_scheduler(optimizer, warmup_steps=1, max_steps=10)
    batch = _to(_batch(packing), "meta")
    out = PretrainingModel(model)(**batch)
    loss = out.training_loss(1.0)
    loss.backward()
    _lr, grad_norm = optimizer_step(model, optimizer, scheduler, max_grad_norm=1.0)
    metrics = PretrainingMetrics("meta", mask_token_id=4)
    metrics.update(batch, out)  # the window sums stay on the device
    _assert_all_on([out.prediction_logits, out.mlm_loss, loss, grad_norm, metrics.sums], "meta")
    _assert_all_on(model.parameters(), "meta")
    assert out.prediction_logits.shape[:2] == batch["masked_lm_positions"].shape
    if architecture == "bert":  # one NSP score pair per instance, padded or packed
        assert out.seq_relationship_logits.shape == (6, 2) and out.nsp_loss.device.type == "meta"
    else:
        assert out.seq_relationship_logits is None
    state = optimizer.state[next(iter(model.parameters()))]
    _assert_all_on([state["exp_avg"], state["exp_avg_sq"]], "meta")


# ------------------------------------------------------------------------ the varlen and flex paths' indices
#
# The FlashAttention kernels run only on CUDA, so the meta-device step above goes through sdpa. These tests run
# the other paths on the CPU with the default device set to ``meta``: a tensor made without ``device=`` lands on
# meta and meets the CPU tensors (an index on another device, or a host sync of a meta tensor), which raises.


def _plans(batch: dict[str, torch.Tensor]) -> dict[str, AttentionPlan]:
    ids = batch["input_ids"]
    return {
        "no padding": AttentionPlan.build("varlen", ids, None, None, None),
        "padded": AttentionPlan.build("varlen", ids, batch["attention_mask"], None, None),
        "packed": AttentionPlan.build("varlen", ids, None, batch.get("sequence_ids"), None),
    }


@pytest.mark.parametrize("layout", ["no padding", "padded", "packed"])
def test_the_attention_plan_makes_every_index_on_the_batch_s_device(layout):
    batch = _batch(packing=layout == "packed")
    plan = _plans(batch)[layout]
    with torch.device("meta"):  # the default device, which no index may come from
        made = [plan.document_ids(), plan.position_ids(), plan.sequence_starts(), plan._segments()]
    _assert_all_on(made, "cpu")


@pytest.mark.parametrize("kernel", ["varlen", "flex_attention"])
@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_a_varlen_or_flex_step_makes_no_tensor_on_the_default_device(kernel, architecture, monkeypatch):
    def stand_in(q, k, v, cu_seqlens, max_seqlen, dropout_p, window):  # the CUDA kernel's contract, on the CPU
        assert cu_seqlens.device == q.device and cu_seqlens.dtype == torch.int32
        return q * 1.0

    monkeypatch.setattr(attention, "flash_varlen_attention", stand_in)
    torch.manual_seed(0)
    config = tiny_config(architecture, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = PretrainingModel(build_model(config))
    for module in model.modules():
        if hasattr(module, "attn_implementation"):
            module.attn_implementation = kernel
    batch = _batch(packing=True)
    backward = kernel == "varlen"  # (PyTorch has no flex_attention backward on the CPU: its forward alone)
    with torch.device("meta"), torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(backward):
        out = model(**batch)  # (varlen runs in bf16 only)
        if backward:
            out.training_loss(1.0).backward()
    _assert_all_on([out.mlm_loss, *(p.grad for p in model.parameters() if p.grad is not None)], "cpu")
    assert not backward or all(p.grad is not None for p in model.model.base_model.parameters())


def _features(task: str) -> list[dict]:
    rows = _rows(4, seed=1)
    out = []
    for i, r in enumerate(rows):
        f = {"input_ids": r["input_ids"].tolist(), "token_type_ids": r["token_type_ids"].tolist()}
        if task == "qa":
            f.update(start_positions=1, end_positions=3)
        elif task == "tokens":
            f["labels"] = [i % 3] * len(f["input_ids"])
        elif task == "choice":
            f = {"input_ids": [f["input_ids"]] * 3, "token_type_ids": [f["token_type_ids"]] * 3, "labels": i % 3}
        else:
            f["labels"] = i % 2
        out.append(f)
    return out


def _task_of(name: str) -> str:
    for key, task in (("QuestionAnswering", "qa"), ("TokenClassification", "tokens"), ("MultipleChoice", "choice")):
        if key in name:
            return task
    return "sequence"


#: Every head but the feature-based taggers: their BiLSTM takes the sequence lengths on the host
#: (``pack_padded_sequence`` requires CPU lengths), which a meta tensor cannot give; on a GPU that read is legal.
HEAD_NAMES = [name for name in sorted(HEADS) if "FeatureBased" not in name]


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_every_fine_tuning_head_trains_a_step_on_the_meta_device(name):
    architecture = "modernbert" if name.startswith("ModernBert") else "bert"
    task = _task_of(name)
    model = HEADS[name](_config(architecture), 2 if task == "qa" else 3).to("meta")
    batch = _to(collate_features(_features(task)), "meta")
    optimizer = create_optimizer(model)
    scheduler = create_scheduler(optimizer, warmup_steps=1, max_steps=10)
    out = model(**batch)
    out.loss.backward()
    optimizer_step(model, optimizer, scheduler, max_grad_norm=1.0)
    logits = [getattr(out, f) for f in ("logits", "start_logits", "end_logits") if hasattr(out, f)]
    _assert_all_on([*logits, out.loss], "meta")
    _assert_all_on(model.parameters(), "meta")


def test_the_feature_based_heads_are_registered_for_both_families():
    assert HEADS["BertFeatureBasedForTokenClassification"] is BertFeatureBasedForTokenClassification
    assert HEADS["ModernBertFeatureBasedForTokenClassification"] is ModernBertFeatureBasedForTokenClassification
    assert ModernBertFeatureBasedForTokenClassification(_config("modernbert"), 3).base_model_prefix == "model"


# --------------------------------------------------------------------------------------------- autocast


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_bf16_autocast_on_the_cpu_gives_finite_losses_within_2_percent_of_fp32(architecture, packing):
    assert torch.get_default_dtype() == torch.float32  # left alone: autocast, not a bf16 model
    torch.manual_seed(0)
    model = PretrainingModel(build_model(_config(architecture))).eval()
    batch = _batch(packing)
    with torch.no_grad():
        fp32 = model(**batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(**batch)
    assert bf16.prediction_logits.dtype == torch.bfloat16  # the matrix products did run in bf16
    for name in ("mlm_loss", "nsp_loss"):
        a, b = getattr(fp32, name), getattr(bf16, name)
        if a is None:
            assert b is None
            continue
        assert b.dtype == torch.float32 and torch.isfinite(b)  # losses are computed in fp32
        assert abs(a.item() - b.item()) <= 0.02 * abs(a.item()), (name, a.item(), b.item())
