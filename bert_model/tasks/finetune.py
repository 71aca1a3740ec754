"""The fine-tuning loop for every task family (BERT paper, section 4 and appendix A.3).

One loop serves every task; a *task* object (``registry.py``: ``glue.GlueTask``, ``squad.SquadTask``,
``ner.NerTask``, ``multiple_choice.MultipleChoiceTask``) reads its files, turns examples into features, builds
its head, and turns model outputs into predictions and metrics; ``predict.py`` runs a kept model. The loop:

* starts from a bertprep pre-training checkpoint or a Hugging Face BERT or ModernBERT directory (encoder
  weights; BERT's new head is initialised as google-research/bert does, ModernBERT's as ``transformers``
  does, its ``head.*`` taken from the source's MLM head as ``from_pretrained`` takes it), or from random
  initialisation with the same config (``random_init``, for baselines) or a preset;
* tokenizes with the model's own ``vocab.txt`` (``core.vocab_files.WordPieceTokenizer``);
* trains with AdamW over ``optim.param_groups`` (no decay on biases and LayerNorm), linear warm-up over
  ``warmup_proportion`` of the steps then linear decay to 0, gradient clipping, bf16 autocast on CUDA and
  fp32 on CPU unless ``precision`` says otherwise, seeded data order and dropout;
* evaluates after every epoch (and every ``eval_every`` steps), logs ``metrics.jsonl`` and keeps the
  checkpoint with the best task metric in ``output_dir/best/``: a Hugging Face directory (``config.json``,
  ``model.safetensors``, tokenizer files) plus ``finetune.json`` (the task settings ``predict`` needs), with
  its evaluation predictions in ``output_dir/eval_predictions.*``; ``results.json`` summarises the run.

Defaults are the paper's fine-tuning recipe (A.3: batch 32, learning rate 5e-5 / 3e-5 / 2e-5, 3 epochs,
warm-up 10%) and google-research/bert ``run_classifier.py`` / ``run_squad.py`` (5e-5, AdamW epsilon 1e-6,
weight decay 0.01, clipping at norm 1.0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.hf.export import write_hf_directory
from bertprep.bert_model.hf.interop import (
    FINETUNE_FILE,
    ModelSource,
    load_model_source,
    max_sequence_length,
    resolve_do_lower_case,
)
from bertprep.bert_model.metrics import JsonlWriter
from bertprep.bert_model.models.attention import configure_attention
from bertprep.bert_model.models.bert import BertConfig
from bertprep.bert_model.models.heads import load_encoder_weights
from bertprep.bert_model.optim import create_optimizer, create_scheduler, optimizer_step
from bertprep.bert_model.precision import autocast_context, uses_bf16
from bertprep.bert_model.reporting import REPORT_DIRS, ConsoleReporter, MetricsLog, open_reporter
from bertprep.bert_model.runtime import path_is_within, resolve_device, seed_everything
from bertprep.bert_model.tasks.config import FinetuneConfig
from bertprep.bert_model.tasks.predict import run_model, write_extra_predictions
from bertprep.bert_model.tasks.registry import PREDICTION_SUFFIX, Task
from bertprep.core import strict_json
from bertprep.core.atomic import remove_stale_staging, replace_entries, staging_name, write_atomic
from bertprep.core.normalization import resolve_strip_accents_setting
from bertprep.core.pretrained_tokenizer import PretrainedTokenizer
from bertprep.core.vocab_files import WordPieceTokenizer, read_vocab_file

#: The tokenizer of a run: BERT's WordPiece, or a published model's BPE / Unigram tokenizer (same interface).
AnyTokenizer = WordPieceTokenizer | PretrainedTokenizer

logger = logging.getLogger("bertprep.finetune")


@dataclass
class FinetuneResult:
    """What ``finetune`` returns."""

    best_dir: str
    """The kept model (Hugging Face directory + finetune.json)."""
    best_metrics: dict[str, float] | None
    """Evaluation metrics of the kept model (None without an eval file)."""
    best_step: int
    steps: int
    """Optimizer steps done."""
    train_seconds: float
    stop_reason: str
    """``completed``, ``max_steps`` or ``max_time``."""
    model: nn.Module


# -------------------------------------------------------------------------------------------- the model


def _model_inputs(config: FinetuneConfig) -> tuple[BertConfig, ModelSource | None, AnyTokenizer]:
    """Encoder config, weight source (None for a preset) and tokenizer of a run: the source's BPE / Unigram
    tokenizer when it has one (RoBERTa's, ModernBERT's), else a WordPiece one of its vocab."""
    source = load_model_source(config.init_from) if config.init_from else None
    if source is not None and source.tokenizer is not None and not config.vocab:
        given = [
            f
            for f, v in (("--do-lower-case", config.do_lower_case), ("--strip-accents", config.strip_accents))
            if v is not None
        ]
        if given:
            raise ValueError(
                f"{given[0]} applies to BERT WordPiece vocabs; {source.path}'s tokenizer.json normalises text itself"
            )
        if len(source.tokenizer.tokens) != source.config.vocab_size:
            raise ValueError(
                f"{source.path}: its tokenizer has {len(source.tokenizer.tokens)} entries but its vocab_size is "
                f"{source.config.vocab_size}"
            )
        return source.config, source, source.tokenizer
    if source is not None:
        bert_config = source.config
        tokens = read_vocab_file(config.vocab) if config.vocab else source.vocab_tokens
        if tokens is None:
            raise ValueError(
                f"{config.init_from} has no vocab.txt beside its weights; pass --vocab (the vocab the "
                "model was pre-trained with)"
            )
        if config.vocab and source.vocab_tokens is not None and tokens != source.vocab_tokens:
            logger.warning("--vocab %s differs from the vocab saved with %s", config.vocab, source.path)
        do_lower_case = resolve_do_lower_case(config.do_lower_case, source.do_lower_case, tokens)
        strip_accents = resolve_strip_accents_setting(
            config.strip_accents, source.strip_accents, source.do_lower_case, do_lower_case
        )
    else:
        tokens = read_vocab_file(config.vocab)  # type: ignore[arg-type]
        bert_config = BertConfig.from_preset(
            config.preset,
            vocab_size=len(tokens),  # type: ignore[arg-type]
            pad_token_id=tokens.index("[PAD]"),
        )
        do_lower_case = resolve_do_lower_case(config.do_lower_case, None, tokens)
        strip_accents = resolve_strip_accents_setting(config.strip_accents, None, None, do_lower_case)
    if len(tokens) != bert_config.vocab_size:
        raise ValueError(
            f"the vocab has {len(tokens)} entries but the model's vocab_size is "
            f"{bert_config.vocab_size}; pass the vocab the model was trained with (--vocab)"
        )
    return bert_config, source, WordPieceTokenizer.from_tokens(tokens, do_lower_case, strip_accents)


def _finetune_json(task: Task, tokenizer: AnyTokenizer, extra: dict[str, Any]) -> dict[str, Any]:
    """``finetune.json``: the task's settings (what ``predict`` rebuilds the task from), the tokenizer's, and
    ``extra`` run facts, which must not shadow a task setting (the run's metric values once replaced the GLUE
    task's metric names, so a model fine-tuned without --eval-file could not be loaded by predict)."""
    settings = task.to_json()
    assert not set(extra) & set(settings), f"finetune.json keys clash: {set(extra) & set(settings)}"
    return {
        **settings,
        "do_lower_case": tokenizer.do_lower_case,
        "strip_accents": tokenizer.strip_accents,
        **extra,
    }


def _save_model(path: str, model: nn.Module, task: Task, tokenizer: AnyTokenizer, extra: dict[str, Any]) -> str:
    return write_hf_directory(
        path,
        model,
        vocab_tokens=tokenizer.tokens,
        do_lower_case=bool(tokenizer.do_lower_case),
        strip_accents=tokenizer.strip_accents,
        id2label=task.id2label,
        finetuning_task=getattr(task, "glue_task", None) or task.name,
        extra_json={FINETUNE_FILE: _finetune_json(task, tokenizer, extra)},
        overwrite=True,
        tokenizer=tokenizer if isinstance(tokenizer, PretrainedTokenizer) else None,
    )


# ------------------------------------------------------------------------------------------ fine-tuning


def finetune(config: FinetuneConfig, task: Task) -> FinetuneResult:
    """Fine-tune on ``config.train_file`` and keep the best model by ``task.metric_for_best`` (see the module
    docstring for what is written).

    With ``overwrite``, a previous run in ``output_dir`` stays whole until this one completes (this run is
    written to a staging folder ``output_dir/.bertprep-run-<host>-<pid>-<8 hex>/`` and then swapped in); a failed
    run leaves it as it was,
    and the folders of killed runs are removed by the next run that completes there.

    Raises:
        FileNotFoundError: a data file or the model directory does not exist.
        FileExistsError: ``output_dir`` holds a previous run and ``overwrite`` is False.
        ValueError: ``init_from`` or ``vocab`` lies in ``output_dir`` (the run would replace it).
        ValueError: malformed data (with file and line), a model / vocab mismatch, or bad settings.
        FloatingPointError: the training loss became NaN or infinite.
    """
    t_start = time.monotonic()
    for what, given in (("--model", config.init_from), ("--vocab", config.vocab)):
        if given and path_is_within(given, config.output_dir):
            raise ValueError(
                f"{what} {given} lies in --output-dir {config.output_dir}, whose run files (best/, "
                "results.json, metrics.jsonl, eval_predictions.*) this run replaces; choose an "
                "--output-dir outside the model it starts from"
            )
    previous = _run_files(config.output_dir)
    if "best" in previous or "results.json" in previous:
        if not config.overwrite:
            raise FileExistsError(
                f"{config.output_dir} already holds a fine-tuning run; choose another --output-dir or pass --overwrite"
            )
        # Write beside, then swap: the previous run stays whole until this one has completed.
        staging = os.path.join(config.output_dir, staging_name(_STAGING_KIND))
        logger.info(
            "the previous run in %s is replaced only when this one completes; until then this run is written to %s",
            config.output_dir,
            staging,
        )
        try:
            result = _finetune(config, task, staging, t_start)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        # results.json, the completion marker, moves in last; the old run is deleted only after that.
        replace_entries(staging, config.output_dir, _run_files(config.output_dir), last="results.json")
        for path in remove_stale_staging(config.output_dir, _STAGING_KIND):
            logger.info("removing %s, left by a run that was killed", path)
        return dataclasses.replace(result, best_dir=os.path.join(config.output_dir, "best"))
    return _finetune(config, task, config.output_dir, t_start)


#: What a fine-tuning run writes in its output directory (besides ``eval_predictions.*``).
_RUN_FILES = ("best", "results.json", "metrics.jsonl", *REPORT_DIRS.values())


def _run_files(directory: str) -> list[str]:
    """Names of the run outputs in ``directory`` (``_RUN_FILES`` and ``eval_predictions.*``)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n in _RUN_FILES or n.startswith("eval_predictions."))


#: The kind of a fine-tuning run's staging folder (``atomic.staging_name``): killed runs' are removed by the
#: next run that completes in the same output directory (same host, dead pid).
_STAGING_KIND = "run"


@dataclass
class _Data:
    """A run's examples and features (``eval_*`` None without an eval file)."""

    train_examples: list[Any]
    train_features: list[Any]
    eval_examples: list[Any] | None
    eval_features: list[Any] | None


@dataclass
class _Run:
    """The parts of a fine-tuning run that the loop uses, built once by ``_build``."""

    config: FinetuneConfig
    task: Task
    run_dir: str
    device: torch.device
    tokenizer: AnyTokenizer
    data: _Data
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    loader: torch.utils.data.DataLoader
    writer: MetricsLog
    """``metrics.jsonl`` and the ``report_to`` reporter."""
    steps_per_epoch: int
    num_train_steps: int
    run_info: dict[str, Any]
    """What ``finetune.json`` and ``results.json`` record about the run."""
    t_start: float
    best: dict[str, Any] = dataclasses.field(default_factory=lambda: {"value": -math.inf, "metrics": None, "step": 0})
    """The kept model's metric value, metrics and step."""

    @property
    def best_dir(self) -> str:
        return os.path.join(self.run_dir, "best")


@dataclass
class _LoopState:
    """Where the loop is; ``_train_epoch`` updates it."""

    step: int = 0
    epoch_index: int = 0
    last_eval: int = -1
    """The step last evaluated at (-1: none)."""
    stop_reason: str = "completed"
    window_loss: float = 0.0
    """Sum of the training losses since the last log line."""
    window_n: int = 0


def _finetune(config: FinetuneConfig, task: Task, run_dir: str, t_start: float) -> FinetuneResult:
    """``finetune`` writing into ``run_dir`` (the output directory, or a staging directory in it): build, train
    epoch by epoch (evaluating after each), evaluate the last step, keep a model, write ``results.json``."""
    run = _build(config, task, run_dir, t_start)
    state = _LoopState()
    with run.writer:  # closed however the loop ends (a W&B run that raised is marked failed)
        train_seconds = _train_and_evaluate(run, state)
        if run.data.eval_features is None:
            extra = {"selected_step": state.step, "selected_metrics": None, **run.run_info}
            _save_model(run.best_dir, run.model, task, run.tokenizer, extra)
            run.best["step"] = state.step
    _write_results(run, state, train_seconds)
    return FinetuneResult(
        best_dir=run.best_dir,
        best_metrics=run.best["metrics"],
        best_step=run.best["step"],
        steps=state.step,
        train_seconds=train_seconds,
        stop_reason=state.stop_reason,
        model=run.model,
    )


def _train_and_evaluate(run: _Run, state: _LoopState) -> float:
    """Train epoch by epoch, evaluating after each (with an eval file) and after the last step; returns the
    seconds of training."""
    bar = tqdm(total=run.num_train_steps, disable=not run.config.progress, dynamic_ncols=True, unit="step")
    autocast = autocast_context(run.device, run.config.precision)
    t_train = time.monotonic()
    while state.step < run.num_train_steps:
        if _train_epoch(run, state, bar, autocast, t_train):
            break
        state.epoch_index += 1
        if run.data.eval_features is not None and state.last_eval != state.step:
            _evaluate(run, state.step, float(state.epoch_index))
            state.last_eval = state.step
    bar.close()
    train_seconds = time.monotonic() - t_train
    if run.data.eval_features is not None and state.last_eval != state.step:
        _evaluate(run, state.step, state.step / run.steps_per_epoch)
    return train_seconds


def _build(config: FinetuneConfig, task: Task, run_dir: str, t_start: float) -> _Run:
    """Read and featurize the data, build the model, optimizer and data loader, open ``metrics.jsonl`` and log
    the plan (seeded: the same settings give the same run)."""
    device = resolve_device(config.device)
    bert_config, source, tokenizer = _model_inputs(config)
    _remove_earlier_run_files(run_dir)
    if task.max_seq_length > max_sequence_length(bert_config):
        raise ValueError(
            f"max_seq_length {task.max_seq_length} exceeds the model's max_position_embeddings "
            f"{max_sequence_length(bert_config)}"
        )
    data = _read_data(config, task, tokenizer)
    model, init = _build_model(config, task, bert_config, source, device)
    steps_per_epoch = math.ceil(len(data.train_features) / config.batch_size)
    num_train_steps = config.max_steps or max(1, math.ceil(steps_per_epoch * config.num_train_epochs))
    warmup_steps = int(config.warmup_proportion * num_train_steps)
    optimizer, scheduler = _optimizer_and_schedule(config, model, warmup_steps, num_train_steps)
    loader = _train_loader(config, data, tokenizer)
    writer = _open_metrics_log(config, run_dir, num_train_steps)
    logger.info(
        "%s: %d training examples -> %d features, %d eval examples; %d steps (%d per epoch), warm-up %d, "
        "lr %g, batch %d, device %s, init %s",
        task.name,
        len(data.train_examples),
        len(data.train_features),
        len(data.eval_examples or []),
        num_train_steps,
        steps_per_epoch,
        warmup_steps,
        config.learning_rate,
        config.batch_size,
        device,
        init,
    )
    model.train()
    return _Run(
        config=config,
        task=task,
        run_dir=run_dir,
        device=device,
        tokenizer=tokenizer,
        data=data,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        loader=loader,
        writer=writer,
        steps_per_epoch=steps_per_epoch,
        num_train_steps=num_train_steps,
        run_info=_run_info(config, data, init, source, num_train_steps, warmup_steps),
        t_start=t_start,
    )


def _remove_earlier_run_files(run_dir: str) -> None:
    """Remove what an earlier run that crashed (no ``results.json``) left in ``run_dir`` (``_run_files``), so that
    nothing of it may pass for a result of this one."""
    for name in _run_files(run_dir):
        path = os.path.join(run_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _optimizer_and_schedule(
    config: FinetuneConfig, model: nn.Module, warmup_steps: int, num_train_steps: int
) -> tuple[torch.optim.Optimizer, Any]:
    """``config.optimizer`` over ``model``'s parameters and its learning-rate schedule: ``warmup_steps`` of linear
    warm-up, then ``config.lr_schedule`` to step ``num_train_steps``."""
    optimizer = create_optimizer(model, learning_rate=config.learning_rate, **config.adamw_settings())
    scheduler = create_scheduler(
        optimizer,
        warmup_steps=warmup_steps,
        max_steps=num_train_steps,
        **config.schedule_settings(num_train_steps),
    )
    return optimizer, scheduler


def _train_loader(config: FinetuneConfig, data: _Data, tokenizer: AnyTokenizer) -> torch.utils.data.DataLoader:
    """Batches of ``config.batch_size`` training features, shuffled by a generator of ``config.seed`` (the same
    order for the same seed), padded with the tokenizer's ``[PAD]`` id (``collate_features``)."""
    return torch.utils.data.DataLoader(
        data.train_features,
        batch_size=config.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(config.seed),
        collate_fn=lambda rows: collate_features(rows, tokenizer.pad_token_id),
    )


def _open_metrics_log(config: FinetuneConfig, run_dir: str, num_train_steps: int) -> MetricsLog:
    """``run_dir/metrics.jsonl`` (``run_dir`` created) and the ``report_to`` reporter; with ``--no-progress`` a
    line per log step on stderr."""
    os.makedirs(run_dir, exist_ok=True)
    reporter = open_reporter(config.report_to, run_dir, job_type="finetune", config=dataclasses.asdict(config))
    console = None if config.progress else ConsoleReporter(num_train_steps)  # --no-progress: a line per log step
    return MetricsLog(JsonlWriter(os.path.join(run_dir, "metrics.jsonl")), console, reporter)


def _run_info(
    config: FinetuneConfig, data: _Data, init: str, source: ModelSource | None, num_train_steps: int, warmup_steps: int
) -> dict[str, Any]:
    """What ``finetune.json`` and ``results.json`` record about the run."""
    return {
        "init": init,
        "random_init": source is None or config.random_init,
        "train_file": os.path.abspath(config.train_file),
        "eval_file": os.path.abspath(config.eval_file) if config.eval_file else None,
        "train_examples": len(data.train_examples),
        "train_features": len(data.train_features),
        "eval_examples": len(data.eval_examples or []),
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "batch_size": config.batch_size,
        "num_train_steps": num_train_steps,
        "warmup_steps": warmup_steps,
    }


def _read_data(config: FinetuneConfig, task: Task, tokenizer: AnyTokenizer) -> _Data:
    """Read and featurize the training (and eval) files; the task learns its labels from the training set.

    Raises:
        ValueError: no usable training examples, or malformed data.
    """
    train_examples = task.read(config.train_file, limit=config.max_train_examples, split="train")
    task.prepare(train_examples)
    train_features = task.featurize(train_examples, tokenizer, with_labels=True)
    if not train_features:
        raise ValueError(f"{config.train_file}: no usable training examples")
    eval_examples = eval_features = None
    if config.eval_file:
        eval_examples = task.read(config.eval_file, limit=config.max_eval_examples, split="eval")
        eval_features = task.featurize(eval_examples, tokenizer, with_labels=False)
    return _Data(train_examples, train_features, eval_examples, eval_features)


def _build_model(
    config: FinetuneConfig, task: Task, bert_config: BertConfig, source: ModelSource | None, device: torch.device
) -> tuple[nn.Module, str]:
    """The task's model (seeded), with ``source``'s encoder weights unless ``random_init``, on ``device``;
    and a description of where its weights came from (``random`` or ``<kind> <path>``)."""
    seed_everything(config.seed)
    model = task.build_model(bert_config)
    init = "random"
    if source is not None and not config.random_init:
        fresh = load_encoder_weights(model, source.state_dict)
        init = f"{source.kind} {source.path}"
        logger.info("encoder from %s; newly initialised: %s", source.path, ", ".join(fresh))
    model.to(device)
    kernel = configure_attention(model, "auto", device, uses_bf16(device, config.precision))
    logger.info("attention: %s", kernel)
    return model, init


def _train_epoch(
    run: _Run, state: _LoopState, bar: tqdm, autocast: contextlib.AbstractContextManager, t_train: float
) -> bool:
    """One pass over the training batches: step, log, evaluate every ``eval_every`` steps. Returns True when the
    run stops in it (all steps done, or ``max_time``), recording why in ``state.stop_reason``.

    Raises:
        FloatingPointError: the training loss is NaN or infinite.
    """
    config = run.config
    for batch in run.loader:
        batch = {k: v.to(run.device, non_blocking=True) for k, v in batch.items()}
        with autocast:
            out = run.model(**batch)
        out.loss.backward()
        lr, _ = optimizer_step(run.model, run.optimizer, run.scheduler, config.max_grad_norm)
        state.step += 1
        bar.update(1)
        loss = float(out.loss.detach())
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss is {loss} at step {state.step}; lower --learning-rate")
        state.window_loss, state.window_n = state.window_loss + loss, state.window_n + 1
        if state.step % config.log_every == 0 or state.step == run.num_train_steps:
            _log_train_loss(run, state, lr, bar)
        timed_out = config.max_time_minutes is not None and time.monotonic() - t_train >= config.max_time_minutes * 60
        if run.data.eval_features is not None and config.eval_every and state.step % config.eval_every == 0:
            _evaluate(run, state.step, state.step / run.steps_per_epoch)
            state.last_eval = state.step
        if state.step >= run.num_train_steps or timed_out:
            if timed_out:
                state.stop_reason = "max_time"
            elif config.max_steps:
                state.stop_reason = "max_steps"
            return True
    return False


def _log_train_loss(run: _Run, state: _LoopState, lr: float, bar: tqdm) -> None:
    """Write the mean training loss since the last line to ``metrics.jsonl`` and the progress bar."""
    mean_loss = state.window_loss / state.window_n
    run.writer.write(
        {"step": state.step, "split": "train", "loss": mean_loss, "lr": lr, "elapsed_s": time.monotonic() - run.t_start}
    )
    bar.set_postfix(loss=f"{mean_loss:.4f}")
    state.window_loss, state.window_n = 0.0, 0


def _evaluate(run: _Run, at_step: int, epoch: float) -> None:
    """Evaluate on the eval features, log the metrics, and keep the model (``best/``) and its predictions
    (``eval_predictions.*``) when ``task.metric_for_best`` is the best so far."""
    config, task, data = run.config, run.task, run.data
    outputs = run_model(
        run.model,
        data.eval_features,
        batch_size=config.eval_batch_size,
        device=run.device,
        pad_token_id=run.tokenizer.pad_token_id,
        progress=config.progress,
        precision=config.precision,
    )
    predictions = task.predictions(data.eval_examples, data.eval_features, outputs)
    values = task.metric_values(data.eval_examples, predictions)
    run.writer.write(
        {
            "step": at_step,
            "epoch": round(epoch, 4),
            "split": "eval",
            **values,
            "elapsed_s": time.monotonic() - run.t_start,
        }
    )
    tqdm.write(f"eval step {at_step} (epoch {epoch:.2f}): " + ", ".join(f"{k} {v:.4f}" for k, v in values.items()))
    value = values[task.metric_for_best]
    if value > run.best["value"]:
        run.best.update(value=value, metrics=values, step=at_step)
        extra = {"selected_step": at_step, "selected_metrics": values, **run.run_info}
        _save_model(run.best_dir, run.model, task, run.tokenizer, extra)
        predictions_path = os.path.join(run.run_dir, f"eval_predictions.{PREDICTION_SUFFIX[task.name]}")
        write_atomic(predictions_path, lambda p: task.write_predictions(p, data.eval_examples, predictions))
        write_extra_predictions(task, predictions_path, data.eval_examples, predictions)


def _write_results(run: _Run, state: _LoopState, train_seconds: float) -> None:
    """Write ``results.json`` (the run's completion marker) and log the outcome."""
    task, best = run.task, run.best
    results = {
        "task": task.to_json(),
        "best_step": best["step"],
        "best_metrics": best["metrics"],
        "metric_for_best": task.metric_for_best,
        "steps": state.step,
        "stop_reason": state.stop_reason,
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - run.t_start, 1),
        "device": str(run.device),
        **run.run_info,
    }

    def dump(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            strict_json.dump(results, f, indent=1)
            f.write("\n")

    write_atomic(os.path.join(run.run_dir, "results.json"), dump)
    logger.info(
        "done: %d steps in %.1f min (%s); best %s %s at step %d; model %s",
        state.step,
        train_seconds / 60,
        state.stop_reason,
        task.metric_for_best,
        None if best["metrics"] is None else f"{best['value']:.4f}",
        best["step"],
        os.path.join(run.config.output_dir, "best"),  # where it lands (with --overwrite run_dir is a staging dir)
    )
