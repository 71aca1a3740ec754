"""The warm-ups and the decay of the source recipes as their code runs them: ModernBERT's batch-size warm-up
(equal steps per batch size) and learning-rate warm-up in tokens, and fairseq's polynomial decay (RoBERTa's), each
against a reference written here from the source's code."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from bertprep.bert_model.optim import create_scheduler
from bertprep.bert_model.schedules import BatchSizeWarmup, lr_factor, token_warmup


class ModernBertBatchSizeWarmup:
    """AnswerDotAI/ModernBERT ``src/sequence_packer.py`` ``BatchSizeWarmupScheduler``, in whole batch units: the
    size while ``tokens`` tokens are done (world size 1: the tokens are the run's)."""

    def __init__(self, min_batch_size: int, max_batch_size: int, warmup_tokens: int) -> None:
        self.min, self.max, self.warmup_tokens = min_batch_size, max_batch_size, warmup_tokens
        total = sum(range(min_batch_size, max_batch_size))
        steps_per_unit = warmup_tokens / total
        self.thresholds, cumsum = [], 0
        for size in range(min_batch_size, max_batch_size):
            cumsum += size
            self.thresholds.append(math.ceil(steps_per_unit * cumsum))

    def __call__(self, tokens: int) -> int:
        if tokens >= self.warmup_tokens:
            return self.max
        for i, threshold in enumerate(self.thresholds):
            if tokens < threshold:
                return self.min + i
        return self.max


@pytest.mark.parametrize(("start", "full", "tokens"), [(6, 36, 50 * 10**9 // 1000), (3, 18, 10**7), (1, 4, 12345)])
def test_equal_steps_warm_up_follows_modernberts_scheduler_step_by_step(start, full, tokens):
    per_micro_batch = 1000
    ours = BatchSizeWarmup(
        start=start, full=full, warmup_tokens=tokens, tokens_per_micro_batch=per_micro_batch, shape="equal-steps"
    )
    reference, seen, sizes = ModernBertBatchSizeWarmup(start, full, tokens), 0, []
    while (size := reference(seen)) != full:
        sizes.append(size)
        seen += size * per_micro_batch
    assert [ours.micro_batches(s) for s in range(len(sizes) + 3)] == sizes + [full] * 3
    steps = Counter(sizes)
    assert sorted(steps) == list(range(start, full))
    if tokens >= 10**7:  # (large enough that the rounding is one step at most)
        assert max(steps.values()) - min(steps.values()) <= 1


def test_the_linear_shape_stays_the_default_and_gives_the_small_batches_more_steps():
    linear = BatchSizeWarmup(start=6, full=36, warmup_tokens=50 * 10**6, tokens_per_micro_batch=128)
    steps = Counter(linear.micro_batches(s) for s in range(linear.warmup_steps))
    assert steps[6] > 5 * steps[35]
    with pytest.raises(ValueError, match="shape must be one of linear, equal-steps, got 'cubic'"):
        BatchSizeWarmup(start=1, full=2, warmup_tokens=1, tokens_per_micro_batch=1, shape="cubic")


def test_token_warm_up_rises_linearly_in_the_tokens_and_lasts_until_they_are_done():
    """ModernBERT's 3B-token warm-up at its starting batch of 768 x 1,024: 3,815 steps (not 636), each at
    tokens / 3B of the peak (Composer's LinearScheduler over t_warmup in tokens)."""
    constant = BatchSizeWarmup(start=1, full=1, warmup_tokens=0, tokens_per_micro_batch=768 * 1024)
    factors = token_warmup(3 * 10**9, constant)
    assert len(factors) == 3815
    assert factors[:3] == (0.0, 768 * 1024 / 3e9, 2 * 768 * 1024 / 3e9)
    growing = BatchSizeWarmup(start=1, full=3, warmup_tokens=600, tokens_per_micro_batch=100, shape="equal-steps")
    # thresholds 200 and 600 tokens: batches of 100, 100, 200, 200, then 300: tokens before 0 100 200 400 600 900
    factors = token_warmup(1000, growing)
    assert factors == tuple(t / 1000 for t in (0, 100, 200, 400, 600, 900))
    assert token_warmup(0, growing) == ()


def test_a_scheduler_with_a_token_warm_up_takes_its_factors_then_the_schedule():
    import torch

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = create_scheduler(
        optimizer, warmup_steps=3, max_steps=10, warmup_factors=(0.0, 0.2, 0.7), schedule="constant"
    )
    lrs = []
    for _ in range(5):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == [0.0, 0.2, 0.7, 1.0, 1.0]


def fairseq_polynomial_decay(num_updates, *, warmup_updates, total_num_update, power, lr=1.0, end_learning_rate=0.0):
    """fairseq ``PolynomialDecayLRSchedule.step_update(num_updates)``: the learning rate of the next update."""
    if warmup_updates > 0 and num_updates <= warmup_updates:
        return num_updates / float(warmup_updates) * lr
    if num_updates >= total_num_update:
        return end_learning_rate
    pct_remaining = 1 - (num_updates - warmup_updates) / (total_num_update - warmup_updates)
    return (lr - end_learning_rate) * pct_remaining**power + end_learning_rate


@pytest.mark.parametrize(("power", "end"), [(1.0, 0.0), (2.0, 0.1), (0.5, 0.0)])
def test_polynomial_decay_is_fairseqs_after_the_first_step(power, end):
    """Step s (0-based) takes what fairseq sets after update s; only step 0 differs (fairseq 1/warmup, here 0)."""
    settings = dict(warmup_steps=24, max_steps=500)
    for step in [1, 2, 12, 23, 24, 25, 100, 262, 499, 500, 510]:
        ours = lr_factor(step, schedule="polynomial", min_lr_ratio=end, polynomial_power=power, **settings)
        theirs = fairseq_polynomial_decay(
            step, warmup_updates=24, total_num_update=500, power=power, end_learning_rate=end
        )
        assert ours == pytest.approx(theirs, abs=1e-12), step
    # BERT's linear schedule counts its decay from step 0: 4.8% lower than fairseq's right after RoBERTa's warm-up.
    bert = lr_factor(24_000, schedule="linear", warmup_steps=24_000, max_steps=500_000)
    assert bert == pytest.approx(1 - 0.048) and lr_factor(
        24_000, schedule="polynomial", warmup_steps=24_000, max_steps=500_000
    ) == pytest.approx(1.0)
