"""Learning-rate schedules: the factor of the peak learning rate at each optimizer step, a pure function of the
step and the settings (so a resumed run, which restores only the step, follows the same curve).

* ``linear`` (the default): BERT's (Devlin et al. 2018, appendix A.2; google-research/bert ``optimization.py``):
  linear warm-up over ``warmup_steps``, then ``1 - step / max_steps`` (the decay counted from step 0, the warm-up
  overriding it at the start), reaching 0 at ``max_steps``.
* ``cosine``: linear warm-up, then half a cosine from 1 at ``warmup_steps`` to 0 at ``max_steps`` (Loshchilov &
  Hutter 2017, SGDR, without restarts; RoBERTa's and most LLMs' successor to the linear decay).
* ``wsd``: warm-up, stable, decay (Hu et al. 2024, MiniCPM; Hägele et al. 2024, "Scaling Laws and Compute-Optimal
  Training Beyond Fixed Training Durations"), the "trapezoidal" schedule ModernBERT trained with (Warner et al.
  2024, section 2.2: warm-up, a constant learning rate for most of training, then a 1-sqrt decay). The decay takes
  the last ``decay_steps`` steps, with shape ``linear`` (``1 - p``), ``cosine`` (``(1 + cos(pi p)) / 2``) or
  ``1-sqrt`` (``1 - sqrt(p)``, Hägele et al.'s best), ``p`` going from 0 to 1 over the decay.
* ``constant``: linear warm-up, then the peak learning rate to the end.
* ``polynomial``: fairseq's ``polynomial_decay`` (RoBERTa's, Liu et al. 2019; ``fairseq/optim/lr_scheduler/
  polynomial_decay_schedule.py``) and transformers' ``get_polynomial_decay_schedule_with_warmup``: linear warm-up,
  then ``(1 - p)^polynomial_power`` with ``p`` going from 0 at the end of the warm-up to 1 at ``max_steps`` (the
  decay counted from the end of the warm-up, unlike ``linear``); power 1 is fairseq's default. fairseq's first
  update takes ``1 / warmup_steps`` of the peak where this one takes 0; every later step is the same.
* ``polynomial-from-0``: the decay of ``tf.train.polynomial_decay`` as BERT's ``optimization.py`` calls it,
  ``(1 - step / max_steps)^polynomial_power`` counted from step 0, the warm-up overriding it at the start:
  ``linear`` is its power 1; NVIDIA's BERT (DeepLearningExamples ``PolyWarmUpScheduler``, ``degree`` 0.5) takes
  power 0.5.

The warm-up may be counted in tokens instead of steps (``warmup_factors``: ModernBERT's, whose Composer
scheduler takes ``t_warmup`` in tokens and rises linearly in the tokens trained on: Warner et al. 2024, section
2.2; AnswerDotAI/ModernBERT ``src/scheduler.py``): ``token_warmup`` turns the tokens of each step into the
factors of the warm-up steps.

Every schedule but ``constant`` ends at ``min_lr_ratio`` x the peak instead of 0 when it is set: the decaying
part is ``min_lr_ratio + (1 - min_lr_ratio) x shape``.

Batch-size warm-up (``BatchSizeWarmup``; ModernBERT, Warner et al. 2024, section 2.2: the batch grows from a
start size to the full one over the first tokens of training), in one of two shapes (``BATCH_WARMUP_SHAPES``), is
a schedule of the micro-batches per optimizer
step, also a pure function of the step and the settings. Standard library only.
"""

from __future__ import annotations

import bisect
import itertools
import math

#: ``--lr-schedule`` values.
LR_SCHEDULES = ("linear", "cosine", "wsd", "constant", "polynomial", "polynomial-from-0")
#: ``--decay-shape`` values (the decay of ``wsd``).
DECAY_SHAPES = ("linear", "cosine", "1-sqrt")
#: ``--batch-size-warmup-shape`` values (``BatchSizeWarmup``).
BATCH_WARMUP_SHAPES = ("linear", "equal-steps")


def decay_shape(progress: float, shape: str) -> float:
    """The decay's factor at ``progress`` in [0, 1] of the decay (1 at 0, 0 at 1) for ``shape`` of
    ``DECAY_SHAPES``. Raises ``ValueError`` for another shape."""
    progress = min(max(progress, 0.0), 1.0)
    if shape == "linear":
        return 1.0 - progress
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if shape == "1-sqrt":
        return 1.0 - math.sqrt(progress)
    raise ValueError(f"decay shape must be one of {', '.join(DECAY_SHAPES)}, got {shape!r}")


