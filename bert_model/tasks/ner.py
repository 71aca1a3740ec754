"""Token classification (named-entity recognition) from CoNLL-style files (BERT paper, section 5.3).

Input: ``[CLS] word pieces [SEP]`` of one sentence. As in the paper, each word's tag is predicted from the
representation of its *first* word piece; the other pieces, ``[CLS]``, ``[SEP]`` and padding carry the
ignore label -100. A sentence longer than ``max_seq_length - 2`` pieces is cut, and the words that fall off
(and words that tokenize to nothing, e.g. a lone zero-width space) are predicted ``O``; the log says how
many.

File format: one ``TOKEN<TAB>TAG`` per line (the WNUT-17 layout; CoNLL-2003 style lines with several
space-separated columns also work: the first column is the token, the last the tag), sentences separated
by empty or whitespace-only lines (WNUT-17 train uses a lone TAB), ``-DOCSTART-`` lines skipped. Tags are
``O`` or ``B-TYPE`` / ``I-TYPE``. Entity-level precision, recall and F1 come from ``seqeval`` (default,
conlleval-compatible mode): an entity counts only when its type and both boundaries match.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from seqeval.metrics import f1_score, precision_score, recall_score

from bertprep.bert_model.models.bert import IGNORE_INDEX
from bertprep.bert_model.models.heads import BertForTokenClassification, ModernBertForTokenClassification
from bertprep.bert_model.tasks.base import TaskSettings
from bertprep.bert_model.tasks.feature_based import (
    FEATURE_MODES,
    BertFeatureBasedForTokenClassification,
    ModernBertFeatureBasedForTokenClassification,
)
from bertprep.core.vocab_files import WordPieceTokenizer

logger = logging.getLogger(__name__)

#: Whether ``feature_based`` -> the (BERT, ModernBERT) head's architecture name: fine-tuned (``heads``), or the
#: frozen encoder's BiLSTM tagger (``feature_based``).
_HEAD_ARCHITECTURES: dict[bool, tuple[str, str]] = {
    False: (BertForTokenClassification.architecture, ModernBertForTokenClassification.architecture),
    True: (
        BertFeatureBasedForTokenClassification.architecture,
        ModernBertFeatureBasedForTokenClassification.architecture,
    ),
}

_TAG_RE = re.compile(r"^(O|[BI]-\S+)$")


@dataclass
class NerExample:
    words: list[str]
    tags: list[str] | None
    """One tag per word; None for an unlabelled file."""
    line: int
    """1-based line number of the sentence's first word."""


def read_conll(path: str, *, with_labels: bool = True, limit: int | None = None) -> list[NerExample]:
    """Sentences of a CoNLL-style file (see the module docstring).

    Args:
        path: the file (UTF-8).
        with_labels: every line must have a token and a tag; when False, one-column lines are accepted (tags
            are kept only if every line has one).
        limit: keep the first ``limit`` sentences.
    Raises:
        FileNotFoundError: no such file.
        ValueError: a line without a tag (when labels are required), an empty token, or a tag that is not
            BIO; the message gives ``path:line``.
    """
    examples: list[NerExample] = []
    words: list[str] = []
    tags: list[str | None] = []
    first_line = 0
    all_tagged = True

    def flush() -> None:
        if words:
            examples.append(NerExample(list(words), list(tags), first_line))  # type: ignore[arg-type]
            words.clear()
            tags.clear()

    with open(path, encoding="utf-8-sig") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                flush()
                if limit is not None and len(examples) >= limit:
                    break
                continue
            if line.startswith("-DOCSTART-"):
                flush()
                continue
            token, tag = _token_and_tag(line, f"{path}:{lineno}", with_labels)
            if tag is None:
                all_tagged = False
            if not words:
                first_line = lineno
            words.append(token)
            tags.append(tag)
    flush()
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise ValueError(f"{path}: no sentences found")
    if not all_tagged:
        for e in examples:
            e.tags = None
    return examples


