"""The data of a pre-training run: its shards' ``ShardInfo`` (local or through the remote cache), the eval
shards checked against the training shards, the shard files checked against their manifest, the training and
eval loaders, and the masking rate each reports.

``build.build_run`` and ``build.enter_phase`` call it; ``ShardDataset`` (``data.py``) reads the rows.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from bertprep.bert_model.pretrain.architectures import ModelConfig
from bertprep.bert_model.pretrain.data import ShardDataset, masked_lm_prob_at
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.remote_shards import has_manifest, open_shard_info
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible, verify_shard_files
from bertprep.bert_model.pretrain.start import Start
from bertprep.bert_model.pretrain.train_config import TrainConfig
from bertprep.core import schema
from bertprep.core.storage import is_remote, read_manifest

logger = logging.getLogger("bertprep.train")


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
    problem: str | None
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
    for info in infos:
        if info is not None:
            verify_shard_files(info, rank=d.rank, world_size=d.world_size)
    if d.is_main:
        logger.info(
            "shard files match the sha256 of their manifest (%.1f s; --no-verify skips this)",
            time.monotonic() - t_verify,
        )


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
        ranks = start.checkpoint_state()[1]["ranks"]
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
    start = info.masked_lm_prob if config.masked_lm_prob is None else config.masked_lm_prob
    return masked_lm_prob_at(start, config.masked_lm_prob_final, step / config.max_steps)


def eval_masked_lm_prob(config: TrainConfig, eval_info: ShardInfo) -> float:
    """The masking rate of every evaluation: ``eval_masked_lm_prob`` for dynamic eval shards, else theirs."""
    if eval_info.masking == "dynamic" and config.eval_masked_lm_prob is not None:
        return config.eval_masked_lm_prob
    return eval_info.masked_lm_prob