def resolve_decay_steps(max_steps: int, decay_steps: int | None, decay_fraction: float) -> int:
    """Steps of the ``wsd`` decay: ``decay_steps`` when given, else ``round(decay_fraction x max_steps)``."""
    return decay_steps if decay_steps is not None else round(decay_fraction * max_steps)


def lr_factor(
    step: int,
    *,
    schedule: str = "linear",
    warmup_steps: int,
    max_steps: int,
    decay_steps: int = 0,
    decay_shape_name: str = "1-sqrt",
    min_lr_ratio: float = 0.0,
    polynomial_power: float = 1.0,
    warmup_factors: tuple[float, ...] = (),
) -> float:
    """Learning-rate factor (of the peak) at optimizer step ``step`` (0-based; the step about to be taken).

    Args:
        schedule: one of ``LR_SCHEDULES`` (see the module docstring).
        warmup_steps: steps of the linear warm-up ``step / warmup_steps``.
        max_steps: the schedule's length; the factor stays at its end value after it.
        decay_steps: ``wsd`` only: steps of the decay, which ends at ``max_steps`` (``resolve_decay_steps``).
        decay_shape_name: ``wsd`` only: one of ``DECAY_SHAPES``.
        min_lr_ratio: the factor the decay ends at (0 = BERT's, to 0).
        polynomial_power: ``polynomial`` and ``polynomial-from-0``: the decay's power (fairseq's ``--power``).
        warmup_factors: the factor of each warm-up step when the warm-up is counted in tokens
            (``token_warmup``: ``warmup_steps`` of them); empty: ``step / warmup_steps``.

    Returns:
        A float in [0, 1]. Raises ``ValueError`` for an unknown schedule or shape.
    """
    if step < warmup_steps:
        return warmup_factors[step] if warmup_factors else step / warmup_steps
    floor = min_lr_ratio
    if schedule == "linear":
        return floor + (1.0 - floor) * max(0.0, 1.0 - step / max_steps)
    if schedule == "cosine":
        span = max_steps - warmup_steps
        progress = (step - warmup_steps) / span if span > 0 else 1.0
        return floor + (1.0 - floor) * decay_shape(progress, "cosine")
    if schedule == "wsd":
        decay_start = max_steps - decay_steps
        if step < decay_start:
            return 1.0
        progress = (step - decay_start) / decay_steps if decay_steps > 0 else 1.0
        return floor + (1.0 - floor) * decay_shape(progress, decay_shape_name)
    if schedule == "constant":
        return 1.0
    if schedule == "polynomial-from-0":
        return floor + (1.0 - floor) * max(0.0, 1.0 - step / max_steps) ** polynomial_power
    if schedule == "polynomial":
        span = max_steps - warmup_steps
        progress = min(1.0, (step - warmup_steps) / span) if span > 0 else 1.0
        return floor + (1.0 - floor) * (1.0 - progress) ** polynomial_power
    raise ValueError(f"lr schedule must be one of {', '.join(LR_SCHEDULES)}, got {schedule!r}")


