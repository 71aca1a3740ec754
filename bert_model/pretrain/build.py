"""Building a pre-training run: what it starts from, the model config, the model, optimizer and data.

``build_run`` calls the others in order and returns a ``Run``, what ``trainer``'s loop uses; the order matters
for an exact resume (each step may draw from the RNGs that ``restore_rng`` sets last).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.hf.interop import (
    ModelSource,
    check_same_vocab,
    load_model_source,
    load_pretraining_weights,
    max_sequence_length,
    shards_do_lower_case,
    shards_strip_accents,
)
from bertprep.bert_model.metrics import JsonlWriter, device_peak_flops, matmul_precision, plotting_unavailable
from bertprep.bert_model.models.attention import configure_attention
from bertprep.bert_model.models.bert_config import BertConfig
from bertprep.bert_model.models.kernels import configure_kernels
from bertprep.bert_model.models.modernbert import GLOBAL, LOCAL
from bertprep.bert_model.optim import create_optimizer, create_scheduler
from bertprep.bert_model.precision import autocast_context, cpu_has_native_bf16, uses_bf16
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.architectures import ModelConfig, PretrainingModel
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.phase_checks import check_later_phases, check_rope_keys
from bertprep.bert_model.pretrain.phases import CONFIG_KEYS, parse_phases, phase_at
from bertprep.bert_model.pretrain.remote_shards import has_manifest, open_shard_info
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible, verify_shard_files
from bertprep.bert_model.pretrain.train_config import (
    DROPOUT_OPTIONS,
    MODEL_OPTIONS,
    TrainConfig,
    same_setting,
    settings_kept_on_resume,
)
from bertprep.bert_model.pretrain.vocab_extension import extend_source_vocab
from bertprep.bert_model.reporting import ConsoleReporter, MetricsLog, open_reporter
from bertprep.bert_model.runtime import seed_everything
from bertprep.bert_model.schedules import BatchSizeWarmup, token_warmup
from bertprep.core import schema
from bertprep.core.pretrained_tokenizer import read_vocab_tokens
from bertprep.core.storage import is_remote, read_manifest

logger = logging.getLogger("bertprep.train")


@dataclass
class Start:
    """What a run starts from: a bertprep checkpoint (``resume`` / ``init_from``), a Hugging Face BERT or
    ModernBERT directory (``init_from``), or nothing (a preset; every field None)."""

    checkpoint: str | None = None
    """Path of the bertprep checkpoint."""
    saved: dict[str, Any] | None = None
    """That checkpoint's ``state.json``."""
    hf_source: ModelSource | None = None
    """The Hugging Face directory's config and weights."""


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
    check_output_dir(config)
    given, start = config, load_start(config)
    base = size_phases_in_steps(given.for_world_size(d.world_size), d)  # (accumulation of the global batch;
    # phases of tokens, max_steps 0: the run's length in steps now)
    check_phase_steps_on_resume(given, base, start, d)
    phase = phase_at(base.phase_settings(), start.saved["step"] if config.resume else 0)
    config = base.for_phase(phase)  # (the run's settings without phases)
    info = shard_info(config, config.shards)
    no_plot = plotting_unavailable() if d.is_main else None
    if no_plot:  # said now, not after training; metrics.jsonl holds the same numbers
        logger.warning("%s: metrics.png will not be drawn at the end (metrics.jsonl has every figure)", no_plot)
    start = extend_start_vocab(config, info, start)
    model_config = model_config_for(config, info, start, phase)
    check_rope_keys(base, model_config)  # every phase now, not when it begins
    check_later_phases(base, phase, info, model_config, int(config.cache_max_gb * 1e9))
    eval_info = read_eval_shards(config, info, model_config, d)
    verify_shards(config, (info, eval_info), d)
    _stop_if_requested(stop_requested, d)
    model = build_model(config, model_config, start, d, device)
    set_rope_theta(model, model_config, base.phase_settings(), phase)
    optimizer, scheduler = build_optimizer(config, model, lr_warmup(base, info, phase, d))
    _stop_if_requested(stop_requested, d)
    step, tokens_seen = restore_progress(given, start, optimizer, scheduler, d)
    train_model, eval_model = wrap_model(config, model, d, device)
    loader = train_loader(config, info, start, d, device)
    batches = iter(loader)
    autocast = autocast_context(device, config.precision)
    warn_if_bf16_is_emulated(config, device, d)
    peak = device_peak_flops(device, matmul_precision(device, uses_bf16(device, config.precision)))
    os.makedirs(config.output_dir, exist_ok=True)
    writer = open_metrics_log(config, step, cleanup) if d.is_main else None
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


