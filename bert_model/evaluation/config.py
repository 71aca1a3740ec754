"""The settings of ``bertprep evaluate glue`` (:class:`GlueEvalConfig`) and ``squad`` (:class:`SquadEvalConfig`),
and those they share (:class:`EvalConfig`).

Torch-free, so that the commands' ``--help``, which reads its defaults here, imports no torch; ``harness.py``
re-exports them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bertprep.bert_model.loop_config import DeviceConfig, LoopConfig


@dataclass(kw_only=True)
class EvalConfig(DeviceConfig):
    """Settings every evaluation shares (``bertprep evaluate glue`` / ``squad``)."""

    model: str
    """The pre-trained model: a bertprep run or checkpoint, or a Hugging Face BERT / ModernBERT directory."""
    output_dir: str
    """Where the runs, the table (``glue.md`` / ``squad.md``) and the numbers (``.json``) go."""
    random_init: bool = False
    """Fine-tune ``model``'s architecture from random weights (the baseline without pre-training)."""
    name: str | None = None
    """The model's row label in the table (default: the model folder's name); " (random init)" is added for
    ``random_init``."""
    grid: str = "bert"
    """A shipped grid (``bert``, ``roberta``, ``modernbert``) or a TOML file (``grid.py``)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Grid keys replaced for every task (``--set KEY=VALUES``)."""
    seeds: int = 1
    """Runs per setting, with seeds ``LoopConfig.seed`` + 0, 1, ...; the table shows the median."""
    max_train_examples: int | None = None
    """Fine-tune on the first this many training examples of each task (a slice, for a quick look)."""
    max_eval_examples: int | None = None
    """Score on the first this many dev examples."""

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"seeds must be at least 1, got {self.seeds}")
        for name in ("max_train_examples", "max_eval_examples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def seed_list(self) -> list[int]:
        return [LoopConfig.seed + i for i in range(self.seeds)]

    def label(self) -> str:
        """The row label: ``name`` or the model folder's name, + " (random init)" for the baseline."""
        path = os.path.abspath(self.model)
        base = os.path.basename(path)
        base = os.path.basename(os.path.dirname(path)) if base in ("model", "best") else base
        return (self.name or base) + (" (random init)" if self.random_init else "")


@dataclass(kw_only=True)
class GlueEvalConfig(EvalConfig):
    """``bertprep evaluate glue``."""

    data_dir: str
    """A GLUE folder (``glue_data.py``)."""
    tasks: list[str] | None = None
    """The tasks to run (GLUE preset names); None: every task in ``data_dir``."""
    small_tasks_from_mnli: bool = False
    """Start RTE, MRPC and STS-B from the MNLI model (needs MNLI)."""

    def __post_init__(self) -> None:
        EvalConfig.__post_init__(self)
        if self.small_tasks_from_mnli and self.random_init:
            raise ValueError("small_tasks_from_mnli starts from a fine-tuned MNLI model; it excludes random_init")


@dataclass(kw_only=True)
class SquadEvalConfig(EvalConfig):
    """``bertprep evaluate squad``."""

    train_file: str
    """SQuAD training JSON (v1.1 or v2.0)."""
    dev_file: str
    """SQuAD dev JSON of the same version; its ``version`` field names the column."""
