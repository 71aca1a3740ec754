"""What a pre-training run starts from, and how a resumed run picks up where its checkpoint stopped.

A run starts from a bertprep checkpoint (``resume`` / ``init_from``), a Hugging Face BERT or ModernBERT directory
(``init_from``) or nothing (a preset): ``load_start`` reads it into a ``Start``. On ``resume``,
``restore_progress`` loads the optimizer and schedule state and ``restore_rng`` the RNG streams (last: see
``build.build_run``); ``recorded_train_config`` is what the next checkpoint records of the settings.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.hf.interop import ModelSource, load_model_source
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.architectures import ModelConfig
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.shard_info import ShardInfo
from bertprep.bert_model.pretrain.train_config import (
    DROPOUT_OPTIONS,
    MODEL_OPTIONS,
    TrainConfig,
    same_setting,
    settings_kept_on_resume,
)
from bertprep.bert_model.pretrain.vocab_extension import extend_source_vocab
from bertprep.core.pretrained_tokenizer import read_vocab_tokens

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

    def checkpoint_state(self) -> tuple[str, dict[str, Any]]:
        """``(checkpoint, saved)`` of a start from a bertprep checkpoint (every ``resume``'s), neither None."""
        assert self.checkpoint is not None and self.saved is not None, "not a start from a bertprep checkpoint"
        return self.checkpoint, self.saved


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
    source = start.hf_source if start.hf_source is not None else load_model_source(start.checkpoint_state()[0])
    grown = extend_source_vocab(source, read_vocab_tokens(info.vocab_file), shards=info.shard_dir)
    return start if grown is source else Start(hf_source=grown)


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


def restore_progress(
    config: TrainConfig, start: Start, optimizer: torch.optim.Optimizer, scheduler: Any, d: DistInfo
) -> tuple[int, int]:
    """On ``resume``, load the optimizer and schedule state; returns ``(step, tokens_seen)`` of this rank
    (``(0, 0)`` for a new run). Warns when a setting that shapes the run differs from the checkpoint's."""
    if not config.resume:
        return 0, 0
    checkpoint, saved = start.checkpoint_state()
    ckpt.load_optimizer_state(checkpoint, optimizer, saved)
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


def restore_rng(config: TrainConfig, start: Start, d: DistInfo) -> None:
    """On ``resume``, restore this rank's RNG streams. Call it last: everything before may draw from them, and
    the uninterrupted run was past all of it."""
    if config.resume:
        ranks = start.checkpoint_state()[1]["ranks"]
        if d.rank < len(ranks):
            ckpt.restore_rng_state(ranks[d.rank]["rng"])