class BatchSizeWarmup:
    """How many micro-batches (of gradient accumulation) each optimizer step takes while the batch warms up.

    The global batch grows from ``start`` micro-batches per step to ``full`` (the ``gradient_accumulation_steps``)
    while the first ``warmup_tokens`` tokens are trained on, in one of two shapes (``BATCH_WARMUP_SHAPES``), where
    ``T(s)`` is the tokens of the steps before step ``s``:

    * ``linear``: the batch grows linearly in the tokens: step ``s`` takes ``min(full, start + floor((full - start
      + 1) x T(s) / warmup_tokens))`` micro-batches, so the small batches take more steps than the large ones;
    * ``equal-steps``: ModernBERT's (AnswerDotAI/ModernBERT ``src/sequence_packer.py``,
      ``BatchSizeWarmupScheduler``; Warner et al. 2024, section 2.2: "each batch size has the same number of
      update steps"): each size ``b`` of ``start .. full - 1`` takes the tokens up to the threshold
      ``ceil(warmup_tokens x (start + ... + b) / (start + ... + full - 1))``, a share of the tokens proportional
      to ``b``, hence the same number of steps; ``full`` once ``warmup_tokens`` are done. (ModernBERT grows the
      batch one row per process at a time; here one micro-batch of every process at a time.)

    Tokens are counted as token slots, ``tokens_per_micro_batch`` (micro-batch rows x ``max_seq_length`` x world
    size) per micro-batch, not the real tokens: the count is then the same on every DDP rank without
    communication, so every rank takes the same number of micro-batches per step (DDP's all-reduce on the last one
    would otherwise wait forever), and it follows from the step alone, so a resumed run takes the same steps as an
    uninterrupted one. With packed rows (nearly full) the two counts agree.

    ``micro_batches(step)`` replays the warm-up once (its steps are at most ``warmup_tokens /
    tokens_per_micro_batch``) and answers from the table. Raises ``ValueError`` for settings out of range.
    """

    def __init__(
        self, *, start: int, full: int, warmup_tokens: int, tokens_per_micro_batch: int, shape: str = "linear"
    ) -> None:
        if not 1 <= start <= full:
            raise ValueError(f"the start of the batch-size warm-up ({start} micro-batches) must be in [1, {full}]")
        if tokens_per_micro_batch <= 0 or warmup_tokens < 0:
            raise ValueError("tokens_per_micro_batch must be positive and warmup_tokens >= 0")
        if shape not in BATCH_WARMUP_SHAPES:
            raise ValueError(f"batch-size warm-up shape must be one of {', '.join(BATCH_WARMUP_SHAPES)}, got {shape!r}")
        self.full = full
        self.tokens_per_micro_batch = tokens_per_micro_batch
        self._table: list[int] = []
        self._done: list[int] = []
        thresholds = _equal_step_thresholds(start, full, warmup_tokens) if shape == "equal-steps" else []
        seen = 0
        while warmup_tokens and seen < warmup_tokens:
            if shape == "linear":
                count = min(full, start + (full - start + 1) * seen // warmup_tokens)
            else:
                index = bisect.bisect_right(thresholds, seen)  # the first size whose threshold is above seen
                count = start + index if index < len(thresholds) else full
            if count == full:
                break
            self._table.append(count)
            seen += count * tokens_per_micro_batch

    @property
    def warmup_steps(self) -> int:
        """Optimizer steps with fewer than ``full`` micro-batches."""
        return len(self._table)

    def micro_batches(self, step: int) -> int:
        """Micro-batches optimizer step ``step`` (0-based) takes."""
        return self._table[step] if step < len(self._table) else self.full

    def tokens_before(self, step: int) -> int:
        """Token slots of the steps before step ``step`` (0-based), over all processes."""
        if len(self._done) <= len(self._table):  # (once: micro-batches before each warm-up step)
            self._done = list(itertools.accumulate(self._table, initial=0))
        warm = min(step, len(self._table))
        done = self._done[warm] + self.full * (step - warm)
        return done * self.tokens_per_micro_batch


def _equal_step_thresholds(start: int, full: int, warmup_tokens: int) -> list[int]:
    """ModernBERT's ``BatchSizeWarmupScheduler._calculate_step_thresholds`` in micro-batches: the token count
    below which size ``start + i`` applies, for each size ``start .. full - 1``."""
    sizes = range(start, full)
    total, cumulative, thresholds = sum(sizes), 0, []
    for size in sizes:
        cumulative += size
        thresholds.append(-(-warmup_tokens * cumulative // total))  # ceil, in whole numbers
    return thresholds


def token_warmup(warmup_tokens: int, batch_warmup: BatchSizeWarmup) -> tuple[float, ...]:
    """The learning-rate factors of a warm-up of ``warmup_tokens`` token slots: step ``s`` takes ``T(s) /
    warmup_tokens``, ``T(s)`` the tokens before it (``batch_warmup.tokens_before``), for every step with ``T(s) <
    warmup_tokens``; their number is the warm-up's steps. ModernBERT's Composer ``LinearScheduler`` over
    ``t_warmup`` in tokens (from 1e-10 rather than 0: the same to 1e-10)."""
    factors: list[float] = []
    while warmup_tokens and (seen := batch_warmup.tokens_before(len(factors))) < warmup_tokens:
        factors.append(seen / warmup_tokens)
    return tuple(factors)


__all__ = [
    "BATCH_WARMUP_SHAPES",
    "DECAY_SHAPES",
    "LR_SCHEDULES",
    "BatchSizeWarmup",
    "decay_shape",
    "lr_factor",
    "resolve_decay_steps",
    "token_warmup",
]