def check_output_dir(config: TrainConfig) -> None:
    """Raise ValueError when ``output_dir`` already holds checkpoints and the run does not resume."""
    if not config.resume and ckpt.list_checkpoints(os.path.join(config.output_dir, ckpt.CHECKPOINTS_DIR)):
        raise ValueError(
            f"{config.output_dir} already holds checkpoints of a run; continue it with --resume "
            f"{config.output_dir}, or choose another --output-dir"
        )


def load_start(config: TrainConfig) -> Start:
    """Load the checkpoint or Hugging Face directory the run starts from.

    Checkpoints are checked against the sha256 recorded in their state.json; from a run directory a damaged
    latest checkpoint is skipped (with a warning) for the previous intact one.

    Raises:
        FileNotFoundError: no such checkpoint (``resume``) or model directory (``init_from``).
        checkpoint.CheckpointError: the checkpoint is damaged.
    """
    if config.resume:
        return Start(*ckpt.load_intact_checkpoint(config.resume))
    if config.init_from:
        try:
            return Start(*ckpt.load_intact_checkpoint(config.init_from))
        except FileNotFoundError:  # not a bertprep checkpoint: a Hugging Face directory (or an error)
            return Start(hf_source=load_model_source(config.init_from))
    return Start()


def extend_start_vocab(config: TrainConfig, info: ShardInfo, start: Start) -> Start:
    """``init_from`` a model whose vocab the shards' vocab extends (``build-vocab --extend``): the start with
    its vocab-sized weights grown (``vocab_extension.extend_source_vocab``; a bertprep checkpoint becomes
    a model source for that). Any other start is returned unchanged.

    Raises:
        ValueError: the shards' vocab is larger than the model's but does not keep its ids.
    """
    if not config.init_from or info.vocab_file is None:
        return start
    if start.saved is not None and start.saved["data"]["vocab_sha256"] == info.vocab_sha256:
        return start
    source = start.hf_source if start.hf_source is not None else load_model_source(start.checkpoint)
    grown = extend_source_vocab(source, read_vocab_tokens(info.vocab_file), shards=info.shard_dir)
    return start if grown is source else Start(hf_source=grown)


def model_config_for(config: TrainConfig, info: ShardInfo, start: Start, phase: int = 0) -> ModelConfig:
    """The model config (:func:`source_model_config`; ``phase`` the one the run starts in) with, for a new BERT
    run, the word embedding padded to a multiple of ``pad_vocab_size_multiple`` inside the model; a resumed run
    keeps its checkpoint's padding (its optimizer state is the same either way:
    ``checkpoint.optimizer_state_to_flat``)."""
    model_config = source_model_config(config, info, start, phase)
    if isinstance(model_config, BertConfig) and not config.resume:
        model_config = dataclasses.replace(model_config, pad_vocab_size_multiple=config.pad_vocab_size_multiple)
    return model_config


