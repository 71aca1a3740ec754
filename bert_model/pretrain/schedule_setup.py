"""A pre-training run's length and pace: phases sized in optimizer steps, the learning-rate warm-up (in steps
or tokens), the batch-size warm-up, and the optimizer with its learning-rate schedule.

The schedules themselves are pure functions of the step (``bert_model/schedules.py``); this module sizes them
for a run: its world size, batch and shards (``build.build_run`` calls it).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from bertprep.bert_model.optim import create_optimizer, create_scheduler
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.phases import CONFIG_KEYS, parse_phases
from bertprep.bert_model.pretrain.shard_info import ShardInfo
from bertprep.bert_model.pretrain.start import Start
from bertprep.bert_model.pretrain.train_config import TrainConfig
from bertprep.bert_model.schedules import BatchSizeWarmup, token_warmup
from bertprep.core.storage import read_manifest

logger = logging.getLogger("bertprep.train")


def size_phases_in_steps(config: TrainConfig, d: DistInfo) -> TrainConfig:
    """``config`` with every phase in steps and ``max_steps`` their sum where a phase gives ``tokens`` or
    ``max_steps`` is 0 (``TrainConfig.with_phase_steps``; else ``config`` itself). A phase of ``tokens`` lasts
    ``ceil(tokens / slots)`` steps, ``slots`` its full global batch in token slots: ``batch_size x
    gradient_accumulation_steps x world size x max_seq_length`` of its shards' manifest, padding included (as
    ``batch_size_warmup_tokens`` counts). Logged (main rank).

    Raises:
        ValueError: the phases' steps do not add up to a ``max_steps`` given (the message names each phase's), or
            the shards of a phase in tokens have no manifest (naming the phase).
    """
    if config.sized:
        return config
    slots: list[int | None] = []
    for index, phase in enumerate(parse_phases(config.phases, config.max_steps)):
        settings = {**{k: getattr(config, k) for k in CONFIG_KEYS}, **{k: phase[k] for k in CONFIG_KEYS if k in phase}}
        if "tokens" not in phase:
            slots.append(None)
            continue
        try:
            max_seq_length = int(read_manifest(settings["shards"])["config"]["max_seq_length"])  # (or a bucket's)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"phase {index + 1} ({config.phases[index]!r}) is sized in tokens: {err}") from None
        slots.append(settings["batch_size"] * settings["gradient_accumulation_steps"] * d.world_size * max_seq_length)
    sized = config.with_phase_steps(slots)
    if d.is_main:
        logger.info(
            "phases in optimizer steps (world size %d), %d steps in all: %s",
            d.world_size,
            sized.max_steps,
            "; ".join(f"phase {i + 1}: {p['steps']} steps" for i, p in enumerate(sized.phase_settings())),
        )
    return sized


def check_phase_steps_on_resume(given: TrainConfig, sized: TrainConfig, start: Start, d: DistInfo) -> None:
    """On ``resume`` of a run whose phases are sized in ``tokens`` (or by their sum), check that they come to the
    steps the checkpoint's run had (``phase_steps`` in its ``state.json``): another world size, batch or shards
    would move the phase boundaries and the schedule's end. Nothing with ``allow_resume_changes``.

    Raises:
        ValueError: they come to other steps; the message says what to resume with.
    """
    if not given.resume or given.sized or start.saved is None or given.allow_resume_changes:
        return
    before = start.saved.get("phase_steps")
    now = [p["steps"] for p in sized.phase_settings()]
    if before is not None and list(before) != now:
        raise ValueError(
            f"the phases come to {now} steps at world size {d.world_size}, but the checkpoint's run had {before} "
            f"(world size {start.saved.get('world_size')}): resume with that number of processes and the same "
            "batch settings, or allow the change with --allow-resume-changes"
        )


def build_optimizer(
    config: TrainConfig, model: nn.Module, warmup: tuple[int, tuple[float, ...]] | None = None
) -> tuple[torch.optim.Optimizer, Any]:
    """``config.optimizer`` over ``optim.param_groups`` and its learning-rate schedule (``config.lr_schedule``
    after the warm-up; BERT's linear decay by default). ``warmup``: ``(steps, factors)`` of a warm-up in tokens
    (``lr_warmup``); None: ``config.warmup_steps``, linear in the steps."""
    optimizer = create_optimizer(model, learning_rate=config.learning_rate, **config.adamw_settings())
    warmup_steps, factors = warmup or (config.warmup_steps, ())
    scheduler = create_scheduler(
        optimizer,
        warmup_steps=warmup_steps,
        max_steps=config.max_steps,
        warmup_factors=factors,
        **config.schedule_settings(config.max_steps),
    )
    return optimizer, scheduler


def lr_warmup(base: TrainConfig, info: ShardInfo, phase: int, d: DistInfo) -> tuple[int, tuple[float, ...]]:
    """``(steps, factors)`` of the learning-rate warm-up: ``warmup_steps`` linear in the steps, or with
    ``warmup_tokens`` the steps until that many token slots are done and the factor of each (linear in the
    tokens: ``schedules.token_warmup``), counted with the first phase's batch (its batch-size warm-up included) and
    ``max_seq_length`` (``info``'s when ``phase`` is 0, else read from its manifest); logged (main rank).

    Raises:
        ValueError: the warm-up in tokens takes more steps than ``max_steps``.
    """
    if not base.warmup_tokens:
        return base.warmup_steps, ()
    first = base.for_phase(0)
    seq = info.max_seq_length if phase == 0 else int(read_manifest(first.shards)["config"]["max_seq_length"])
    factors = token_warmup(base.warmup_tokens, _batch_warmup(first, seq, d))
    if len(factors) > base.max_steps:
        raise ValueError(
            f"the learning-rate warm-up of {base.warmup_tokens} tokens takes {len(factors)} steps, more than "
            f"max_steps ({base.max_steps}); lower --warmup-tokens"
        )
    if d.is_main:
        logger.info("learning-rate warm-up: %d tokens, the first %d steps", base.warmup_tokens, len(factors))
    return len(factors), factors


def batch_size_warmup(config: TrainConfig, info: ShardInfo, d: DistInfo, phase: int = 0) -> BatchSizeWarmup:
    """The micro-batches of each step: ``batch_size_start`` (global) rounded to whole micro-batches per process,
    growing to ``gradient_accumulation_steps`` over ``batch_size_warmup_tokens`` in ``batch_size_warmup_shape``;
    logged (main rank). The warm-up runs in the first phase (its steps counted from the run's start); a later
    ``phase`` takes its full batch from its first step.

    Raises:
        ValueError: ``batch_size_start`` above the full global batch.
    """
    if phase > 0:
        full = config.gradient_accumulation_steps
        return BatchSizeWarmup(start=full, full=full, warmup_tokens=0, tokens_per_micro_batch=1)
    warmup = _batch_warmup(config, info.max_seq_length, d)
    if d.is_main and warmup.warmup_steps:
        per_micro_batch = config.batch_size * d.world_size
        logger.info(
            "batch-size warm-up (%s): global batch %d to %d over %d tokens (the first %d steps)",
            config.batch_size_warmup_shape,
            warmup.micro_batches(0) * per_micro_batch,
            warmup.full * per_micro_batch,
            config.batch_size_warmup_tokens,
            warmup.warmup_steps,
        )
    return warmup


def _batch_warmup(config: TrainConfig, max_seq_length: int, d: DistInfo) -> BatchSizeWarmup:
    """The first phase's ``BatchSizeWarmup`` (``batch_size_warmup``), for rows of ``max_seq_length``; ValueError
    for a ``batch_size_start`` above the full global batch."""
    full = config.gradient_accumulation_steps
    per_micro_batch = config.batch_size * d.world_size  # instances (rows) of one micro-batch on every process
    tokens_per_micro_batch = per_micro_batch * max_seq_length
    if not config.batch_size_warmup_tokens:
        return BatchSizeWarmup(start=full, full=full, warmup_tokens=0, tokens_per_micro_batch=tokens_per_micro_batch)
    assert config.batch_size_start is not None  # (TrainConfig refuses a warm-up without one)
    start = max(1, round(config.batch_size_start / per_micro_batch))
    if start > full:
        raise ValueError(
            f"batch_size_start {config.batch_size_start} exceeds the global batch {per_micro_batch * full} "
            "(batch_size x gradient_accumulation_steps x processes)"
        )
    return BatchSizeWarmup(
        start=start,
        full=full,
        warmup_tokens=config.batch_size_warmup_tokens,
        tokens_per_micro_batch=tokens_per_micro_batch,
        shape=config.batch_size_warmup_shape,
    )
