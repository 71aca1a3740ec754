"""What every fine-tuning task object shares (``glue.GlueTask``, ``squad.SquadTask``, ``ner.NerTask``,
``multiple_choice.MultipleChoiceTask``): its settings as saved in ``finetune.json`` and read back from there,
and its head built from the two ``architectures`` names it gives.

A task is a dataclass of its settings with class attributes ``name`` (its ``--task`` name), ``architecture``
and ``modernbert_architecture`` (its head's ``transformers`` class names, ``heads.HEADS`` keys) and
``num_labels``; ``registry.py`` maps the names to the classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from torch import nn

from bertprep.bert_model.models.bert_config import BertConfig
from bertprep.bert_model.models.heads import HEADS
from bertprep.bert_model.models.modernbert_config import ModernBertConfig

_Task = TypeVar("_Task", bound="TaskSettings")


class TaskSettings:
    """Base of the task dataclasses: ``to_json`` / ``from_json`` and ``build_model``, one implementation for
    every task."""

    name: ClassVar[str]
    """The ``--task`` name, written as ``task`` in ``finetune.json``."""
    __dataclass_fields__: ClassVar[dict[str, Any]]

    # Read-only: each task gives these as class attributes, or as properties where they follow its settings
    # (NER's head after ``feature_based``, GLUE's and NER's label count after ``labels``).
    @property
    def architecture(self) -> str:
        """The BERT head's ``transformers`` class name (e.g. ``BertForSequenceClassification``)."""
        raise NotImplementedError(f"{type(self).__name__} names no BERT head")

    @property
    def modernbert_architecture(self) -> str:
        """The ModernBERT head's (e.g. ``ModernBertForSequenceClassification``)."""
        raise NotImplementedError(f"{type(self).__name__} names no ModernBERT head")

    @property
    def num_labels(self) -> int:
        """Outputs of the head (a multiple-choice head takes it for a uniform constructor and has 1)."""
        raise NotImplementedError(f"{type(self).__name__} has no label count")

    def to_json(self) -> dict[str, Any]:
        """Settings for ``finetune.json``: ``task`` (the name), then every field."""
        return {"task": self.name, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls: type[_Task], values: dict[str, Any]) -> _Task:
        """The task of a ``to_json()`` dict (its ``task`` key is the class's name and is dropped)."""
        return cls(**{k: v for k, v in values.items() if k != "task"})

    @property
    def head_options(self) -> dict[str, Any]:
        """What the head's constructor takes besides the config and ``num_labels`` (none by default)."""
        return {}

    def build_model(self, config: BertConfig | ModernBertConfig) -> nn.Module:
        """The head of ``architecture`` (``heads.HEADS``) on a BERT encoder for a ``BertConfig``, of
        ``modernbert_architecture`` on a ModernBERT encoder for a ``ModernBertConfig``: ``num_labels``
        outputs, and ``head_options``."""
        name = self.modernbert_architecture if isinstance(config, ModernBertConfig) else self.architecture
        head: Callable[..., nn.Module] = HEADS[name]
        return head(config, num_labels=self.num_labels, **self.head_options)

    def predictions(
        self, examples: Sequence[Any], features: Sequence[dict[str, Any]], outputs: Sequence[dict[str, np.ndarray]]
    ) -> list[Any]:
        """Per example the ``prediction`` of its feature and the model's output on it (GLUE, NER and multiple
        choice make one feature per example; SQuAD, whose questions span windows, has its own)."""
        out: list[Any] = [None] * len(examples)
        for feature, output in zip(features, outputs, strict=True):
            out[feature["example_index"]] = self.prediction(feature, output)
        return out

    def prediction(self, feature: dict[str, Any], output: dict[str, np.ndarray]) -> Any:
        """One example's prediction from its feature and the model's output on it (numpy arrays by name)."""
        raise NotImplementedError(f"{type(self).__name__} has no per-feature prediction")
