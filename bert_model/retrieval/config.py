"""The settings of ``bertprep finetune --task retrieval`` (:class:`RetrievalTrainConfig`) and ``bertprep
evaluate retrieval`` (:class:`RetrievalEvalConfig`), and the poolings they accept.

Torch-free, so that the commands' ``--help``, which reads its defaults and choices here, imports no torch;
``encoder.py``, ``train.py`` and ``evaluate.py`` re-export them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bertprep.bert_model.loop_config import DeviceConfig

POOLINGS = ("mean", "cls")


DEFAULT_MAX_SEQ_LENGTH = 256


@dataclass(kw_only=True)
class RetrievalTrainConfig(DeviceConfig):
    """Settings of ``bertprep finetune --task retrieval`` (``device`` is :class:`DeviceConfig`'s)."""

    train_file: str
    """Pairs: TSV with a ``query``, ``positive`` [, ``negative``] header, JSONL with those keys, or a BEIR folder
    (its ``qrels/train.tsv``)."""
    output_dir: str
    """The sentence-transformers directory to write."""
    init_from: str
    """The starting model: a bertprep run or checkpoint, or a Hugging Face / sentence-transformers directory."""
    random_init: bool = False
    """Keep ``init_from``'s architecture and tokenizer but draw new weights (the no-pre-training baseline)."""
    pooling: str = "mean"
    """``mean`` (the attention-mask mean of the last layer, Sentence-BERT's) or ``cls`` (the [CLS] vector, DPR's)."""
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    """Pieces per text, special tokens included (cut to the model's positions when it has fewer)."""
    learning_rate: float = 2e-5
    """Peak AdamW learning rate (linear warm-up, then linear decay)."""
    batch_size: int = 32
    """Pairs per batch: each query's in-batch negatives are the other ``batch_size - 1`` positives."""
    num_train_epochs: float = 1.0
    """Passes over the pairs."""
    warmup_proportion: float = 0.1
    """Share of the steps with a linearly rising learning rate."""
    scale: float = 20.0
    """Similarity scale of the loss (sentence-transformers' default; 1 / temperature)."""
    seed: int = 12345
    """Seed of the weights drawn (``random_init``), the batch order and dropout."""
    max_train_examples: int | None = None
    """Train on the first this many pairs."""
    overwrite: bool = False
    """Replace an existing output directory."""
    progress: bool = True
    """Show the trainer's progress bar."""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.batch_size < 2:
            raise ValueError(f"batch_size must be at least 2 (in-batch negatives), got {self.batch_size}")
        for name in ("learning_rate", "num_train_epochs", "scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_seq_length < 3:
            raise ValueError(f"max_seq_length must be at least 3, got {self.max_seq_length}")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError(f"max_train_examples must be positive, got {self.max_train_examples}")


@dataclass(kw_only=True)
class RetrievalEvalConfig(DeviceConfig):
    """Settings of ``bertprep evaluate retrieval`` (``device`` is :class:`DeviceConfig`'s); each field's docstring
    is its option's help. The fine-tuning's defaults are :class:`RetrievalTrainConfig`'s."""

    model: str
    """The encoder: a bertprep run or checkpoint, a Hugging Face BERT / RoBERTa / ModernBERT directory, or a
    sentence-transformers directory (its pooling is used)."""
    data_dir: str
    """BEIR folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/{train,dev,test}.tsv`` (``bertprep evaluate
    squad-to-beir`` makes one from a SQuAD file)."""
    output_dir: str
    """Folder of the runs (``runs/RUN/``: model, corpus vectors, ``run.trec``), ``retrieval.md`` and
    ``retrieval.json``. Running the same command again continues where it stopped."""
    split: str = "test"
    """The qrels scored: ``qrels/SPLIT.tsv``."""
    finetune: bool = False
    """Fine-tune on ``qrels/train.tsv`` first (in-batch negatives, sentence-transformers), once per seed."""
    random_init: bool = False
    """With ``--finetune``: start from random weights of the model's architecture (the baseline)."""
    seeds: int = 1
    """With ``--finetune``: runs with seeds ``--seed``, ``--seed + 1``, ...; the table shows the median."""
    seed: int = RetrievalTrainConfig.seed
    """The first fine-tuning seed."""
    name: str | None = None
    """Row label (default: the model folder's name)."""
    pooling: str | None = None
    """``mean`` or ``cls`` (default: the model's sentence-transformers pooling, else mean)."""
    max_seq_length: int | None = None
    """Pieces per text (default: the model's sentence-transformers length, else 256 or its positions)."""
    learning_rate: float = RetrievalTrainConfig.learning_rate
    """With ``--finetune``: peak learning rate."""
    batch_size: int = RetrievalTrainConfig.batch_size
    """With ``--finetune``: pairs per batch (each query's in-batch negatives are the other positives)."""
    num_train_epochs: float = RetrievalTrainConfig.num_train_epochs
    """With ``--finetune``: passes over the pairs."""
    max_train_examples: int | None = None
    """With ``--finetune``: train on the first N pairs."""
    max_queries: int | None = None
    """Score the first N judged queries of the split (a quicker, rougher figure)."""
    encode_batch_size: int = 64
    """Texts per forward pass when encoding."""
    progress: bool = True
    """Progress bars on stderr."""

    def __post_init__(self) -> None:
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.seeds < 1:
            raise ValueError(f"seeds must be at least 1, got {self.seeds}")
        if not self.finetune and (self.random_init or self.seeds > 1):
            raise ValueError("random_init and seeds > 1 fine-tune; add finetune (--finetune)")
        for name in ("max_train_examples", "max_queries", "encode_batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def label(self) -> str:
        """The row label: ``name`` or the model folder's name, + " (fine-tuned)" / " (random init)"."""
        base = os.path.basename(os.path.abspath(self.model))
        suffix = " (random init)" if self.random_init else " (fine-tuned)" if self.finetune else ""
        return (self.name or base) + suffix

    def run_names(self) -> list[tuple[str, int | None]]:
        """(run folder name, seed): ``seed<N>`` per fine-tuning seed, or ``as-is``."""
        if not self.finetune:
            return [("as-is", None)]
        return [(f"seed{self.seed + i}", self.seed + i) for i in range(self.seeds)]