def source_model_config(config: TrainConfig, info: ShardInfo, start: Start, phase: int = 0) -> ModelConfig:
    """The model config: the checkpoint's, else the preset with overrides and the shards' vocab. A resumed run
    must read shards of the checkpoint's ``max_seq_length`` unless it resumes in another phase (``phase``) than
    the checkpoint's: a checkpoint of a phase's last step whose next phase could not begin.

    Raises:
        ValueError: the shards do not fit the model or checkpoint (see ``shard_info.check_compatible``).
    """
    if start.saved is not None:
        saved = start.saved
        same_phase = saved.get("phase", 0) == phase
        model_config = architectures.model_config_from_dict(saved["model_config"])
        overrides = config.model_overrides()
        # Dropout is a training setting, not part of the weights: a new run from a checkpoint may change it
        # (e.g. no dropout when continuing pre-training); an exact resume keeps the checkpoint's.
        dropout = {k: v for k, v in overrides.items() if k in DROPOUT_OPTIONS} if config.init_from else {}
        if dropout:
            model_config = architectures.with_dropout(model_config, dropout)
            logger.info("dropout from the command line, not %s: %s", start.checkpoint, dropout)
        ignored = sorted(set(overrides) - set(dropout))
        if ignored:
            logger.warning("model options %s ignored: the model config comes from %s", ignored, start.checkpoint)
        check_compatible(
            info,
            vocab_sha256=saved["data"]["vocab_sha256"],
            vocab_size=model_config.vocab_size,
            max_seq_length=saved["data"]["max_seq_length"] if config.resume and same_phase else None,
            max_position_embeddings=max_sequence_length(model_config),
            what=f"checkpoint {start.checkpoint}",
        )
        return model_config
    if start.hf_source is not None:
        found = architectures.architecture_of(start.hf_source.config)
        if config.architecture != "bert" and config.architecture != found:  # (bert is the default: not a choice)
            raise ValueError(
                f"--model {config.init_from} is a {found} model (config.json model_type), not "
                f"--architecture {config.architecture}; leave --architecture out (the directory's is used)"
            )
        return hf_model_config(config, info, start.hf_source)
    model_config = architectures.model_config_from_preset(
        config.architecture,
        config.preset,
        vocab_size=info.vocab_size,
        special_token_ids=info.special_token_ids,
        overrides=config.model_overrides(),
    )
    check_compatible(
        info, vocab_size=model_config.vocab_size, max_position_embeddings=model_config.max_position_embeddings
    )
    return model_config


def recorded_train_config(config: TrainConfig, start: Start, model_config: ModelConfig) -> dict[str, Any]:
    """``config`` as the checkpoint's ``state.json`` records it (``train_config``): with the model settings that
    were trained rather than the ones asked for where the model came from elsewhere. The architecture is the
    model's; on ``resume`` the preset and model options are the checkpoint's own (a resume cannot change the
    model: the CLI refuses a different one); on ``init_from`` the size options, which did not apply, are None.

    Before, ``train --resume`` of a ModernBERT tiny run without the model options recorded the defaults
    (``bert``, ``base``), so that the next resume with the true options was refused.
    """
    recorded = dataclasses.asdict(config)
    recorded["architecture"] = architectures.architecture_of(model_config)
    if config.resume and start.saved is not None:
        before = start.saved.get("train_config") or {}
        for name in ("preset", *MODEL_OPTIONS):
            recorded[name] = before.get(name, recorded[name])
    elif config.init_from:
        for name in set(MODEL_OPTIONS) - set(DROPOUT_OPTIONS):
            recorded[name] = None  # (model_config_for: the model config comes from the source)
    return recorded


def _check_same_text_setting(shard_dir: str, source, name: str, shards_value: bool | None) -> None:
    """Raise ``ValueError`` (saying which make-shards option to give) when the shards were made with the text
    setting ``name`` (``do_lower_case``, ``strip_accents``) other than the model ``source`` was trained with;
    None on either side: not recorded, nothing to check."""
    trained = getattr(source, name)
    if trained is not None and shards_value is not None and shards_value != trained:
        option = "--" + ("" if trained else "no-") + name.replace("_", "-")
        raise ValueError(
            f"shards {shard_dir} were made with {name}={shards_value} but {source.path} "
            f"was trained with {name}={trained}; make the shards with {option}"
        )


