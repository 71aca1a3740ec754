"""Fine-tune a bi-encoder with in-batch negatives: ``bertprep finetune --task retrieval``.

The model is a sentence-transformers ``SentenceTransformer`` of three modules: ``Transformer`` (the encoder,
read by ``transformers``' ``AutoModel``), ``Pooling`` (mean or [CLS]) and ``Normalize``; it is trained by
sentence-transformers' ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` (Henderson et al.
2017, "Efficient Natural Language Response Suggestion for Smart Reply"; the DPR loss of Karpukhin et al.
2020): for a batch of (query, positive) pairs, the cross-entropy of each query's cosine similarities (times
``scale``) against every positive of the batch, its own the target; a hard negative per pair joins the
candidates. Batches hold no repeated text (``BatchSamplers.NO_DUPLICATES``), so no false in-batch negative
is a copy of the positive.

Any model bertprep reads is a starting point: a Hugging Face directory (``config.json`` and its weights) goes to
``AutoModel`` as it is; a bertprep run or checkpoint is first exported as one (``hf.export.export_model``, into
a staging folder removed afterwards). The output directory is a sentence-transformers directory
(``SentenceTransformer(DIR)``, ``bertprep extract-features -m DIR``, ``encoder.RetrievalEncoder(DIR)``) with
``retrieval_train.json`` (the settings, the loss, the wall time), written under a staging name and renamed when
complete: a directory with the model is finished; a stopped run leaves none and starts again from the beginning.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from bertprep.bert_model.hf.export import export_model
from bertprep.bert_model.hf.interop import load_model_source, max_sequence_length
from bertprep.bert_model.retrieval.config import RetrievalTrainConfig
from bertprep.bert_model.retrieval.data import Pair, read_pairs
from bertprep.bert_model.runtime import resolve_device
from bertprep.core import strict_json
from bertprep.core.atomic import LOCK_NAME, remove_stale_staging, replace_directory, staging_name

logger = logging.getLogger(__name__)

TRAIN_RECORD = "retrieval_train.json"
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


@dataclass
class RetrievalTrainResult:
    output_dir: str
    pairs: int
    steps: int
    train_loss: float
    train_seconds: float


def _is_hf_directory(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json")) and any(
        os.path.isfile(os.path.join(path, w)) for w in _HF_WEIGHTS
    )


def _check_output(config: RetrievalTrainConfig) -> None:
    """Refuse an output that exists (unless ``overwrite``; a folder holding only a run's lock is free) or that
    holds the model."""
    out_dir = config.output_dir
    exists = os.path.isfile(out_dir) or (os.path.isdir(out_dir) and set(os.listdir(out_dir)) - {LOCK_NAME})
    if exists and not config.overwrite:
        raise FileExistsError(f"{config.output_dir} exists; choose another --output-dir or pass --overwrite")
    model, out = os.path.abspath(config.init_from), os.path.abspath(config.output_dir)
    if model == out or model.startswith(out + os.sep):
        raise ValueError(f"--output-dir {config.output_dir} holds the model {config.init_from}; choose another")


def build_sentence_transformer(config: RetrievalTrainConfig, hf_dir: str) -> Any:
    """The untrained ``SentenceTransformer``: ``Transformer(hf_dir)``, ``Pooling``, ``Normalize``; with
    ``random_init`` the encoder's weights are drawn anew (``AutoModel.from_config``, seeded)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoModel

    limit = max_sequence_length(load_model_source(hf_dir).config)  # a RoBERTa's positions less its offset
    word = Transformer(hf_dir, max_seq_length=min(config.max_seq_length, limit))
    if config.random_init:
        torch.manual_seed(config.seed)
        word.model = AutoModel.from_config(word.auto_model.config)
    pooling = Pooling(word.get_embedding_dimension(), pooling_mode=config.pooling)
    return SentenceTransformer(modules=[word, pooling, Normalize()], device=str(resolve_device(config.device)))


def _dataset(pairs: list[Pair]) -> Any:
    from datasets import Dataset

    columns = {"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    if pairs[0].negative is not None:
        columns["negative"] = [str(p.negative) for p in pairs]
    return Dataset.from_dict(columns)


def train_bi_encoder(config: RetrievalTrainConfig) -> RetrievalTrainResult:
    """Fine-tune ``config.init_from`` on ``config.train_file``'s pairs and write ``config.output_dir``
    (module docstring).

    Raises:
        FileExistsError: the output exists and ``overwrite`` is False.
        ValueError / FileNotFoundError: bad pairs (``data.read_pairs``), a model without weights or tokenizer.
    """
    _check_output(config)
    pairs = read_pairs(config.train_file)[: config.max_train_examples]
    source = load_model_source(config.init_from)
    if source.vocab_tokens is None:
        raise ValueError(f"{config.init_from} has no tokenizer (vocab.txt or tokenizer.json beside its weights)")
    import sentence_transformers  # noqa: F401  (imported before anything is written: a stop during an import exits)

    parent = os.path.dirname(os.path.abspath(config.output_dir))
    os.makedirs(parent, exist_ok=True)
    remove_stale_staging(parent, "retrieval")  # left by a run that was stopped
    staging = os.path.join(parent, staging_name("retrieval"))
    try:
        hf_dir = config.init_from
        # A checkpoint's step-* folder has config.json and model.safetensors too, but no tokenizer files.
        if source.kind == "bertprep-checkpoint" or not _is_hf_directory(hf_dir):
            hf_dir = os.path.join(staging, "init")
            export_model(config.init_from, hf_dir)
        start = time.perf_counter()
        model = build_sentence_transformer(config, hf_dir)
        steps, loss = _fit(model, pairs, config, os.path.join(staging, "trainer"))
        seconds = time.perf_counter() - start
        final = os.path.join(staging, "model")
        model.save(final)
        record = {"settings": _settings(config), "pairs": len(pairs), "steps": steps, "train_loss": loss}
        with open(os.path.join(final, TRAIN_RECORD), "w", encoding="utf-8") as f:
            strict_json.dump({**record, "train_seconds": seconds}, f, indent=2)
        replace_directory(final, config.output_dir, keep=lambda name: name == LOCK_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RetrievalTrainResult(config.output_dir, len(pairs), steps, loss, seconds)


def _settings(config: RetrievalTrainConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if k not in ("overwrite", "progress", "output_dir")}


def _fit(model: Any, pairs: list[Pair], config: RetrievalTrainConfig, trainer_dir: str) -> tuple[int, float]:
    """Train ``model`` in place with sentence-transformers' trainer; returns (optimizer steps, mean loss)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from transformers.trainer_callback import PrinterCallback

    args = SentenceTransformerTrainingArguments(
        output_dir=trainer_dir,
        num_train_epochs=config.num_train_epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_proportion,  # a float below 1: a share of the steps (transformers v5)
        seed=config.seed,
        data_seed=config.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, len(pairs) // config.batch_size // 10),
        disable_tqdm=not config.progress,
        use_cpu=resolve_device(config.device).type == "cpu",
    )
    loss = MultipleNegativesRankingLoss(model, scale=config.scale)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=_dataset(pairs), loss=loss)
    if not config.progress:  # transformers prints every log line to stdout when its progress bar is off
        trainer.remove_callback(PrinterCallback)
    output = trainer.train()
    return int(output.global_step), float(output.training_loss)
