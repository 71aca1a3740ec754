"""bert_model/schedules.py: each learning-rate schedule against its closed form at chosen steps."""

from __future__ import annotations

import math

import pytest

from bertprep.bert_model.loop_config import OptimConfig
from bertprep.bert_model.schedules import lr_factor, resolve_decay_steps

W, N = 10, 110  # warm-up steps, max_steps


@pytest.mark.parametrize("schedule", ["linear", "cosine", "wsd", "constant"])
def test_every_schedule_warms_up_linearly(schedule):
    for step in (0, 1, 5, 9):
        assert lr_factor(step, schedule=schedule, warmup_steps=W, max_steps=N, decay_steps=20) == step / W


def test_linear_is_berts_decay_from_step_zero():
    # google-research/bert optimization.py: polynomial_decay(power=1) from step 0, overridden during warm-up.
    assert lr_factor(10, warmup_steps=W, max_steps=N) == pytest.approx(1 - 10 / 110)
    assert lr_factor(55, warmup_steps=W, max_steps=N) == pytest.approx(0.5)
    assert lr_factor(110, warmup_steps=W, max_steps=N) == 0.0
    assert lr_factor(55, warmup_steps=W, max_steps=N, min_lr_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.5)


def test_cosine_is_half_a_cosine_after_the_warm_up():
    f = lambda s, **kw: lr_factor(s, schedule="cosine", warmup_steps=W, max_steps=N, **kw)  # noqa: E731
    assert f(10) == pytest.approx(1.0)
    assert f(35) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))  # a quarter of the way: 0.854
    assert f(60) == pytest.approx(0.5)
    assert f(110) == pytest.approx(0.0) and f(200) == pytest.approx(0.0)
    assert f(60, min_lr_ratio=0.2) == pytest.approx(0.2 + 0.8 * 0.5)


@pytest.mark.parametrize(
    "shape,closed_form",
    [
        ("linear", lambda p: 1 - p),
        ("cosine", lambda p: 0.5 * (1 + math.cos(math.pi * p))),
        ("1-sqrt", lambda p: 1 - math.sqrt(p)),
    ],
)
def test_wsd_is_stable_then_decays_over_the_last_steps(shape, closed_form):
    f = lambda s: lr_factor(s, schedule="wsd", warmup_steps=W, max_steps=N, decay_steps=20, decay_shape_name=shape)  # noqa: E731
    assert [f(s) for s in (10, 50, 89, 90)] == [1.0, 1.0, 1.0, 1.0]  # stable to the decay's start (step 90)
    for step in (95, 100, 105, 110):
        assert f(step) == pytest.approx(closed_form((step - 90) / 20))
    assert f(110) == pytest.approx(0.0) and f(150) == pytest.approx(0.0)
    assert f(100) == pytest.approx({"linear": 0.5, "cosine": 0.5, "1-sqrt": 1 - math.sqrt(0.5)}[shape])


def test_wsd_decay_ends_at_the_floor_and_the_fraction_gives_its_length():
    assert lr_factor(110, schedule="wsd", warmup_steps=W, max_steps=N, decay_steps=20, min_lr_ratio=0.1) == (
        pytest.approx(0.1)
    )
    assert resolve_decay_steps(1000, None, 0.2) == 200 and resolve_decay_steps(1000, 50, 0.2) == 50
    settings = OptimConfig(lr_schedule="wsd", decay_fraction=0.25).schedule_settings(400)
    assert settings == {
        "schedule": "wsd",
        "decay_steps": 100,
        "decay_shape_name": "1-sqrt",
        "min_lr_ratio": 0.0,
        "polynomial_power": 1.0,
    }


def test_constant_stays_at_the_peak():
    assert [lr_factor(s, schedule="constant", warmup_steps=W, max_steps=N) for s in (10, 60, 110, 500)] == [1.0] * 4


def test_bad_settings_are_refused_with_the_setting_named():
    with pytest.raises(
        ValueError,
        match="lr_schedule must be one of linear, cosine, wsd, constant, polynomial, polynomial-from-0, got 'step'",
    ):
        OptimConfig(lr_schedule="step")
    with pytest.raises(ValueError, match="decay_shape must be one of"):
        OptimConfig(decay_shape="exp")
    with pytest.raises(ValueError, match="min_lr_ratio must be in"):
        OptimConfig(min_lr_ratio=1.5)
    with pytest.raises(ValueError, match="optimizer must be one of adamw, stable-adamw, lamb"):
        OptimConfig(optimizer="sgd")


def test_the_scheduler_follows_the_schedule_and_refuses_a_decay_longer_than_the_run():
    import torch

    from bertprep.bert_model.optim import create_scheduler

    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([weight], lr=2e-3)
    settings = OptimConfig(lr_schedule="wsd", decay_steps=4, decay_shape="cosine").schedule_settings(N)
    scheduler = create_scheduler(optimizer, warmup_steps=W, max_steps=N, **settings)
    lrs = []
    for _ in range(N):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([2e-3 * lr_factor(s, warmup_steps=W, max_steps=N, **settings) for s in range(N)])
    assert lrs[50] == 2e-3 and lrs[108] == pytest.approx(2e-3 * 0.5)
    with pytest.raises(ValueError, match=r"the wsd decay \(120 steps\) and warm-up \(10\) exceed max_steps \(110\)"):
        create_scheduler(optimizer, warmup_steps=W, max_steps=N, **{**settings, "decay_steps": 120})


def test_batch_size_warmup_grows_in_whole_micro_batches_with_the_tokens():
    from bertprep.bert_model.schedules import BatchSizeWarmup

    # 100 tokens per micro-batch, 1 to 4 micro-batches over 1000 tokens: 1 + floor(4 x T / 1000) micro-batches,
    # T = 0, 100, 200, 300 (-> 2), 500 (-> 3), 800 (-> 4: the full batch from step 5 on).
    warmup = BatchSizeWarmup(start=1, full=4, warmup_tokens=1000, tokens_per_micro_batch=100)
    assert [warmup.micro_batches(s) for s in range(8)] == [1, 1, 1, 2, 3, 4, 4, 4]
    assert warmup.warmup_steps == 5
    none = BatchSizeWarmup(start=3, full=3, warmup_tokens=0, tokens_per_micro_batch=1)
    assert none.micro_batches(0) == none.micro_batches(10**6) == 3
    with pytest.raises(ValueError, match=r"must be in \[1, 4\]"):
        BatchSizeWarmup(start=5, full=4, warmup_tokens=10, tokens_per_micro_batch=1)
