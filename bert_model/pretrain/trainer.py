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
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.distributed import DistInfo, StopSignals, any_rank, gather, setup_distributed
from bertprep.bert_model.hf.interop import hf_model_config, load_model_source, load_pretraining_weights
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.metrics import (
    JsonlWriter,
    PretrainingMetrics,
    gpu_peak_flops,
    plot_metrics,
    plotting_unavailable,
)
from bertprep.bert_model.model import BertConfig, BertForPreTraining, flops_per_token
from bertprep.bert_model.optim import create_optimizer, create_scheduler, optimizer_step
from bertprep.bert_model.precision import autocast_context, cpu_has_native_bf16, uses_bf16
from bertprep.bert_model.runtime import seed_everything
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible, read_shard_info, verify_shard_files
from bertprep.bert_model.pretrain.train_config import (  # re-exported (__all__): where cli/ and tests import them
    DROPOUT_OPTIONS,
    TASKS,
    TrainConfig,
)
from bertprep.pipeline import schema

logger = logging.getLogger("bertprep.train")


@dataclass
class TrainResult:
    """What ``train`` returns (on every rank)."""

    step: int
    """Optimizer steps done in total (resumed ones included)."""
    model: BertForPreTraining
    """The trained model (not wrapped in DDP / compile)."""
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


def _warn_if_not_held_out(shards: str, eval_shards: str, is_main: bool) -> None:
    """Warn (main rank) when ``eval_shards`` may share documents with ``shards``: the same directory, or not
    the held-out set make-shards made with them (``schema.held_out_mismatch``)."""
    if not is_main:
        return
    if os.path.realpath(shards) == os.path.realpath(eval_shards):
        problem = "it is the training shards themselves"
    else:
        problem = schema.held_out_mismatch(schema.read_manifest(shards), schema.read_manifest(eval_shards))
    if problem:
        logger.warning(
            "--eval-shards %s: %s; it may share documents with the training data, so the eval "
            "figures may be optimistic (make-shards --eval-fraction makes a held-out set)",
            eval_shards,
            problem,
        )


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
) -> dict[str, float]:
    """Mean MLM / NSP loss and accuracy of ``model`` over ``loader`` (the first ``max_batches``; 0 = all),
    summed over DDP ranks; with ``mask_token_id``, also ``mlm_accuracy_at_mask`` (see ``PretrainingMetrics``).
    The model is put in eval mode and back to train mode afterwards."""
    was_training = model.training
    model.eval()
    metrics = PretrainingMetrics(device, mask_token_id)
    for i, batch in enumerate(loader):
        if max_batches and i >= max_batches:
            break
        batch = _move(batch, device)
        with autocast or contextlib.nullcontext():
            out = model(**batch)
        metrics.update(batch, out)
    model.train(was_training)
    result = metrics.compute()
    keys = ("loss", "mlm_loss", "mlm_accuracy", "mlm_accuracy_at_mask", "nsp_loss", "nsp_accuracy", "sequences")
    return {k: result[k] for k in keys if k in result}


# ------------------------------------------------------------------------------------------------- train