def hf_model_config(config: TrainConfig, info: ShardInfo, source: ModelSource) -> ModelConfig:
    """The model config of a run started from a Hugging Face directory (``init_from``): the directory's
    ``config.json`` (BERT or ModernBERT: the directory's architecture is the run's) with the dropout options of
    the command line; the shards must use the model's vocab token for token and its casing. Raises
    ``ValueError`` naming the first differing id (or the casing)."""
    overrides = config.model_overrides()
    dropout = {k: v for k, v in overrides.items() if k in DROPOUT_OPTIONS}
    model_config = architectures.with_dropout(source.config, dropout)
    ignored = sorted(set(overrides) - set(dropout))
    if ignored:
        logger.warning("model options %s ignored: the model config comes from %s", ignored, source.path)
    if info.vocab_file is None:
        raise ValueError(
            f"shards {info.shard_dir} have no vocab file to check against {source.path}'s; "
            "make them again with bertprep make-shards"
        )
    check_same_vocab(read_vocab_tokens(info.vocab_file), source.vocab_tokens, shards=info.shard_dir, model=source.path)
    lower_case, strip_accents = (
        f(info.shard_dir, config.cache_dir) for f in (shards_do_lower_case, shards_strip_accents)
    )
    _check_same_text_setting(info.shard_dir, source, "do_lower_case", lower_case)
    _check_same_text_setting(info.shard_dir, source, "strip_accents", strip_accents)
    if getattr(model_config, "type_vocab_size", 2) == 1 and info.has_sentence_label:
        raise ValueError(
            f"{source.path} has one token type and no next-sentence head (RoBERTa), but shards {info.shard_dir} "
            f"were made for --objective {info.objective}; make them with --objective none"
        )
    check_compatible(
        info,
        vocab_size=model_config.vocab_size,
        max_position_embeddings=max_sequence_length(model_config),
        what=source.path,
    )
    return model_config


def shard_info(config: TrainConfig, shard_dir: str) -> ShardInfo:
    """The ``ShardInfo`` of ``shard_dir``, a local directory or a bucket's URL read through the cache of
    ``config.cache_dir`` / ``cache_max_gb`` (``remote_shards.open_shard_info``, which says what it raises)."""
    return open_shard_info(shard_dir, config.cache_dir, int(config.cache_max_gb * 1e9))


def _same_directory(a: str, b: str) -> bool:
    if is_remote(a) or is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def warn_if_not_held_out(shards: str, eval_shards: str, is_main: bool) -> None:
    """Warn (main rank) when ``eval_shards`` may share documents with ``shards``: the same directory, or not
    the held-out set make-shards made with them (``schema.held_out_mismatch``)."""
    if not is_main:
        return
    if _same_directory(shards, eval_shards):
        problem = "it is the training shards themselves"
    else:
        problem = schema.held_out_mismatch(read_manifest(shards), read_manifest(eval_shards))
    if problem:
        logger.warning(
            "--eval-shards %s: %s; it may share documents with the training data, so the eval "
            "figures may be optimistic (make-shards --eval-fraction makes a held-out set)",
            eval_shards,
            problem,
        )


def read_eval_shards(config: TrainConfig, info: ShardInfo, model_config: ModelConfig, d: DistInfo) -> ShardInfo | None:
    """The ``eval_shards``' info, checked against the training shards (None without ``eval_shards``; then
    the main rank points at a held-out set that make-shards left beside the training shards).

    Raises:
        ValueError: the eval shards do not fit the training shards (vocab, max_seq_length).
    """
    if config.eval_shards:
        eval_info = shard_info(config, config.eval_shards)
        check_compatible(
            eval_info,
            vocab_sha256=info.vocab_sha256,
            vocab_size=model_config.vocab_size,
            max_seq_length=info.max_seq_length,
            what=f"the training shards {config.shards}",
        )
        warn_if_not_held_out(config.shards, config.eval_shards, d.is_main)
        return eval_info
    if d.is_main:
        remote = is_remote(config.shards)
        held_out = (
            config.shards.rstrip("/") + "/" + schema.EVAL_DIR
            if remote
            else os.path.join(config.shards, schema.EVAL_DIR)
        )
        if has_manifest(held_out) if remote else os.path.exists(os.path.join(held_out, schema.MANIFEST_NAME)):
            logger.info(
                "%s holds the held-out set made with these shards; pass --eval-shards %s to evaluate on it",
                held_out,
                held_out,
            )
    return None