def _token_and_tag(line: str, where: str, with_labels: bool) -> tuple[str, str | None]:
    """The token (first column) and BIO tag (last column; None when the line has none and ``with_labels``
    is False) of a non-empty CoNLL line; columns are TAB-separated, else space-separated.

    Raises:
        ValueError: an empty token, a missing tag when ``with_labels``, or a tag that is not BIO; the message
            starts with ``where`` (``path:line``).
    """
    fields = line.split("\t") if "\t" in line else line.split()
    token = fields[0].strip()
    if not token:
        raise ValueError(f"{where}: empty token in {line!r}; expected TOKEN<TAB>TAG")
    tag: str | None = fields[-1].strip() if len(fields) >= 2 else None
    if tag is None or not tag:
        if with_labels:
            raise ValueError(
                f"{where}: no tag in {line!r}; expected TOKEN<TAB>TAG (sentences are separated by empty lines)"
            )
        return token, None
    if not _TAG_RE.match(tag):
        raise ValueError(f"{where}: tag {tag!r} is not a BIO tag (O, B-TYPE or I-TYPE)")
    return token, tag


@dataclass
class NerTask(TaskSettings):
    """Token classification settings and the task interface ``finetune`` uses."""

    labels: list[str] | None = None
    """Tags in class-index order; None = collected from the training file (``O`` first, then sorted)."""
    max_seq_length: int = 128
    """Word pieces per sentence, [CLS] and [SEP] included."""
    feature_based: str | None = None
    """None = fine-tune the encoder (paper 5.3, fine-tuning rows of Table 7). Else the feature-based approach:
    freeze the encoder and train a two-layer BiLSTM on these activations (``feature_based.FEATURE_MODES``:
    ``last4-concat``, ``last4-sum``, ``second-to-last``, ``last``, ``embeddings``)."""
    lstm_hidden_size: int | None = None
    """Feature-based: BiLSTM units per direction (None = the model's hidden size; 768 for BERT-Base, as the
    paper)."""

    name = "ner"
    metrics = ("f1", "precision", "recall")
    metric_for_best = "f1"

    def __post_init__(self) -> None:
        if self.max_seq_length < 3:
            raise ValueError(f"max_seq_length must be at least 3, got {self.max_seq_length}")
        if self.feature_based is not None and self.feature_based not in FEATURE_MODES:
            raise ValueError(f"feature_based must be one of {', '.join(FEATURE_MODES)}, got {self.feature_based!r}")
        if self.lstm_hidden_size is not None and (self.feature_based is None or self.lstm_hidden_size < 1):
            raise ValueError("lstm_hidden_size is a positive size and only applies with feature_based")
        if self.labels is not None:
            bad = [t for t in self.labels if not _TAG_RE.match(t)]
            if bad or len(set(self.labels)) != len(self.labels):
                raise ValueError(f"labels must be distinct BIO tags, got {self.labels}")

    @property
    def num_labels(self) -> int:
        if self.labels is None:
            raise ValueError("the tag set is not known yet (call prepare with the training examples)")
        return len(self.labels)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.labels or []))

    def read(
        self, path: str, *, with_labels: bool = True, limit: int | None = None, split: str = "eval"
    ) -> list[NerExample]:
        """``read_conll`` (``split`` is accepted for a uniform task interface)."""
        return read_conll(path, with_labels=with_labels, limit=limit)

    def prepare(self, train_examples: Sequence[NerExample]) -> None:
        """Fix the tag set from the training sentences when none was given: ``O`` then the others sorted."""
        if self.labels is not None:
            for e in train_examples:
                unknown = set(e.tags or []) - set(self.labels)
                if unknown:
                    raise ValueError(f"line {e.line}: tags {sorted(unknown)} are not in labels {self.labels}")
            return
        found = {t for e in train_examples for t in (e.tags or [])}
        self.labels = ["O"] + sorted(found - {"O"})
        logger.info("%d tags from the training file: %s", len(self.labels), self.labels)

    @property
    def architecture(self) -> str:
        return _HEAD_ARCHITECTURES[bool(self.feature_based)][0]

    @property
    def modernbert_architecture(self) -> str:
        return _HEAD_ARCHITECTURES[bool(self.feature_based)][1]

    @property
    def head_options(self) -> dict[str, Any]:
        """With ``feature_based``, the BiLSTM tagger's ``feature_based`` and ``lstm_hidden_size``."""
        if not self.feature_based:
            return {}
        return {"feature_based": self.feature_based, "lstm_hidden_size": self.lstm_hidden_size}

    def featurize(
        self, examples: Sequence[NerExample], tokenizer: WordPieceTokenizer, with_labels: bool = True
    ) -> list[dict[str, Any]]:
        """One feature per sentence: ``input_ids``, ``token_type_ids``, ``example_index``, ``word_starts``
        (per word the position of its first piece in ``input_ids``, or None), and with labels ``labels``
        (per position the tag index at first pieces, -100 elsewhere)."""
        cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        label_index = {t: i for i, t in enumerate(self.labels or [])}
        encodings = tokenizer.encode_words_batch([e.words for e in examples])
        features = []
        cut_words = empty_words = 0
        limit = self.max_seq_length - 2
        for i, (e, enc) in enumerate(zip(examples, encodings, strict=True)):
            ids = list(enc.ids)[:limit]
            word_ids = list(enc.word_ids)[:limit]
            word_starts: list[int | None] = [None] * len(e.words)
            previous = None
            for j, w in enumerate(word_ids):
                if w is not None and w != previous:
                    word_starts[w] = j + 1  # +1 for [CLS]
                previous = w
            covered = {w for w in enc.word_ids if w is not None}
            empty_words += len(e.words) - len(covered)
            cut_words += sum(1 for w in covered if word_starts[w] is None)
            input_ids = [cls_id, *ids, sep_id]
            feature: dict[str, Any] = {
                "input_ids": input_ids,
                "token_type_ids": [0] * len(input_ids),
                "example_index": i,
                "word_starts": word_starts,
            }
            if with_labels:
                if e.tags is None:
                    raise ValueError(f"line {e.line}: sentence has no tags")
                labels = [IGNORE_INDEX] * len(input_ids)
                for w, position in enumerate(word_starts):
                    if position is not None:
                        labels[position] = label_index[e.tags[w]]
                feature["labels"] = labels
            features.append(feature)
        if cut_words or empty_words:
            logger.info(
                "%d words beyond max_seq_length=%d and %d words without word pieces are predicted 'O'",
                cut_words,
                self.max_seq_length,
                empty_words,
            )
        return features

    def prediction(self, feature: dict[str, Any], output: dict[str, np.ndarray]) -> list[str]:
        """A sentence's tags, one per word (argmax at the word's first piece; ``O`` for words without one)."""
        best = output["logits"].argmax(-1)
        labels = self.labels or []
        return [labels[int(best[p])] if p is not None else "O" for p in feature["word_starts"]]

    def metric_values(self, examples: Sequence[NerExample], predictions: Sequence[list[str]]) -> dict[str, float]:
        """Entity-level ``f1``, ``precision``, ``recall`` (seqeval, fractions 0..1)."""
        return ner_metrics([e.tags or [] for e in examples], list(predictions))

    def write_predictions(self, path: str, examples: Sequence[NerExample], predictions: Sequence[list[str]]) -> None:
        """CoNLL: ``TOKEN<TAB>PREDICTED_TAG`` per line, an empty line after each sentence."""
        with open(path, "w", encoding="utf-8") as f:
            for e, tags in zip(examples, predictions, strict=True):
                f.writelines(f"{w}\t{t}\n" for w, t in zip(e.words, tags, strict=True))
                f.write("\n")


def ner_metrics(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level ``f1``, ``precision`` and ``recall`` with seqeval (default mode, as conlleval)."""
    return {
        "f1": float(f1_score(gold, predicted, zero_division=0)),
        "precision": float(precision_score(gold, predicted, zero_division=0)),
        "recall": float(recall_score(gold, predicted, zero_division=0)),
    }