def train(config: TrainConfig) -> TrainResult:
    """Pre-train a BERT on ``config.shards`` (see the module docstring); returns on every rank.

    A SIGTERM or SIGINT (first one) makes every rank stop after the current optimizer step, evaluate (when
    ``eval_shards`` is set) and write a checkpoint, and return with ``stop_reason`` set to the signal's name;
    ``resume`` continues from there as from any checkpoint.

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
    finally:
        if d.owns_group:
            dist.destroy_process_group()


def _train(
    config: TrainConfig, d: DistInfo, device: torch.device, signals: StopSignals, cleanup: contextlib.ExitStack
) -> TrainResult:
    t_start = time.monotonic()
    if not config.resume and ckpt.list_checkpoints(os.path.join(config.output_dir, ckpt.CHECKPOINTS_DIR)):
        raise ValueError(
            f"{config.output_dir} already holds checkpoints of a run; continue it with --resume "
            f"{config.output_dir}, or choose another --output-dir"
        )
    info = read_shard_info(config.shards)
    mask_token_id = info.special_token_ids["[MASK]"]  # read_shard_info checked it is there
    no_plot = plotting_unavailable() if d.is_main else None
    if no_plot:  # said now, not after training; metrics.jsonl holds the same numbers
        logger.warning("%s: metrics.png will not be drawn at the end (metrics.jsonl has every figure)", no_plot)
    source_ckpt, saved, hf_source = None, None, None
    # Checkpoints are checked against the sha256 recorded in their state.json; from a run directory a damaged
    # latest checkpoint is skipped (with a warning) for the previous intact one.
    if config.resume:
        source_ckpt, saved = ckpt.load_intact_checkpoint(config.resume)
    elif config.init_from:
        try:
            source_ckpt, saved = ckpt.load_intact_checkpoint(config.init_from)
        except FileNotFoundError:  # not a bertprep checkpoint: a Hugging Face BERT directory (or an error)
            hf_source = load_model_source(config.init_from)

    # Model config: the checkpoint's, else the preset with overrides and the shards' vocab.
    if saved is not None:
        model_config = BertConfig.from_dict(saved["model_config"])
        overrides = config.model_overrides()
        # Dropout is a training setting, not part of the weights: a new run from a checkpoint may change it
        # (e.g. no dropout when continuing pre-training); an exact resume keeps the checkpoint's.
        dropout = {k: v for k, v in overrides.items() if k in DROPOUT_OPTIONS} if config.init_from else {}
        if dropout:
            model_config = dataclasses.replace(model_config, **dropout)
            logger.info("dropout from the command line, not %s: %s", source_ckpt, dropout)
        ignored = sorted(set(overrides) - set(dropout))
        if ignored:
            logger.warning("model options %s ignored: the model config comes from %s", ignored, source_ckpt)
        check_compatible(
            info,
            vocab_sha256=saved["data"]["vocab_sha256"],
            vocab_size=model_config.vocab_size,
            max_seq_length=saved["data"]["max_seq_length"] if config.resume else None,
            max_position_embeddings=model_config.max_position_embeddings,
            what=f"checkpoint {source_ckpt}",
        )
    elif hf_source is not None:
        model_config = hf_model_config(config, info, hf_source)
    else:
        model_config = BertConfig.from_preset(
            config.preset, vocab_size=info.vocab_size, pad_token_id=info.pad_token_id, **config.model_overrides()
        )
        check_compatible(
            info, vocab_size=model_config.vocab_size, max_position_embeddings=model_config.max_position_embeddings
        )
    eval_info: ShardInfo | None = None
    if config.eval_shards:
        eval_info = read_shard_info(config.eval_shards)
        check_compatible(
            eval_info,
            vocab_sha256=info.vocab_sha256,
            vocab_size=model_config.vocab_size,
            max_seq_length=info.max_seq_length,
            what=f"the training shards {config.shards}",
        )
        _warn_if_not_held_out(config.shards, config.eval_shards, d.is_main)
    elif d.is_main and os.path.exists(os.path.join(config.shards, schema.EVAL_DIR, schema.MANIFEST_NAME)):
        logger.info(
            "%s holds the held-out set made with these shards; pass --eval-shards %s to evaluate on it",
            os.path.join(config.shards, schema.EVAL_DIR),
            os.path.join(config.shards, schema.EVAL_DIR),
        )
    if config.verify_shards:  # never train on bytes that are not the ones make-shards wrote
        t_verify = time.monotonic()
        for shard_info in (info, eval_info):
            if shard_info is not None:
                verify_shard_files(shard_info, rank=d.rank, world_size=d.world_size)
        if d.is_main:
            logger.info(
                "shard files match the sha256 of their manifest (%.1f s; --no-verify skips this)",
                time.monotonic() - t_verify,
            )

    seed_everything(config.seed)
    model = BertForPreTraining(model_config)
    if source_ckpt is not None:
        ckpt.load_model_weights(source_ckpt, model)
    elif hf_source is not None:
        initialised, unused = load_pretraining_weights(model, hf_source.state_dict)
        if d.is_main:
            logger.info(
                "weights from %s (%s); initialised as in the original (not in the source): %s",
                hf_source.path,
                hf_source.architecture,
                ", ".join(initialised) or "none",
            )
            if unused:
                logger.info("not used from %s: %s", hf_source.path, ", ".join(unused))
    model.to(device)
    optimizer = create_optimizer(
        model,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
    )
    scheduler = create_scheduler(optimizer, warmup_steps=config.warmup_steps, max_steps=config.max_steps)
    step, tokens_seen = 0, 0  # tokens_seen: real (non-padding) tokens this rank trained on
    if config.resume:
        ckpt.load_optimizer_state(source_ckpt, optimizer, saved)
        scheduler.load_state_dict(saved["scheduler"])
        step = saved["step"]
        if d.rank < len(saved["ranks"]):
            tokens_seen = saved["ranks"][d.rank].get("tokens_seen", 0)
        old = saved["train_config"]
        changed = [
            k
            for k in ("learning_rate", "warmup_steps", "max_steps", "batch_size", "gradient_accumulation_steps", "seed")
            if old.get(k) != getattr(config, k)
        ]
        if changed:
            logger.warning(
                "resuming with different %s than the checkpoint: the run will not equal an uninterrupted one",
                ", ".join(changed),
            )

    # Dropout differs across ranks; initialisation above was the same everywhere (and DDP broadcasts rank 0's).
    torch.manual_seed(config.seed + d.rank)
    train_model: nn.Module = model
    if config.compile:
        train_model = torch.compile(model)
    if d.enabled:
        train_model = nn.parallel.DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None
        )
    eval_model = model if not config.compile else torch.compile(model)

    dataset = ShardDataset(
        config.shards,
        batch_size=config.batch_size,
        seed=config.seed,
        shuffle_buffer_size=config.shuffle_buffer_size,
        rank=d.rank,
        world_size=d.world_size,
        num_workers=config.num_workers,
        info=info,
    )
    loader = ShardLoader(dataset, num_workers=config.num_workers, pin_memory=device.type == "cuda")
    if config.resume:
        ranks = saved["ranks"]
        loader.load_state_dict(ranks[min(d.rank, len(ranks) - 1)]["data_cursor"])
    batches = iter(loader)
    cleanup.callback(batches.close)  # shuts the loader workers down

    def eval_loader() -> ShardLoader:
        ds = ShardDataset(
            config.eval_shards,
            batch_size=config.batch_size,
            shuffle=False,
            infinite=False,
            rank=d.rank,
            world_size=d.world_size,
            num_workers=0,
            info=eval_info,
        )
        return ShardLoader(ds, num_workers=0)

    autocast = autocast_context(device, config.precision)
    if device.type == "cpu" and uses_bf16(device, config.precision) and cpu_has_native_bf16() is False and d.is_main:
        logger.warning(
            "precision bf16 on a CPU without bf16 instructions (avx512_bf16/amx_bf16) is emulated "
            "and slower than fp32; use --precision fp32"
        )
    peak = gpu_peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None

    os.makedirs(config.output_dir, exist_ok=True)
    metrics_path = os.path.join(config.output_dir, "metrics.jsonl")
    writer = JsonlWriter(metrics_path, truncate_after_step=step) if d.is_main else None
    if d.is_main:
        logger.info(
            "model %s: %.1fM parameters; data %s: %d shards, %d instances, max_seq_length %d, "
            "objective %s; device %s (%s), world size %d; global batch %d",
            "from checkpoint" if saved is not None or hf_source is not None else config.preset,
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
        if config.resume:
            logger.info("resumed from %s at step %d", source_ckpt, step)

    def save(at_step: int) -> str | None:
        per_rank = gather(
            {"rng": ckpt.capture_rng_state(), "data_cursor": loader.state_dict(), "tokens_seen": tokens_seen}, d
        )
        path = None
        if d.is_main:
            state = {
                "step": at_step,
                "tokens_seen": sum(r["tokens_seen"] for r in per_rank),
                "scheduler": scheduler.state_dict(),
                "model_config": model_config.to_dict(),
                "train_config": dataclasses.asdict(config),
                "data": {
                    "vocab_sha256": info.vocab_sha256,
                    "vocab_size": info.vocab_size,
                    "max_seq_length": info.max_seq_length,
                    "special_token_ids": info.special_token_ids,
                    "shards": os.path.abspath(config.shards),
                },
                "world_size": d.world_size,
                "ranks": per_rank,
                "torch_version": torch.__version__,
            }
            path = ckpt.save_checkpoint(
                config.output_dir,
                at_step,
                model=model,
                optimizer=optimizer,
                state=state,
                hf_config=model_config.to_hf_dict(),
                vocab_file=info.vocab_file,
                keep_last=config.keep_last,
            )
        if d.enabled:
            dist.barrier()
        return path

    def run_eval(at_step: int) -> dict[str, Any]:
        result = evaluate(
            eval_model,
            eval_loader(),
            device=device,
            max_batches=config.eval_batches,
            autocast=autocast,
            mask_token_id=mask_token_id,
        )
        record = {"step": at_step, "split": "eval", **result}
        if writer:
            writer.write(record)
            tqdm.write(
                f"eval step {at_step}: loss {result['loss']:.4f}, MLM accuracy "
                f"{result['mlm_accuracy']:.4f} ({result['mlm_accuracy_at_mask']:.4f} at [MASK])"
                + (f", NSP accuracy {result['nsp_accuracy']:.4f}" if result.get("nsp_accuracy") is not None else "")
            )
        return record

    # Restore RNG last: everything above may draw from it, the uninterrupted run was past all of it.
    if config.resume:
        ranks = saved["ranks"]
        if d.rank < len(ranks):
            ckpt.restore_rng_state(ranks[d.rank]["rng"])

    metrics = PretrainingMetrics(device, mask_token_id)
    bar = tqdm(
        total=config.max_steps,
        initial=step,
        disable=not (config.progress and d.is_main),
        dynamic_ncols=True,
        unit="step",
    )
    first_step = step
    last_record, last_eval, last_ckpt = None, None, None
    last_saved = step if config.resume else -1
    window_start, paused = time.monotonic(), 0.0
    stop_reason = "max_steps"
    train_model.train()
    while step < config.max_steps:
        for micro in range(config.gradient_accumulation_steps):
            batch = next(batches)
            tokens_seen += int(batch["attention_mask"].sum())  # on the host: no device sync
            batch = _move(batch, device)
            last_micro = micro == config.gradient_accumulation_steps - 1
            sync = train_model.no_sync() if d.enabled and not last_micro else contextlib.nullcontext()
            with sync:
                with autocast:
                    out = train_model(**batch)
                if out.nsp_loss is not None:
                    loss = out.mlm_loss + config.nsp_loss_weight * out.nsp_loss  # weight 0 keeps DDP's graph whole
                else:  # objective none: no label; the NSP head stays in the graph (for DDP) with a zero gradient
                    loss = out.mlm_loss + 0.0 * out.seq_relationship_logits.sum()
                (loss / config.gradient_accumulation_steps).backward()
            metrics.update(batch, out)
        lr, grad_norm = optimizer_step(model, optimizer, scheduler, config.max_grad_norm)
        step += 1
        bar.update(1)

        if step % config.log_every == 0 or step == config.max_steps:
            elapsed = time.monotonic() - window_start - paused
            m = metrics.compute(extra={"tokens_seen": tokens_seen})
            metrics.reset()
            if not math.isfinite(m["loss"]):
                raise FloatingPointError(
                    f"training loss is {m['loss']} at step {step}; lower --learning-rate or raise --warmup-steps"
                )
            record = {
                "step": step,
                "split": "train",
                "loss": m["loss"],
                "mlm_loss": m["mlm_loss"],
                "mlm_accuracy": m["mlm_accuracy"],
                "mlm_accuracy_at_mask": m["mlm_accuracy_at_mask"],
                "nsp_loss": m["nsp_loss"],
                "nsp_accuracy": m["nsp_accuracy"],
                "lr": lr,
                "tokens_per_s": m["tokens"] / elapsed,
                "tokens_seen": int(m["tokens_seen"]),
                "elapsed_s": time.monotonic() - t_start,
            }
            if grad_norm is not None:
                record["grad_norm"] = float(grad_norm)
            if peak is not None:
                seq = m["padded_tokens"] / m["sequences"]
                fpt = flops_per_token(model_config, int(seq), m["prediction_slots"] / m["padded_tokens"])
                record["mfu"] = fpt * m["padded_tokens"] / elapsed / (peak * d.world_size)
            last_record = record
            if writer:
                writer.write(record)
                nsp = {"nsp_acc": f"{m['nsp_accuracy']:.3f}"} if m["nsp_accuracy"] is not None else {}
                bar.set_postfix(
                    loss=f"{m['loss']:.3f}",
                    mlm_acc=f"{m['mlm_accuracy']:.3f}",
                    **nsp,
                    tok_s=f"{record['tokens_per_s']:.0f}",
                )
            window_start, paused = time.monotonic(), 0.0

        t_pause = time.monotonic()
        if config.eval_shards and config.eval_every and step % config.eval_every == 0:
            last_eval = run_eval(step)
        stop = False
        if config.stop_after_steps is not None and step - first_step >= config.stop_after_steps:
            stop, stop_reason = True, "stop_after_steps"
        # Every rank must leave the loop at the same step: a deadline or signal seen by one rank stops them all.
        timed_out = config.max_time_minutes is not None and time.monotonic() - t_start >= config.max_time_minutes * 60
        any_timed_out, any_signal = any_rank((timed_out, signals.received is not None), d, device)
        if any_timed_out:
            stop, stop_reason = True, "max_time"
        if any_signal:
            stop, stop_reason = True, signals.received or "signal on another rank"
        if config.save_every and step % config.save_every == 0 and not stop and step < config.max_steps:
            last_ckpt, last_saved = save(step), step
        paused += time.monotonic() - t_pause
        if stop:
            break
    bar.close()

    if config.eval_shards and (last_eval is None or last_eval["step"] != step):
        last_eval = run_eval(step)
    if last_saved != step:
        last_ckpt = save(step)
    if writer:
        writer.close()
        if not no_plot:
            plot_metrics(metrics_path, os.path.join(config.output_dir, "metrics.png"))
        logger.info("stopped at step %d (%s); checkpoint %s", step, stop_reason, last_ckpt)
    return TrainResult(
        step=step,
        model=model,
        checkpoint=last_ckpt,
        metrics=last_record,
        eval_metrics=last_eval,
        data_cursor=loader.state_dict(),
        stop_reason=stop_reason,
    )


__all__ = ["DROPOUT_OPTIONS", "TASKS", "TrainConfig", "TrainResult", "evaluate", "train"]
