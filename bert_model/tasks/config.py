"""The settings of ``bertprep finetune`` (:class:`FinetuneConfig`) and ``bertprep predict``
(:class:`PredictConfig`), and GLUE's task presets (:data:`GLUE_TASKS`).

Torch-free, so that the commands' ``--help``, which reads its defaults and choices here, imports no torch;
``finetune.py``, ``predict.py`` and ``glue.py`` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bertprep.bert_model.loop_config import DeviceConfig, LoopConfig, OptimConfig
from bertprep.bert_model.models.bert_config import PRESETS


@dataclass
class FinetuneConfig(LoopConfig, OptimConfig):
    """Training settings of ``bertprep finetune`` (the task's own settings live in the task object; the loop's
    and the optimizer's that pre-training shares are :class:`LoopConfig`'s and :class:`OptimConfig`'s)."""

    train_file: str
    """Training data (GLUE TSV, SQuAD JSON or CoNLL)."""
    output_dir: str
    """Run directory: metrics.jsonl, results.json, best/ and eval_predictions.*."""
    eval_file: str | None = None
    """Evaluation data in the same format; without it the last step's model is kept."""
    init_from: str | None = None
    """bertprep checkpoint / run directory or Hugging Face BERT / ModernBERT directory whose encoder starts
    training; its architecture picks the head (``task.build_model``)."""
    random_init: bool = False
    """Take only the config and vocab from ``init_from`` and start from random weights (a baseline)."""
    preset: str | None = None
    """Model size for random initialisation without ``init_from`` (needs ``vocab``)."""
    vocab: str | None = None
    """``vocab.txt`` to tokenize with (default: the one beside ``init_from``'s weights)."""
    do_lower_case: bool | None = None
    """Lower-case input; None = as recorded with the model (else guessed from the vocab)."""
    strip_accents: bool | None = None
    """Strip accents (NFD; splits Hangul syllables into jamo); None = as recorded with the model, else the same
    as ``do_lower_case`` (the original)."""
    learning_rate: float = 5e-5
    """Peak learning rate (paper: one of 5e-5, 3e-5, 2e-5)."""
    batch_size: int = 32
    """Training examples (features) per step."""
    eval_batch_size: int = 64
    """Batch size when evaluating."""
    num_train_epochs: float = 3.0
    """Epochs over the training data (paper: 3)."""
    max_steps: int | None = None
    """Length of the schedule in steps, overriding ``num_train_epochs``."""
    max_time_minutes: float | None = None
    """Stop training after this many minutes (schedule unchanged), then evaluate and save."""
    warmup_proportion: float = 0.1
    """Share of steps with linear warm-up; then linear decay to 0."""
    eval_every: int = 0
    """Also evaluate every this many steps (0 = after each epoch only)."""
    max_train_examples: int | None = None
    """Use only the first this many training examples (questions for SQuAD, sentences for NER)."""
    max_eval_examples: int | None = None
    """Evaluate on only the first this many examples."""
    overwrite: bool = False
    """Replace an existing run in ``output_dir``."""

    def __post_init__(self) -> None:
        LoopConfig.__post_init__(self)
        OptimConfig.__post_init__(self)
        if self.init_from is None and (self.preset is None or self.vocab is None):
            raise ValueError(
                "give init_from (a pre-trained checkpoint or Hugging Face directory), or preset and "
                "vocab for a randomly initialised model"
            )
        if self.random_init and self.init_from is None:
            raise ValueError("random_init takes the config from init_from; give init_from (or preset + vocab)")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        for name in ("learning_rate", "batch_size", "eval_batch_size", "num_train_epochs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_steps", "max_time_minutes", "max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if not 0 <= self.warmup_proportion < 1:
            raise ValueError(f"warmup_proportion must be in [0, 1), got {self.warmup_proportion}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every must be >= 0, got {self.eval_every}")


@dataclass
class PredictConfig(DeviceConfig):
    """The settings of ``bertprep predict`` (:func:`predict`; the CLI reads its defaults here)."""

    model_dir: str
    """A ``bertprep finetune`` run or its ``best/`` directory (or an exported / Hugging Face fine-tuned one)."""
    input_file: str
    """The file to predict, in the task's format (labels optional)."""
    output_file: str
    """Where the predictions go (the task's format; written atomically)."""
    task_overrides: dict[str, Any] = field(default_factory=dict)
    """Task settings that replace those recorded with the model (glue columns, ``max_seq_length``, ...)."""
    batch_size: int = 64
    """Inputs per forward pass."""
    max_examples: int | None = None
    """Predict only the first this many examples."""
    do_lower_case: bool | None = None
    """Tokenizer casing instead of the one recorded with the model."""
    strip_accents: bool | None = None
    """Accent stripping instead of the one recorded with the model (None: as recorded, else as the casing)."""
    progress: bool = True
    """Show a progress bar."""


@dataclass(frozen=True)
class GluePreset:
    """Column layout, labels and metrics of one GLUE task (train.tsv / dev.tsv as GLUE distributes them)."""

    text_a_column: str | int
    text_b_column: str | int | None
    label_column: str | int
    header: bool
    labels: tuple[str, ...] | None
    """Label strings in class-index order; None for regression."""
    metrics: tuple[str, ...]
    """GLUE's metrics for the task; the first selects the best checkpoint."""


GLUE_TASKS: dict[str, GluePreset] = {
    "cola": GluePreset(3, None, 1, False, ("0", "1"), ("matthews_corrcoef", "accuracy")),
    "sst2": GluePreset("sentence", None, "label", True, ("0", "1"), ("accuracy",)),
    "mrpc": GluePreset("#1 String", "#2 String", "Quality", True, ("0", "1"), ("f1", "accuracy")),
    "stsb": GluePreset("sentence1", "sentence2", "score", True, None, ("pearson", "spearman")),
    "qqp": GluePreset("question1", "question2", "is_duplicate", True, ("0", "1"), ("f1", "accuracy")),
    "mnli": GluePreset(
        "sentence1", "sentence2", "gold_label", True, ("contradiction", "entailment", "neutral"), ("accuracy",)
    ),
    "qnli": GluePreset("question", "sentence", "label", True, ("entailment", "not_entailment"), ("accuracy",)),
    "rte": GluePreset("sentence1", "sentence2", "label", True, ("entailment", "not_entailment"), ("accuracy",)),
    "wnli": GluePreset("sentence1", "sentence2", "label", True, ("0", "1"), ("accuracy",)),
}
