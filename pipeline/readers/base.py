"""What every reader shares: the format names, :class:`Document`, :class:`ReaderStats`, :class:`InputError`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.errors import InputError  # noqa: F401  (re-exported as readers.InputError)

#: Accepted values of ``input_format`` (``--input-format``).
INPUT_FORMATS = (
    "auto",
    "bert",
    "jsonl",
    "text",
    "wikiextractor",
    "wikiextractor-json",
    "wiki-xml",
    "parquet",
    "hf",
    "csv",
    "tsv",
)

#: Default limit on the characters of one line (``--max-line-chars``; ``ReadOptions.max_line_chars`` says why).
DEFAULT_MAX_LINE_CHARS = ReadOptions.max_line_chars


@dataclass(frozen=True)
class Document:
    """One document: the unit BERT's next-sentence pairs are drawn from.

    ``source`` is the file path as matched, ``ordinal`` the 0-based index of this document among the
    documents its file yields (``(source, ordinal)`` is a stable document id), ``line`` the 1-based line
    where the document starts in its file (0 where that is not meaningful), ``sentences`` its non-empty,
    stripped sentences in order.
    """

    source: str
    ordinal: int
    line: int
    sentences: list[str]


@dataclass
class ReaderStats:
    """Counters of what the readers read and skipped; mergeable and JSON-serializable.

    ``bytes`` counts the bytes read after decompression. ``empty_files`` counts input files with no
    bytes at all. Dict fields map a reason (or a format) to a count.
    """

    files: int = 0
    documents: int = 0
    sentences: int = 0
    bytes: int = 0
    skipped_documents: dict[str, int] = field(default_factory=dict)
    skipped_lines: dict[str, int] = field(default_factory=dict)
    undecodable_lines: int = 0
    one_sentence_documents: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    empty_files: int = 0

    def merge(self, other: ReaderStats) -> ReaderStats:
        """Add ``other``'s counts into this object and return it (for Beam combiners and reductions)."""
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, dict):
                for key, value in theirs.items():
                    mine[key] = mine.get(key, 0) + value
            else:
                setattr(self, f.name, mine + theirs)
        return self

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-serializable) with the dict fields' keys sorted."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(sorted(value.items())) if isinstance(value, dict) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReaderStats:
        """Inverse of :meth:`to_dict`; unknown keys are ignored, missing ones are zero."""
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if k in names}
        return cls(**values)

    def _count(self, counter: dict[str, int], reason: str, n: int = 1) -> None:
        counter[reason] = counter.get(reason, 0) + n