def verify_shards(config: TrainConfig, infos: tuple[ShardInfo | None, ...], d: DistInfo) -> None:
    """With ``verify_shards``, check this rank's shard files against their manifest's sha256: never train on
    bytes that are not the ones make-shards wrote (raises ValueError, see ``verify_shard_files``)."""
    if not config.verify_shards:
        return
    t_verify = time.monotonic()
    for shard_info in infos:
        if shard_info is not None:
            verify_shard_files(shard_info, rank=d.rank, world_size=d.world_size)
    if d.is_main:
        logger.info(
            "shard files match the sha256 of their manifest (%.1f s; --no-verify skips this)",
            time.monotonic() - t_verify,
        )


def build_model(
    config: TrainConfig, model_config: ModelConfig, start: Start, d: DistInfo, device: torch.device
) -> nn.Module:
    """A seeded model on ``device``, with the weights of ``start`` when it has any."""
    seed_everything(config.seed)
    model = architectures.build_model(model_config)
    if start.checkpoint is not None:
        ckpt.load_model_weights(start.checkpoint, model)
    elif start.hf_source is not None:
        hf_source = start.hf_source
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
    return model


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


def set_rope_theta(model: nn.Module, model_config: ModelConfig, phases: list[dict], index: int) -> None:
    """Give a ModernBERT the RoPE bases phase ``index`` sets (``global_rope_theta``, ``local_rope_theta``), in its
    config (so a checkpoint records them) and in its rotary embeddings; nothing for a phase without them.

    Raises:
        ValueError: a phase sets a RoPE base of a model without rotary embeddings (BERT).
    """
    phase = phases[index] if phases else {}
    thetas = {GLOBAL: phase.get("global_rope_theta"), LOCAL: phase.get("local_rope_theta")}
    if all(v is None for v in thetas.values()):
        return
    rotary = [m.rotary for m in model.modules() if isinstance(getattr(m, "rotary", None), nn.ModuleDict)]
    if not rotary:
        raise ValueError(f"phase {index + 1} sets a RoPE base, but a {type(model).__name__} has no rotary embeddings")
    for kind, theta in thetas.items():
        if theta is not None:
            rotary[0][kind].theta = theta
            setattr(model_config, "global_rope_theta" if kind == GLOBAL else "local_rope_theta", theta)


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


def restore_progress(
    config: TrainConfig, start: Start, optimizer: torch.optim.Optimizer, scheduler: Any, d: DistInfo
) -> tuple[int, int]:
    """On ``resume``, load the optimizer and schedule state; returns ``(step, tokens_seen)`` of this rank
    (``(0, 0)`` for a new run). Warns when a setting that shapes the run differs from the checkpoint's."""
    if not config.resume:
        return 0, 0
    saved = start.saved
    ckpt.load_optimizer_state(start.checkpoint, optimizer, saved)
    scheduler.load_state_dict(saved["scheduler"])
    tokens_seen = 0  # real (non-padding) tokens this rank trained on
    if d.rank < len(saved["ranks"]):
        tokens_seen = saved["ranks"][d.rank].get("tokens_seen", 0)
    old = saved["train_config"]
    changed = [k for k in settings_kept_on_resume() if k in old and not same_setting(old[k], getattr(config, k))]
    if changed:
        logger.warning(
            "resuming with different %s than the checkpoint: the run will not equal an uninterrupted one",
            ", ".join(changed),
        )
    return saved["step"], tokens_seen


def wrap_model(config: TrainConfig, model: nn.Module, d: DistInfo, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """``(train_model, eval_model)``: ``model`` with its attention kernel set (``attn_implementation``), in a
    ``PretrainingModel`` (``model(**batch)`` for either architecture and layout), compiled (``compile``; None =
    on CUDA) and, to train, wrapped in DDP. Seeds dropout per rank first."""
    # Dropout differs across ranks; initialisation was the same everywhere (and DDP broadcasts rank 0's).
    torch.manual_seed(config.seed + d.rank)
    kernel = configure_attention(model, config.attn_implementation, device, uses_bf16(device, config.precision))
    kernels = configure_kernels(model, config.kernels, device)
    compiled = compile_enabled(config, device)
    if d.is_main:
        mode = f"on, mode {config.compile_mode}" if compiled else "off"
        logger.info("attention: %s; other kernels: %s; torch.compile: %s", kernel, kernels, mode)
    model = PretrainingModel(model)
    train_model: nn.Module = model
    if compiled:
        train_model = compile_model(model, config.compile_mode)
    if d.enabled:
        train_model = nn.parallel.DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None
        )
    eval_model = model if not compiled else compile_model(model, config.compile_mode)
    return train_model, eval_model


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """``torch.compile(model, mode=mode)``. Shapes change from batch to batch (padding to the longest row, the
    number of prediction slots, the varlen segments), so ``default`` and ``max-autotune-no-cudagraphs`` compile
    dynamic shapes from the start instead of once per new shape; the CUDA-graph modes (``reduce-overhead``,
    ``max-autotune``) record one graph per shape, so they start static (``dynamic=None``: PyTorch marks a size
    dynamic only once it changes), which suits packed batches, whose rows are all ``max_seq_length`` long."""
    cuda_graphs = mode in ("reduce-overhead", "max-autotune")
    return torch.compile(model, mode=mode, dynamic=None if cuda_graphs else True)


