"""Aligned shapes inside BERT: the fused ``query``/``key``/``value`` projection and the word embedding padded to a
multiple of 64 rows (``BertConfig.pad_vocab_size_multiple``) compute what the reference model computes, and
what leaves the model (logits, state dicts, checkpoints with their optimizer state) is the reference layout's.

The reference is ``transformers.BertForPreTraining`` (three projections, no padding) with the same weights.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining, load_state_dict_strict, trainable_state_dict
from bertprep.bert_model.optim import create_optimizer
from conftest import need_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
PADDED = BertConfig(**TINY, pad_vocab_size_multiple=64)


def _ids(seed: int = 0, B: int = 3, T: int = 16) -> torch.Tensor:
    return torch.randint(5, 99, (B, T), generator=torch.Generator().manual_seed(seed))


def test_a_padded_model_has_64_aligned_rows_inside_and_the_real_vocab_outside():
    model = BertForPreTraining(PADDED)
    assert PADDED.padded_vocab_size == 128 and model.bert.embeddings.word_embeddings.weight.shape == (128, 32)
    assert BertConfig(vocab_size=30522, pad_vocab_size_multiple=64).padded_vocab_size == 30528  # MosaicBERT's
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["bert.embeddings.word_embeddings.weight"] == shapes["cls.predictions.decoder.weight"] == (99, 32)
    assert shapes["cls.predictions.bias"] == shapes["cls.predictions.decoder.bias"] == (99,)
    assert model(_ids()).prediction_logits.shape == (3, 16, 99)
    assert PADDED.to_hf_dict()["vocab_size"] == 99 and "pad_vocab_size_multiple" not in PADDED.to_hf_dict()
    assert model.num_parameters() == BertForPreTraining(BertConfig(**TINY)).num_parameters()


def test_the_same_seed_draws_the_same_weights_padded_or_not():
    torch.manual_seed(3)
    a = trainable_state_dict(BertForPreTraining(BertConfig(**TINY)))
    torch.manual_seed(3)
    b = trainable_state_dict(BertForPreTraining(PADDED))
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_padding_rows_are_never_predicted():
    model = BertForPreTraining(PADDED).eval()
    with torch.no_grad():  # padding rows that would win every position if they were scored
        model.cls.predictions.bias[99:] = 1e4
        model.bert.embeddings.word_embeddings.weight[99:] = 1.0
    logits = model(_ids()).prediction_logits
    assert logits.shape[-1] == 99 and logits.abs().max() < 1e3


transformers = need_module("transformers")


def _hf_twin(config: BertConfig):
    """transformers' BertForPreTraining (three projections, vocab_size rows) and ours, with the same weights."""
    hf_config = transformers.BertConfig(**BertConfig(**TINY).to_dict(), attn_implementation="sdpa")
    torch.manual_seed(1)
    hf = transformers.BertForPreTraining(hf_config)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    ours = BertForPreTraining(config)
    load_state_dict_strict(ours, hf.state_dict())
    return hf, ours


def _step(model, ids, labels, logits_of) -> torch.Tensor:
    loss = F.cross_entropy(logits_of(model(ids)).reshape(-1, 99), labels.reshape(-1))
    loss.backward()
    return loss.detach()


def test_fused_qkv_and_padded_vocab_train_in_lockstep_with_transformers():
    """Three SGD steps: the same losses and weights (within 1e-6, fp32) as transformers' unfused, unpadded
    model, and the padding rows stay 0. (SGD, not Adam: the key bias's gradient is 0 up to rounding, softmax
    being shift-invariant, and Adam would blow that rounding up to a full step.)"""
    hf, ours = _hf_twin(PADDED)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (hf, ours)]
    for step in range(3):
        ids, labels = _ids(step), _ids(step + 10)
        a = _step(hf, ids, labels, lambda out: out.prediction_logits)
        b = _step(ours, ids, labels, lambda out: out.prediction_logits)
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
    theirs, mine = hf.state_dict(), trainable_state_dict(ours)
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs[name], atol=1e-6, rtol=0, msg=name)
    assert not ours.bert.embeddings.word_embeddings.weight[99:].any() and not ours.cls.predictions.bias[99:].any()


def _train_one_step(model: BertForPreTraining, seed: int):
    optimizer = create_optimizer(model, learning_rate=1e-2)
    _step(model, _ids(seed), _ids(seed + 10), lambda out: out.prediction_logits)
    optimizer.step()
    optimizer.zero_grad()
    return optimizer


@pytest.mark.parametrize("saved_padded", [True, False], ids=["padded-to-plain", "plain-to-padded"])
def test_checkpoints_are_interchangeable_between_padded_and_plain_models(tmp_path, saved_padded):
    """A checkpoint (weights and AdamW state) holds the reference layout whatever the model pads: it resumes in
    a model of the other layout, and the next step there equals the next step of the saving model."""
    plain = BertConfig(**TINY)
    source_config, target_config = (PADDED, plain) if saved_padded else (plain, PADDED)
    torch.manual_seed(0)
    source = BertForPreTraining(source_config)
    optimizer = _train_one_step(source, 0)
    path = ckpt.save_checkpoint(str(tmp_path), 1, model=source, optimizer=optimizer, state={"step": 1})
    from safetensors import safe_open

    with safe_open(f"{path}/optimizer.safetensors", framework="pt") as f:
        names = set(f.keys())
    assert "bert.encoder.layer.0.attention.self.query.weight/exp_avg" in names
    assert not any("qkv" in n for n in names)
    target = BertForPreTraining(target_config)
    target_optimizer = create_optimizer(target, learning_rate=1e-2)
    ckpt.load_model_weights(path, target)
    ckpt.load_optimizer_state(path, target_optimizer, ckpt.read_checkpoint_state(path))
    for model, opt in ((source, optimizer), (target, target_optimizer)):
        _step(model, _ids(1), _ids(11), lambda out: out.prediction_logits)
        opt.step()
    a, b = trainable_state_dict(source), trainable_state_dict(target)
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0, msg=name)


def test_a_fused_parameter_s_optimizer_state_round_trips_exactly():
    torch.manual_seed(0)
    model = BertForPreTraining(PADDED)
    optimizer = _train_one_step(model, 0)
    tensors, meta = ckpt.optimizer_state_to_flat(optimizer)
    twin = BertForPreTraining(PADDED)
    twin_optimizer = create_optimizer(twin, learning_rate=1e-2)
    ckpt.optimizer_state_from_flat(twin_optimizer, tensors, meta)
    trained = [(p, q) for p, q in zip(model.parameters(), twin.parameters(), strict=True) if p in optimizer.state]
    assert len(trained) > 10 and all(q in twin_optimizer.state for _, q in trained)
    for p, q in trained:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[p][key], twin_optimizer.state[q][key])
