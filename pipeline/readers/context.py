"""What a format reader is given: the file being read, the options, the counters, and its lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bertprep.pipeline.readers.base import ReaderStats
from bertprep.pipeline.readers.files import _iter_lines
from bertprep.pipeline.text.segmentation import Segmenter

#: A format reader: yields ``(line, sentences)`` per document; empty documents are counted, not yielded.
FormatReader = Callable[["ReadContext"], Iterator[tuple[int, list[str]]]]


@dataclass
class ReadContext:
    """One input file being read: its path, the reader options (``text_field``, the sentence splitter ``split``
    of prose formats, ``encoding``, ``max_line_chars``) and the :class:`ReaderStats` to count into."""

    path: str
    text_field: str
    split: Segmenter | None
    encoding: str
    max_line_chars: int
    stats: ReaderStats

    def lines(self, strip_bom: bool = True) -> Iterator[tuple[int, str]]:
        return _iter_lines(
            self.path, encoding=self.encoding, max_line_chars=self.max_line_chars, stats=self.stats, strip_bom=strip_bom
        )

    def segment(self, text: str, *, drop_first_if: str | None = None) -> list[str]:
        """Sentences of prose ``text``: paragraphs at line breaks, each segmented."""
        assert self.split is not None
        sentences: list[str] = []
        first = True
        for paragraph in text.splitlines():
            paragraph = paragraph.strip()
            if not paragraph:
                continue
            if first:
                first = False
                if drop_first_if is not None and paragraph == drop_first_if:
                    continue
            sentences.extend(self.split(paragraph))
        return sentences

    def skip_document(self, reason: str) -> None:
        self.stats._count(self.stats.skipped_documents, reason)