def compile_enabled(config: TrainConfig, device: torch.device) -> bool:
    """Whether to ``torch.compile`` the model: ``config.compile``, or on a CUDA device when it is None."""
    return device.type == "cuda" if config.compile is None else config.compile


def train_loader(config: TrainConfig, info: ShardInfo, start: Start, d: DistInfo, device: torch.device) -> ShardLoader:
    """This rank's endless, shuffled training batches, at the checkpoint's data cursor on ``resume``."""
    dataset = ShardDataset(
        config.shards,
        batch_size=config.batch_size,
        seed=config.seed,
        shuffle_buffer_size=config.shuffle_buffer_size,
        rank=d.rank,
        world_size=d.world_size,
        num_workers=config.num_workers,
        info=info,
        packing=config.packing,
        masked_lm_prob=config.masked_lm_prob,
        masked_lm_prob_final=config.masked_lm_prob_final,
        # The schedule's clock: the batches one stream yields over max_steps optimizer steps.
        schedule_batches=-(-config.max_steps * config.gradient_accumulation_steps // max(1, config.num_workers)),
    )
    loader = ShardLoader(dataset, num_workers=config.num_workers, pin_memory=device.type == "cuda")
    if config.resume:
        ranks = start.saved["ranks"]
        loader.load_state_dict(ranks[min(d.rank, len(ranks) - 1)]["data_cursor"])
    return loader


def eval_loader(config: TrainConfig, eval_info: ShardInfo | None, d: DistInfo) -> ShardLoader:
    """One pass over this rank's part of ``eval_shards``, in order (a new loader for each evaluation)."""
    ds = ShardDataset(
        config.eval_shards,
        batch_size=config.batch_size,
        shuffle=False,
        infinite=False,
        rank=d.rank,
        world_size=d.world_size,
        num_workers=0,
        info=eval_info,
        masked_lm_prob=config.eval_masked_lm_prob if eval_info.masking == "dynamic" else None,
    )
    return ShardLoader(ds, num_workers=0)


def train_masked_lm_prob(config: TrainConfig, info: ShardInfo, step: int) -> float:
    """The training masking rate at optimizer step ``step`` (what the metrics report): the schedule's for
    dynamic shards, the rate make-shards masked with for static ones."""
    from bertprep.bert_model.pretrain.data import masked_lm_prob_at

    start = info.masked_lm_prob if config.masked_lm_prob is None else config.masked_lm_prob
    return masked_lm_prob_at(start, config.masked_lm_prob_final, step / config.max_steps)


def eval_masked_lm_prob(config: TrainConfig, eval_info: ShardInfo) -> float:
    """The masking rate of every evaluation: ``eval_masked_lm_prob`` for dynamic eval shards, else theirs."""
    if eval_info.masking == "dynamic" and config.eval_masked_lm_prob is not None:
        return config.eval_masked_lm_prob
    return eval_info.masked_lm_prob


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


def restore_rng(config: TrainConfig, start: Start, d: DistInfo) -> None:
    """On ``resume``, restore this rank's RNG streams. Call it last: everything before may draw from them, and
    the uninterrupted run was past all of it."""
    if config.resume:
        ranks = start.saved["ranks"]
        if d.rank < len(ranks):
            ckpt.restore_rng_state(ranks[d.rank]["rng"])
