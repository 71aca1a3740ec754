"""Building a pre-training run: ``build_run`` checks the settings and data and builds the ``Run`` that
``trainer``'s loop uses, calling in order what it starts from (``start``), its steps and warm-ups
(``schedule_setup``), its data (``data_setup``) and its model (``model_setup``); ``enter_phase`` moves a run to
its next phase.

The order matters for an exact resume (each step may draw from the RNGs that ``start.restore_rng`` sets last).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertprep.bert_model.hf.interop import max_sequence_length
from bertprep.bert_model.metrics import JsonlWriter, device_peak_flops, matmul_precision, plotting_unavailable
from bertprep.bert_model.precision import autocast_context, cpu_has_native_bf16, uses_bf16
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.architectures import ModelConfig
from bertprep.bert_model.pretrain.data_setup import read_eval_shards, shard_info, train_loader, verify_shards
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.model_setup import build_model, model_config_for, set_rope_theta, wrap_model
from bertprep.bert_model.pretrain.phase_checks import check_later_phases, check_rope_keys
from bertprep.bert_model.pretrain.phases import phase_at
from bertprep.bert_model.pretrain.schedule_setup import (
    batch_size_warmup,
    build_optimizer,
    check_phase_steps_on_resume,
    lr_warmup,
    size_phases_in_steps,
)
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible
from bertprep.bert_model.pretrain.start import (
    Start,
    check_output_dir,
    extend_start_vocab,
    load_start,
    recorded_train_config,
    restore_progress,
    restore_rng,
)
from bertprep.bert_model.pretrain.train_config import TrainConfig
from bertprep.bert_model.reporting import ConsoleReporter, MetricsLog, open_reporter
from bertprep.bert_model.schedules import BatchSizeWarmup

logger = logging.getLogger("bertprep.train")


@dataclass
class Run:
    """The parts of a run that the loop uses, built once by ``build_run``."""

    config: TrainConfig
    """The settings of the phase under way (``base_config.for_phase(phase)``; the run's without phases)."""
    base_config: TrainConfig
    """The run's settings, phases included, every phase in steps (``size_phases_in_steps``)."""
    phase: int
    """The index of the phase under way (``phases.phase_at``; 0 without phases)."""
    d: DistInfo
    device: torch.device
    info: ShardInfo
    """The shards of the phase under way."""
    eval_info: ShardInfo | None
    model_config: ModelConfig
    recorded_config: dict[str, Any]
    """The settings given as a checkpoint records them (``recorded_train_config``: the model settings trained;
    phases and ``max_steps`` as given, in tokens where they were)."""
    model: nn.Module
    """``BertForPreTraining`` or ``ModernBertForMaskedLM`` (``architectures.build_model``)."""
    train_model: nn.Module
    """``model`` as trained: in a ``PretrainingModel``, compiled and / or wrapped in DDP."""
    eval_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    batch_warmup: BatchSizeWarmup
    """Micro-batches per optimizer step, step by step (``gradient_accumulation_steps`` without a warm-up)."""
    loader: ShardLoader
    batches: Iterator[dict[str, torch.Tensor]]
    autocast: contextlib.AbstractContextManager
    peak_flops: float | None
    """Peak FLOP/s of one GPU in the run's matmul precision (bf16, TF32, fp32; for ``mfu``); None on CPU or an
    unknown GPU."""
    writer: MetricsLog | None
    """``metrics.jsonl`` and the ``report_to`` reporter (main rank only; ``open_metrics_log``)."""
    no_plot: str | None
    """Why ``metrics.png`` cannot be drawn (None: it can, or not the main rank)."""
    t_start: float

    @property
    def mask_token_id(self) -> int:
        return self.info.special_token_ids["[MASK]"]  # read_shard_info checked it is there


class StoppedBeforeTraining(Exception):
    """A stop signal (``StopSignals``) arrived while the run was being built: nothing was trained, so the run
    stops before its first step, without a checkpoint. ``args[0]`` is the signal's name."""


def build_run(
    config: TrainConfig,
    d: DistInfo,
    device: torch.device,
    cleanup: contextlib.ExitStack,
    t_start: float,
    stop_requested: Callable[[], str | None] = lambda: None,
) -> tuple[Run, int, int]:
    """Check the settings and data, build the model, optimizer and loader (restoring them on ``resume``) and
    open ``metrics.jsonl`` (main rank); returns the run and this rank's ``(step, tokens_seen)``.

    The order is fixed: each step may draw from the RNGs that ``restore_rng`` sets last, and an exact resume
    needs them to be where the uninterrupted run had them. Raises what ``trainer.train`` documents, and
    ``StoppedBeforeTraining`` when ``stop_requested()`` names a signal after the slow parts (the shards'
    check, the model), before the loader starts (one process only: under DDP the loop decides, on every rank).
    """
    start, base, phase = _start_and_phase(config, d)
    given, config = config, base.for_phase(phase)  # (the run's settings without phases)
    info = shard_info(config, config.shards)
    no_plot = _plot_unavailable(d)
    start, model_config, eval_info = _check_model_and_shards(config, base, phase, info, start, d)
    _stop_if_requested(stop_requested, d)
    model, optimizer, scheduler = _model_and_optimizer(config, base, phase, model_config, info, start, d, device)
    _stop_if_requested(stop_requested, d)
    step, tokens_seen = restore_progress(given, start, optimizer, scheduler, d)
    train_model, eval_model = wrap_model(config, model, d, device)
    loader = train_loader(config, info, start, d, device)
    batches = iter(loader)
    autocast, peak = _precision(config, device, d)
    writer = _open_output_dir(config, step, cleanup, d)
    log_run(config, start, model, info, device, d, step)
    restore_rng(config, start, d)
    run = Run(
        config=config,
        base_config=base,
        phase=phase,
        d=d,
        device=device,
        info=info,
        eval_info=eval_info,
        model_config=model_config,
        recorded_config=recorded_train_config(given, start, model_config),
        model=model,
        train_model=train_model,
        eval_model=eval_model,
        optimizer=optimizer,
        scheduler=scheduler,
        batch_warmup=batch_size_warmup(config, info, d, phase),
        loader=loader,
        batches=batches,
        autocast=autocast,
        peak_flops=peak,
        writer=writer,
        no_plot=no_plot,
        t_start=t_start,
    )
    cleanup.callback(lambda: run.batches.close())  # shuts the loader workers down (the phase's loader)
    return run, step, tokens_seen


def _start_and_phase(config: TrainConfig, d: DistInfo) -> tuple[Start, TrainConfig, int]:
    """What the run starts from (``load_start``; a new run's ``output_dir`` must hold no checkpoints), the run's
    settings with every phase in steps (``size_phases_in_steps``; on ``resume`` the same steps as the checkpoint's
    run) and the index of the phase it starts in (the checkpoint's step's on ``resume``, else 0)."""
    check_output_dir(config)
    start = load_start(config)
    base = size_phases_in_steps(config.for_world_size(d.world_size), d)  # (accumulation of the global batch;
    # phases of tokens, max_steps 0: the run's length in steps now)
    check_phase_steps_on_resume(config, base, start, d)
    return start, base, phase_at(base.phase_settings(), start.checkpoint_state()[1]["step"] if config.resume else 0)


def _plot_unavailable(d: DistInfo) -> str | None:
    """Why ``metrics.png`` cannot be drawn at the end (main rank; None: it can, or another rank), warned now."""
    no_plot = plotting_unavailable() if d.is_main else None
    if no_plot:  # said now, not after training; metrics.jsonl holds the same numbers
        logger.warning("%s: metrics.png will not be drawn at the end (metrics.jsonl has every figure)", no_plot)
    return no_plot


def _check_model_and_shards(
    config: TrainConfig, base: TrainConfig, phase: int, info: ShardInfo, start: Start, d: DistInfo
) -> tuple[Start, ModelConfig, ShardInfo | None]:
    """The slow checks, before the model is built: ``start`` with the shards' vocab (``extend_start_vocab``), the
    model config (checked now against every phase's RoPE bases and shards, not when a phase begins) and the eval
    shards' info (``read_eval_shards``); with ``verify_shards``, this rank's shard files against their manifest."""
    start = extend_start_vocab(config, info, start)
    model_config = model_config_for(config, info, start, phase)
    check_rope_keys(base, model_config)  # every phase now, not when it begins
    check_later_phases(base, phase, info, model_config, int(config.cache_max_gb * 1e9))
    eval_info = read_eval_shards(config, info, model_config, d)
    verify_shards(config, (info, eval_info), d)
    return start, model_config, eval_info


def _model_and_optimizer(
    config: TrainConfig,
    base: TrainConfig,
    phase: int,
    model_config: ModelConfig,
    info: ShardInfo,
    start: Start,
    d: DistInfo,
    device: torch.device,
) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    """The seeded model on ``device`` with ``start``'s weights and ``phase``'s RoPE bases, its optimizer and its
    learning-rate schedule (the warm-up of ``lr_warmup``); the state of neither is restored yet."""
    model = build_model(config, model_config, start, d, device)
    set_rope_theta(model, model_config, base.phase_settings(), phase)
    optimizer, scheduler = build_optimizer(config, model, lr_warmup(base, info, phase, d))
    return model, optimizer, scheduler


def _precision(
    config: TrainConfig, device: torch.device, d: DistInfo
) -> tuple[contextlib.AbstractContextManager, float | None]:
    """The autocast context of ``config.precision`` on ``device`` (warning when bf16 would be emulated) and one
    GPU's peak FLOP/s in the run's matmul precision (``Run.peak_flops``)."""
    autocast = autocast_context(device, config.precision)
    warn_if_bf16_is_emulated(config, device, d)
    return autocast, device_peak_flops(device, matmul_precision(device, uses_bf16(device, config.precision)))


def _open_output_dir(config: TrainConfig, step: int, cleanup: contextlib.ExitStack, d: DistInfo) -> MetricsLog | None:
    """Create ``output_dir`` (every rank) and open ``metrics.jsonl`` in it (``open_metrics_log``; main rank, None
    on the others)."""
    os.makedirs(config.output_dir, exist_ok=True)
    return open_metrics_log(config, step, cleanup) if d.is_main else None


def _stop_if_requested(stop_requested: Callable[[], str | None], d: DistInfo) -> None:
    """Raise ``StoppedBeforeTraining`` when a stop signal arrived (without DDP; see ``build_run``)."""
    received = stop_requested()
    if received and not d.enabled:
        raise StoppedBeforeTraining(received)


def metrics_path(config: TrainConfig) -> str:
    return os.path.join(config.output_dir, "metrics.jsonl")


def open_metrics_log(config: TrainConfig, step: int, cleanup: contextlib.ExitStack) -> MetricsLog:
    """``metrics.jsonl`` (on ``resume``, without the lines logged after the checkpoint's ``step``) and the
    ``report_to`` reporter (``reporting.open_reporter``), and without a progress bar a line per training record
    on stderr; ``cleanup`` closes them however the run ends."""
    console = None if config.progress else ConsoleReporter(config.max_steps)
    reporter = open_reporter(
        config.report_to,
        config.output_dir,
        job_type="pretrain",
        config=dataclasses.asdict(config),
        resume_step=step if config.resume else None,
    )
    log = MetricsLog(JsonlWriter(metrics_path(config), truncate_after_step=step), console, reporter)
    cleanup.push(log.__exit__)
    return log


def enter_phase(run: Run, index: int) -> None:
    """Switch ``run`` to phase ``index`` after the last step of the one before: its settings, its shards
    (checked like the first phase's: same vocab, rows the model can take), a new loader over them at their
    start, its full batch (the batch-size warm-up is the first phase's) and its RoPE bases. Logged (main rank).

    Raises:
        ValueError: the phase's shards do not fit the model.
        FileNotFoundError: they have no manifest.
    """
    config = run.base_config.for_phase(index)
    info = shard_info(config, config.shards)
    check_compatible(
        info,
        vocab_sha256=run.info.vocab_sha256,
        vocab_size=run.model_config.vocab_size,
        max_position_embeddings=max_sequence_length(run.model_config),
        what=f"phase {index + 1}'s model",
    )
    verify_shards(config, (info, None), run.d)
    run.batches.close()
    run.config, run.info, run.phase = config, info, index
    run.loader = train_loader(dataclasses.replace(config, resume=None), info, Start(), run.d, run.device)
    run.batches = iter(run.loader)
    run.batch_warmup = batch_size_warmup(config, info, run.d, index)
    set_rope_theta(run.model, run.model_config, run.base_config.phase_settings(), index)
    if run.d.is_main:
        logger.info(
            "phase %d: %s (max_seq_length %d), batch %d x %d micro-batches per process",
            index + 1,
            config.shards,
            info.max_seq_length,
            config.batch_size,
            config.gradient_accumulation_steps,
        )


def warn_if_bf16_is_emulated(config: TrainConfig, device: torch.device, d: DistInfo) -> None:
    """Warn (main rank) when bf16 autocast on this CPU would be emulated, hence slower than fp32."""
    if device.type == "cpu" and uses_bf16(device, config.precision) and cpu_has_native_bf16() is False and d.is_main:
        logger.warning(
            "precision bf16 on a CPU without bf16 instructions (avx512_bf16/amx_bf16) is emulated "
            "and slower than fp32; use --precision fp32"
        )


def log_run(
    config: TrainConfig,
    start: Start,
    model: nn.Module,
    info: ShardInfo,
    device: torch.device,
    d: DistInfo,
    step: int,
) -> None:
    """Log (main rank) what is trained on what, and where a resumed run picks up."""
    if not d.is_main:
        return
    logger.info(
        "model %s: %.1fM parameters; data %s: %d shards, %d instances, max_seq_length %d, "
        "objective %s; device %s (%s), world size %d; global batch %d",
        "from checkpoint"
        if start.saved is not None or start.hf_source is not None
        else f"{config.preset} {config.architecture}",  # "model tiny bert: ..."
        model.num_parameters() / 1e6,
        config.shards,
        info.num_shards,
        info.num_rows,
        info.max_seq_length,
        info.objective,
        device,
        "bf16 autocast" if uses_bf16(device, config.precision) else "fp32",
        d.world_size,
        config.batch_size * config.gradient_accumulation_steps * d.world_size,
    )
    if architectures.architecture_of(model.config) == "modernbert":
        logger.info(
            "ModernBERT trains the masked LM alone (sparse prediction: the head runs on the masked positions only)%s",
            f"; the shards' next_sentence_label (objective {info.objective}) is ignored"
            if info.has_sentence_label
            else "",
        )
    if config.packing:
        logger.info(
            "packing: each micro-batch is %d rows of %d tokens filled first-fit with whole instances "
            "(positions restart per instance, each instance attends to itself alone)",
            config.batch_size,
            info.max_seq_length,
        )
    if config.resume:
        logger.info("resumed from %s at step %d", start.checkpoint, step)
