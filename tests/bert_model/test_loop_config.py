"""bert_model/loop_config.py: what train and finetune share is declared once and checked once."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import need_module

need_module("torch")

from bertprep.bert_model.loop_config import LoopConfig, OptimConfig  # noqa: E402
from bertprep.bert_model.pretrain.train_config import TrainConfig  # noqa: E402
from bertprep.bert_model.tasks.finetune import FinetuneConfig  # noqa: E402


def _train(**kw) -> TrainConfig:
    return TrainConfig(shards="s", output_dir="o", **kw)


def _finetune(**kw) -> FinetuneConfig:
    return FinetuneConfig(train_file="t", output_dir="o", preset="tiny", vocab="v", **kw)


def test_both_commands_take_the_shared_settings_with_one_default():
    shared = {f.name: f.default for cls in (LoopConfig, OptimConfig) for f in dataclasses.fields(cls)}
    assert {"seed", "device", "precision", "weight_decay", "adam_epsilon", "max_grad_norm"} <= set(shared)
    for config in (_train(), _finetune()):
        assert {name: getattr(config, name) for name in shared} == shared
    assert _train().learning_rate != _finetune().learning_rate  # each command's own (paper A.2 / A.3)


@pytest.mark.parametrize("make", [_train, _finetune])
def test_both_commands_refuse_bad_shared_settings(make):
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        make(weight_decay=-0.1)
    with pytest.raises(ValueError, match="log_every must be positive"):
        make(log_every=0)
    with pytest.raises(ValueError, match="precision must be one of"):
        make(precision="fp8")


def test_the_optimizer_gets_the_shared_settings():
    from torch import nn

    from bertprep.bert_model.optim import create_optimizer

    config = _finetune(weight_decay=0.02, adam_beta1=0.8, adam_epsilon=1e-8)
    optimizer = create_optimizer(nn.Linear(2, 2), learning_rate=config.learning_rate, **config.adamw_settings())
    decayed = [g for g in optimizer.param_groups if g["weight_decay"] > 0]
    assert decayed and decayed[0]["weight_decay"] == 0.02
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.999) and optimizer.param_groups[0]["eps"] == 1e-8
