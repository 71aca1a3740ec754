"""bert_model/checkpoint.py: plain, safe, atomic checkpoints."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models.bert import TIED_WEIGHTS_KEYS, BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer, create_scheduler
from bertprep.core.atomic import staging_name


def _trained_model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=50, hidden_size=32, num_attention_heads=2))
    optimizer = create_optimizer(model, learning_rate=1e-3)
    scheduler = create_scheduler(optimizer, warmup_steps=2, max_steps=10)
    ids = torch.randint(5, 50, (2, 8))
    for _ in range(3):
        out = model(
            ids,
            masked_lm_positions=torch.tensor([[1, 2], [3, 4]]),
            masked_lm_ids=ids[:, :2],
            next_sentence_label=torch.tensor([0, 1]),
        )
        out.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, optimizer, scheduler


def _save(run_dir, step, model, optimizer, scheduler, keep_last=3):
    state = {"scheduler": scheduler.state_dict(), "model_config": model.config.to_dict()}
    return ckpt.save_checkpoint(
        str(run_dir),
        step,
        model=model,
        optimizer=optimizer,
        state=state,
        hf_config=model.config.to_hf_dict(),
        keep_last=keep_last,
    )


def test_round_trip_restores_weights_optimizer_and_scheduler(tmp_path):
    model, optimizer, scheduler = _trained_model_and_optimizer()
    path = _save(tmp_path, 3, model, optimizer, scheduler)
    assert path == str(tmp_path / "checkpoints" / "step-000003")

    state = ckpt.read_checkpoint_state(path)
    model2, optimizer2, scheduler2 = _trained_model_and_optimizer(seed=1)  # different values everywhere
    ckpt.load_model_weights(path, model2)
    ckpt.load_optimizer_state(path, optimizer2, state)
    scheduler2.load_state_dict(state["scheduler"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, model2.state_dict()[k]), k
    s1, s2 = optimizer.state_dict(), optimizer2.state_dict()
    for index, values in s1["state"].items():
        for key, tensor in values.items():
            assert torch.equal(tensor, s2["state"][index][key]), (index, key)
    assert [g["lr"] for g in s1["param_groups"]] == [g["lr"] for g in s2["param_groups"]]
    assert s2["param_groups"][0]["betas"] == (0.9, 0.999)
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()
    assert state["step"] == 3 and state["model_config"]["hidden_size"] == 32


def test_files_are_safetensors_and_json_only(tmp_path):
    model, optimizer, scheduler = _trained_model_and_optimizer()
    path = _save(tmp_path, 1, model, optimizer, scheduler)
    assert sorted(os.listdir(path)) == ["config.json", "model.safetensors", "optimizer.safetensors", "state.json"]
    weights = load_file(os.path.join(path, "model.safetensors"))
    # Hugging Face layout: every parameter once, tied aliases left out.
    assert set(weights) == set(model.state_dict()) - set(TIED_WEIGHTS_KEYS)
    opt = load_file(os.path.join(path, "optimizer.safetensors"))
    assert "bert.pooler.dense.weight/exp_avg" in opt and "cls.predictions.bias/exp_avg_sq" in opt
    with open(os.path.join(path, "state.json")) as f:
        json.load(f)
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["model_type"] == "bert"
    for name in os.listdir(path):  # nothing pickled anywhere
        with open(os.path.join(path, name), "rb") as f:
            assert not f.read(2).startswith(b"\x80"), name


def test_keep_last_and_latest(tmp_path):
    model, optimizer, scheduler = _trained_model_and_optimizer()
    for step in (10, 20, 30, 40):
        _save(tmp_path, step, model, optimizer, scheduler, keep_last=2)
    assert [s for s, _ in ckpt.list_checkpoints(str(tmp_path / "checkpoints"))] == [30, 40]
    assert ckpt.resolve_checkpoint(str(tmp_path)).endswith("step-000040")
    assert ckpt.resolve_checkpoint(str(tmp_path / "checkpoints")).endswith("step-000040")
    assert ckpt.resolve_checkpoint(str(tmp_path / "checkpoints" / "step-000030")).endswith("step-000030")
    # Saving the same step again replaces it.
    _save(tmp_path, 40, model, optimizer, scheduler, keep_last=2)
    assert [s for s, _ in ckpt.list_checkpoints(str(tmp_path / "checkpoints"))] == [30, 40]
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        ckpt.resolve_checkpoint(str(tmp_path / "nothing"))


def test_interrupted_save_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    model, optimizer, scheduler = _trained_model_and_optimizer()
    _save(tmp_path, 1, model, optimizer, scheduler)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "_write_json", crash)  # fails after both safetensors files are written
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, 2, model, optimizer, scheduler)
    assert os.listdir(tmp_path / "checkpoints") == ["step-000001"]
    assert ckpt.resolve_checkpoint(str(tmp_path)).endswith("step-000001")
    # A leftover temporary directory of a killed process is never taken for a checkpoint.
    leftover = tmp_path / "checkpoints" / staging_name("checkpoint")
    os.makedirs(leftover)
    (leftover / "state.json").write_text("{}")
    assert ckpt.resolve_checkpoint(str(tmp_path)).endswith("step-000001")


def test_rng_state_round_trip():
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    state = json.loads(json.dumps(ckpt.capture_rng_state()))
    expected = (torch.rand(4), random.random(), np.random.rand())
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    ckpt.restore_rng_state(state)
    got = (torch.rand(4), random.random(), np.random.rand())
    assert torch.equal(expected[0], got[0]) and expected[1:] == got[1:]


def test_optimizer_state_of_another_model_is_refused(tmp_path):
    model, optimizer, scheduler = _trained_model_and_optimizer()
    path = _save(tmp_path, 1, model, optimizer, scheduler)
    state = ckpt.read_checkpoint_state(path)
    other = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=50, num_hidden_layers=1))
    with pytest.raises(ValueError, match="parameter names differ"):
        ckpt.load_optimizer_state(path, create_optimizer(other), state)
    deeper = BertConfig.from_preset("tiny", vocab_size=50, hidden_size=32, num_attention_heads=2, num_hidden_layers=3)
    with pytest.raises(ValueError, match=r"missing .*layer\.2"):
        ckpt.load_model_weights(path, BertForPreTraining(deeper))
    with pytest.raises(ValueError, match=r"shape.*\(50, 128\).*\(50, 32\)"):
        ckpt.load_model_weights(path, BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=50)))


def test_a_checkpoint_that_cannot_be_written_says_why(tmp_path):
    """Round two: a checkpoints path that is a file was reported with "Free space on that disk"."""
    from finetune_factory import tiny_config

    model = BertForPreTraining(tiny_config())
    (tmp_path / "checkpoints").write_text("x")
    with pytest.raises(ckpt.CheckpointWriteError) as err:
        ckpt.save_checkpoint(str(tmp_path), 1, model=model, optimizer=create_optimizer(model), state={})
    assert f"{tmp_path / 'checkpoints'} is a file, not a directory: move it away" in str(err.value)
    assert "Free space" not in str(err.value)
