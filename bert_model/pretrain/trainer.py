"""The pre-training loop: MLM + NSP on shards, on CPU, one GPU, or N GPUs under ``torchrun``.

Defaults are the paper's (section A.2) and google-research/bert ``run_pretraining.py``: AdamW with lr 1e-4,
betas 0.9 / 0.999, epsilon 1e-6, weight decay 0.01 (not on biases and LayerNorm), 10,000 linear warm-up steps
then linear decay to 0 at ``max_steps`` (1,000,000), gradient clipping at global norm 1.0, dropout 0.1.

Each optimizer step consumes ``gradient_accumulation_steps`` micro-batches of ``batch_size`` instances per
rank: global batch = batch_size x gradient_accumulation_steps x world size (the paper: 256 sequences).

Outputs in ``output_dir``: ``metrics.jsonl`` (one JSON object per log / eval step), ``metrics.png`` (curves,
at the end) and ``checkpoints/step-NNNNNN/`` (see ``checkpoint.py``). ``resume`` continues a run exactly
(same weights, optimizer, schedule, data order and RNG streams as if never stopped, given the same world
size and loader workers); ``init_from`` starts a new run from a checkpoint's weights only (e.g. phase 2 of
the paper's recipe at 512 tokens after phase 1 at 128). The settings are ``train_config.TrainConfig``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.metrics import NSP_LOSS_WEIGHT, PretrainingMetrics, plot_metrics
from bertprep.bert_model.optim import optimizer_step
from bertprep.bert_model.pretrain import build, data_setup
from bertprep.bert_model.pretrain.architectures import training_flops
from bertprep.bert_model.pretrain.data import ShardReadError
from bertprep.bert_model.pretrain.data_setup import warn_if_not_held_out as _warn_if_not_held_out  # noqa: F401 (tests)
from bertprep.bert_model.pretrain.distributed import DistInfo, StopSignals, any_rank, gather, setup_distributed
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.phases import phase_at
from bertprep.bert_model.pretrain.train_config import (  # re-exported (__all__): where cli/ and tests import them
    DROPOUT_OPTIONS,
    TASKS,
    TrainConfig,
)
from bertprep.core.storage import is_remote

logger = logging.getLogger("bertprep.train")


@dataclass
class TrainResult:
    """What ``train`` returns (on every rank)."""

    step: int
    """Optimizer steps done in total (resumed ones included)."""
    model: nn.Module | None
    """The trained model, ``BertForPreTraining`` or ``ModernBertForMaskedLM`` (not wrapped in DDP / compile); None
    when a signal stopped the run before its first step."""
    checkpoint: str | None
    """Path of the last checkpoint written (None on ranks other than 0)."""
    metrics: dict[str, Any] | None
    """The last training metrics line."""
    eval_metrics: dict[str, Any] | None
    """The last evaluation metrics line."""
    data_cursor: dict[str, Any]
    """This rank's data cursor at the end."""
    stop_reason: str
    """``max_steps``, ``stop_after_steps``, ``max_time``, or ``SIGTERM`` / ``SIGINT`` (see ``train``;
    ``signal on another rank`` on the ranks that did not receive it)."""

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal rather than by a limit the configuration set."""
        return self.stop_reason not in ("max_steps", "stop_after_steps", "max_time")


# ------------------------------------------------------------------------------------------------ helpers


def _move(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: ShardLoader | Any,
    *,
    device: torch.device,
    max_batches: int = 0,
    autocast: contextlib.AbstractContextManager | None = None,
    mask_token_id: int | None = None,
    nsp_loss_weight: float = NSP_LOSS_WEIGHT,
) -> dict[str, float]:
    """Mean MLM / NSP loss and accuracy of ``model`` over ``loader`` (the first ``max_batches``; 0 = all),
    summed over DDP ranks; with ``mask_token_id``, also ``mlm_accuracy_at_mask`` (see ``PretrainingMetrics``).
    ``loss`` weighs the NSP loss by ``nsp_loss_weight``, as training does. The model is put in eval mode and
    back to train mode afterwards."""
    was_training = model.training
    model.eval()
    metrics = PretrainingMetrics(device, mask_token_id, nsp_loss_weight)
    for i, batch in enumerate(loader):
        if max_batches and i >= max_batches:
            break
        batch = _move(batch, device)
        with autocast or contextlib.nullcontext():
            out = model(**batch)
        metrics.update(batch, out)
    model.train(was_training)
    result = metrics.compute()
    keys = (
        "loss",
        "mlm_loss",
        "mlm_accuracy",
        "mlm_accuracy_at_mask",
        "nsp_loss",
        "nsp_accuracy",
        "sequences",
        "masked_fraction",
    )
    return {k: result[k] for k in keys if k in result}


# ------------------------------------------------------------------------------------------------- train


def train(config: TrainConfig) -> TrainResult:
    """Pre-train a BERT on ``config.shards`` (see the module docstring); returns on every rank.

    A SIGTERM or SIGINT (first one) makes every rank stop after the current optimizer step, evaluate (when
    ``eval_shards`` is set) and write a checkpoint, and return with ``stop_reason`` set to the signal's name;
    ``resume`` continues from there as from any checkpoint. One that arrives before the first step stops the
    run there (after the part being built: the shards' check, the model), with nothing trained and no new
    checkpoint.

    Raises:
        ValueError: bad settings, an output directory that already holds checkpoints (without ``resume``), or
            shards that do not fit the model / checkpoint (vocab fingerprint, vocab size, max_seq_length), with
            a message that names the directory and the fix.
        FileNotFoundError: missing shard manifest or checkpoint.
        checkpoint.CheckpointError (a ValueError): the checkpoint to resume or start from is damaged (its
            files do not match the sha256 recorded when it was written), or every checkpoint of the run is.
        checkpoint.CheckpointWriteError (an OSError): a checkpoint could not be written (disk full); the
            earlier ones are intact.
        FloatingPointError: the training loss became NaN or infinite.
    """
    d, device = setup_distributed(config.device)
    try:
        # ``cleanup`` stops the loader workers however _train ends (an exception included): a worker left
        # running would keep the process from exiting (see data.ShardLoader).
        with StopSignals() as signals, contextlib.ExitStack() as cleanup:
            return _train(config, d, device, signals, cleanup)
    except build.StoppedBeforeTraining as stopped:
        return _stopped_before_training(config, stopped.args[0])
    finally:
        if d.owns_group:
            dist.destroy_process_group()


@dataclass
class _LoopState:
    """Where the loop is; ``_train_step``, ``_log_train_metrics``, ``_check_stop`` and ``_finish`` update it."""

    step: int
    """Optimizer steps done (resumed ones included)."""
    tokens_seen: int
    """Real (non-padding) tokens this rank trained on."""
    first_step: int
    """The step this process started at."""
    last_saved: int
    """The step of the last checkpoint written (-1: none)."""
    stop_reason: str = "max_steps"
    last_record: dict[str, Any] | None = None
    last_eval: dict[str, Any] | None = None
    last_ckpt: str | None = None
    window_start: float = 0.0
    """When the current logging window started (``time.monotonic``)."""
    paused: float = 0.0
    """Seconds of the window spent evaluating and checkpointing (not training)."""
    step_cursor: dict[str, Any] | None = None
    """The data cursor when the step under way began (``loader.state_dict()``), what a checkpoint of the
    last finished step saves when a shard fails mid-step (``_checkpoint_after_shard_error``)."""
    step_tokens_seen: int = 0
    """``tokens_seen`` when the step under way began."""
    step_global_batch: int = 0
    """Rows of the last step over all processes (logged during a batch-size warm-up: a phase entered after the
    step does not change it)."""


def _train(
    config: TrainConfig, d: DistInfo, device: torch.device, signals: StopSignals, cleanup: contextlib.ExitStack
) -> TrainResult:
    """``train``'s recipe: build, then step, log, evaluate, stop or checkpoint until done; finish."""
    run, step, tokens_seen = build.build_run(
        config, d, device, cleanup, t_start=time.monotonic(), stop_requested=lambda: signals.received
    )
    if any_rank((signals.received is not None,), d, device)[0]:  # (every rank: under DDP none may go on alone)
        raise build.StoppedBeforeTraining(signals.received or "signal on another rank")
    config = run.base_config  # (every phase in steps, max_steps their sum)
    state = _LoopState(step=step, tokens_seen=tokens_seen, first_step=step, last_saved=step if config.resume else -1)
    metrics = PretrainingMetrics(device, run.mask_token_id, run.config.nsp_loss_weight)  # logs the optimised loss
    bar = tqdm(
        total=config.max_steps,
        initial=state.step,
        disable=not (config.progress and d.is_main),
        dynamic_ncols=True,
        unit="step",
    )
    state.window_start = time.monotonic()
    run.train_model.train()
    while state.step < config.max_steps:
        try:
            lr, grad_norm = _train_step(run, state, metrics)
        except ShardReadError as err:
            bar.close()
            raise _checkpoint_after_shard_error(run, state, err) from None
        bar.update(1)
        try:
            stop = _after_step(run, state, metrics, signals, (lr, grad_norm), bar)
        except ckpt.CheckpointWriteError:
            raise  # (no checkpoint can be written: the earlier ones are intact)
        except (ValueError, OSError) as err:  # a later phase's shards, the eval shards...: the step is kept
            bar.close()
            raise _checkpoint_after_error(run, state, err) from None
        if stop:
            break
    bar.close()
    return _finish(run, state)


def _after_step(
    run: build.Run,
    state: _LoopState,
    metrics: PretrainingMetrics,
    signals: StopSignals,
    step_figures: tuple[float, torch.Tensor | None],
    bar: tqdm,
) -> bool:
    """What follows a step: the next phase (before this step's evaluation and checkpoint), the metrics line, the
    evaluation and the periodic checkpoint; returns whether to stop (``_check_stop``)."""
    config, phases = run.base_config, run.base_config.phase_settings()
    if phases and state.step < config.max_steps and phase_at(phases, state.step) != run.phase:
        build.enter_phase(run, phase_at(phases, state.step))
    if state.step % config.log_interval == 0 or state.step == config.max_steps:
        _log_train_metrics(run, state, metrics, *step_figures, bar)
    t_pause = time.monotonic()
    if config.eval_shards and config.eval_every and state.step % config.eval_every == 0:
        state.last_eval = _run_eval(run, state)
    stop = _check_stop(run, state, signals)
    if config.save_every and state.step % config.save_every == 0 and not stop and state.step < config.max_steps:
        state.last_ckpt, state.last_saved = _save(run, state), state.step
    state.paused += time.monotonic() - t_pause
    return stop


def _stopped_before_training(config: TrainConfig, signal_name: str) -> TrainResult:
    """What ``train`` returns when a signal stopped it before its first step: nothing trained and no model;
    on ``resume`` the checkpoint it started from is still the run's latest."""
    checkpoint, step = None, 0
    if config.resume:
        checkpoint = ckpt.resolve_checkpoint(config.resume)
        step = ckpt.read_checkpoint_state(checkpoint)["step"]
    logger.info("stopped by %s before the first step: nothing trained%s", signal_name, "" if checkpoint else
                ", no checkpoint written")  # fmt: skip
    return TrainResult(step=step, model=None, checkpoint=checkpoint, metrics=None, eval_metrics=None,
                       data_cursor={}, stop_reason=signal_name)  # fmt: skip


def _train_step(run: build.Run, state: _LoopState, metrics: PretrainingMetrics) -> tuple[float, torch.Tensor | None]:
    """One optimizer step over ``gradient_accumulation_steps`` micro-batches (fewer during a batch-size warm-up:
    ``run.batch_warmup``, the same on every rank; DDP syncs gradients on the last only); returns the learning
    rate and the gradient norm before clipping (see ``optim.optimizer_step``)."""
    config, train_model = run.config, run.train_model
    state.step_cursor, state.step_tokens_seen = run.loader.state_dict(), state.tokens_seen
    accumulation = run.batch_warmup.micro_batches(state.step)
    state.step_global_batch = config.batch_size * accumulation * run.d.world_size
    for micro in range(accumulation):
        batch = next(run.batches)
        state.tokens_seen += int(batch["attention_mask"].sum())  # on the host: no device sync
        batch = _move(batch, run.device)
        last_micro = micro == accumulation - 1
        sync: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        # (build.wrap_model wraps the model in DDP when the run is distributed)
        if isinstance(train_model, nn.parallel.DistributedDataParallel) and not last_micro:
            sync = train_model.no_sync()
        with sync:
            with run.autocast:
                out = train_model(**batch)
            loss = out.training_loss(config.nsp_loss_weight)  # (architectures.PretrainingOutput)
            (loss / accumulation).backward()
        metrics.update(batch, out)
    lr, grad_norm = optimizer_step(run.model, run.optimizer, run.scheduler, config.max_grad_norm)
    state.step += 1
    return lr, grad_norm


def _log_train_metrics(
    run: build.Run, state: _LoopState, metrics: PretrainingMetrics, lr: float, grad_norm: torch.Tensor | None, bar: tqdm
) -> None:
    """Write the window's training metrics to ``metrics.jsonl`` and the progress bar, and start a new window.

    Raises:
        FloatingPointError: the loss is NaN or infinite.
    """
    elapsed = time.monotonic() - state.window_start - state.paused
    m = metrics.compute(extra={"tokens_seen": state.tokens_seen})
    metrics.reset()
    if not math.isfinite(m["loss"]):
        raise FloatingPointError(
            f"training loss is {m['loss']} at step {state.step}; lower --learning-rate or raise --warmup-steps"
        )
    record = {
        "step": state.step,
        "split": "train",
        **{k: m[k] for k in ("loss", "mlm_loss", "mlm_accuracy", "mlm_accuracy_at_mask", "nsp_loss", "nsp_accuracy")},
        "lr": lr,
        "tokens_per_s": m["tokens"] / elapsed,  # real (non-padding) tokens
        "real_token_fraction": m["tokens"] / m["padded_tokens"],
        "masked_lm_prob": data_setup.train_masked_lm_prob(run.config, run.info, state.step),
        "masked_fraction": m["masked_fraction"],
        "tokens_seen": int(m["tokens_seen"]),
        "elapsed_s": time.monotonic() - run.t_start,
        # CPU seconds (user + system, all threads) of this process since it started: on a shared machine, the
        # compute the run used (loader workers, --num-workers > 0, are other processes and not counted).
        "process_cpu_s": time.process_time(),
    }
    if grad_norm is not None:
        record["grad_norm"] = float(grad_norm)
    if run.config.batch_size_warmup_tokens:  # the global batch of the last step (instances, or packed rows)
        record["global_batch_size"] = state.step_global_batch
    record.update(model_flops(run, m, elapsed))
    state.last_record = record
    if run.writer:
        run.writer.write(record)
        nsp = {"nsp_acc": f"{m['nsp_accuracy']:.3f}"} if m["nsp_accuracy"] is not None else {}
        mfu = {"mfu": f"{record['mfu']:.1%}"} if "mfu" in record else {}
        bar.set_postfix(
            loss=f"{m['loss']:.3f}",
            mlm_acc=f"{m['mlm_accuracy']:.3f}",
            **nsp,
            tok_s=f"{record['tokens_per_s']:.0f}",
            **mfu,
        )
    state.window_start, state.paused = time.monotonic(), 0.0


def model_flops(run: build.Run, m: dict[str, float], elapsed: float) -> dict[str, float]:
    """``model_flops_per_s`` (all ranks) and, where the GPU's peak is known, ``mfu`` of a logging window.

    Model FLOPs are ``architectures.training_flops`` of the model config (``bert_config.flops``: 6 N per real
    token for the weights, 12 L H per (query, key) pair of each document's own sum(l^2) for attention, PaLM
    appendix B / Megatron's accounting, the MLM head at the predicted positions only): padding a kernel
    computes, and attention across the documents of a packed row, is not useful work. MFU divides by the peak
    of ``world_size`` such GPUs in the precision the run's matmuls use (``metrics.GPU_PEAK_FLOPS``: bf16, TF32
    or fp32); on a CPU or an unknown GPU only the FLOP rate and tokens/s are reported.
    """
    flops = training_flops(run.model_config, m["tokens"], m["attention_pairs"], m["masked_fraction"])
    out = {"model_flops_per_s": flops / elapsed}
    if run.peak_flops is not None:
        out["mfu"] = out["model_flops_per_s"] / (run.peak_flops * run.d.world_size)
    return out


def _run_eval(run: build.Run, state: _LoopState) -> dict[str, Any]:
    """Evaluate on ``eval_shards`` (the first ``eval_batches``) after ``state.step``; log the result (main rank)
    and return it. The record carries the run's ``tokens_seen`` (all ranks), ``elapsed_s`` and ``process_cpu_s``
    when the evaluation began, as training lines do, so curves against tokens or minutes need no interpolation."""
    assert run.eval_info is not None, "evaluations run with eval_shards, whose info build.read_eval_shards read"
    at_step = state.step
    progress = {
        "tokens_seen": int(sum(gather(state.tokens_seen, run.d))),
        "elapsed_s": time.monotonic() - run.t_start,
        "process_cpu_s": time.process_time(),
    }
    result = evaluate(
        run.eval_model,
        data_setup.eval_loader(run.config, run.eval_info, run.d),
        device=run.device,
        max_batches=run.config.eval_batches,
        autocast=run.autocast,
        mask_token_id=run.mask_token_id,
        nsp_loss_weight=run.config.nsp_loss_weight,
    )
    rate = data_setup.eval_masked_lm_prob(run.config, run.eval_info)
    record = {"step": at_step, "split": "eval", **result, "masked_lm_prob": rate, **progress}
    if run.writer:
        run.writer.write(record)
        tqdm.write(
            f"eval step {at_step}: loss {result['loss']:.4f}, MLM accuracy "
            f"{result['mlm_accuracy']:.4f} ({result['mlm_accuracy_at_mask']:.4f} at [MASK])"
            + (f", NSP accuracy {result['nsp_accuracy']:.4f}" if result.get("nsp_accuracy") is not None else "")
        )
    return record


def _check_stop(run: build.Run, state: _LoopState, signals: StopSignals) -> bool:
    """Whether to stop after this step (``stop_after_steps``, ``max_time`` or a signal), recording why in
    ``state.stop_reason``. Every rank gets the same answer: a deadline or signal seen by one stops them all."""
    config = run.config
    reason = None
    if config.stop_after_steps is not None and state.step - state.first_step >= config.stop_after_steps:
        reason = "stop_after_steps"
    timed_out = config.max_time_minutes is not None and time.monotonic() - run.t_start >= config.max_time_minutes * 60
    any_timed_out, any_signal = any_rank((timed_out, signals.received is not None), run.d, run.device)
    if any_timed_out:
        reason = "max_time"
    if any_signal:
        reason = signals.received or "signal on another rank"
    if reason is not None:
        state.stop_reason = reason
    return reason is not None


def _checkpoint_after_shard_error(run: build.Run, state: _LoopState, err: ShardReadError) -> ShardReadError:
    """A shard failed mid-run (truncated or replaced under the trainer): write a checkpoint of the last finished
    step, unless one exists, and return the error to raise, saying where to continue from.

    The checkpoint has the weights, optimizer and schedule of that step and the data cursor from its end
    (``state.step_cursor``), so no batch is skipped; the RNG streams are the current ones (a step cut short
    by ``gradient_accumulation_steps`` > 1 drew dropout for its first micro-batches). Under DDP the other ranks
    cannot join a checkpoint, so none is written there.
    """
    resume = (
        f"continue with --resume {run.config.output_dir} once the shards can be read again "
        "(whole, and the store reachable)"
    )
    if state.step == 0 or run.d.enabled:
        return ShardReadError(f"{err}; no checkpoint written (no step finished)" if state.step == 0 else str(err))
    if state.last_saved != state.step:
        at_step = dataclasses.replace(state, tokens_seen=state.step_tokens_seen)
        path = _save(run, at_step, cursor=state.step_cursor)
        return ShardReadError(f"{err}; step {state.step}, the last finished, is checkpointed in {path}: {resume}")
    return ShardReadError(f"{err}; step {state.step}, the last finished, has its checkpoint: {resume}")


def _checkpoint_after_error(run: build.Run, state: _LoopState, err: ValueError | OSError) -> Exception:
    """A fault after a finished step (a later phase's shards that fail their check when the phase begins, eval
    shards that cannot be read): write a checkpoint of that step, unless one exists, and return the error to
    raise, saying where to continue from. At a phase's first step the checkpoint's data cursor is the new phase's
    start, where a resumed run begins that phase. Under DDP the other ranks cannot join a checkpoint, so none is
    written there."""
    resume = f"continue with --resume {run.config.output_dir} once that is fixed"
    if run.d.enabled:
        return err
    if state.last_saved == state.step:
        message = f"{err}; step {state.step} has its checkpoint: {resume}"
    else:
        cursor = None
        phases = run.base_config.phase_settings()
        if phases and phase_at(phases, state.step) != run.phase:  # the next phase did not begin
            cursor = {**run.loader.state_dict(), "batches": 0}
            cursor["streams"] = [None] * len(cursor["streams"])  # (a new loader's: the phase's shards from start)
        try:
            path = _save(run, state, cursor=cursor)
            message = f"{err}; step {state.step} is checkpointed in {path}: {resume}"
        except OSError as save_err:
            message = f"{err}; and no checkpoint could be written: {save_err}"
    try:
        return type(err)(message)
    except TypeError:  # (an error class that takes other arguments)
        return ValueError(message)


def _save(run: build.Run, state: _LoopState, cursor: dict[str, Any] | None = None) -> str | None:
    """Write a checkpoint at ``state.step`` (every rank's RNG, data cursor and token count; the main rank
    writes); returns its path on the main rank, None elsewhere. ``cursor``: the data cursor to save instead of
    the loader's (see ``_checkpoint_after_shard_error``)."""
    config, d, info = run.config, run.d, run.info
    cursor = cursor if cursor is not None else run.loader.state_dict()
    per_rank = gather({"rng": ckpt.capture_rng_state(), "data_cursor": cursor, "tokens_seen": state.tokens_seen}, d)
    path = None
    if d.is_main:
        state_json = {
            "step": state.step,
            "tokens_seen": sum(r["tokens_seen"] for r in per_rank),
            "scheduler": run.scheduler.state_dict(),
            "phase": run.phase,
            "phase_steps": [p["steps"] for p in run.base_config.phase_settings()],
            "model_config": run.model_config.to_dict(),
            "train_config": run.recorded_config,
            "data": {
                "vocab_sha256": info.vocab_sha256,
                "vocab_size": info.vocab_size,
                "max_seq_length": info.max_seq_length,
                "special_token_ids": info.special_token_ids,
                "shards": config.shards if is_remote(config.shards) else os.path.abspath(config.shards),
            },
            "world_size": d.world_size,
            "ranks": per_rank,
            "torch_version": torch.__version__,
        }
        path = ckpt.save_checkpoint(
            config.output_dir,
            state.step,
            model=run.model,
            optimizer=run.optimizer,
            state=state_json,
            hf_config=run.model_config.to_hf_dict(),
            vocab_file=info.vocab_file,
            keep_last=config.keep_last,
        )
    if d.enabled:
        dist.barrier()
    return path


def _finish(run: build.Run, state: _LoopState) -> TrainResult:
    """Evaluate and checkpoint the last step (unless done already), close ``metrics.jsonl``, draw
    ``metrics.png`` and say why the run stopped."""
    config = run.config
    if config.eval_shards and (state.last_eval is None or state.last_eval["step"] != state.step):
        state.last_eval = _run_eval(run, state)
    if state.last_saved != state.step:
        state.last_ckpt = _save(run, state)
    if run.writer:
        run.writer.close()
        if not run.no_plot:
            plot_metrics(build.metrics_path(config), os.path.join(config.output_dir, "metrics.png"))
        logger.info("stopped at step %d (%s); checkpoint %s", state.step, state.stop_reason, state.last_ckpt)
    return TrainResult(
        step=state.step,
        model=run.model,
        checkpoint=state.last_ckpt,
        metrics=state.last_record,
        eval_metrics=state.last_eval,
        data_cursor=run.loader.state_dict(),
        stop_reason=state.stop_reason,
    )


__all__ = ["DROPOUT_OPTIONS", "TASKS", "TrainConfig", "TrainResult", "evaluate", "train"]
