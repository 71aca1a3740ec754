"""What a format reader is given: the file being read, the options, the counters, and its lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bertprep.pipeline.readers.base import ReaderStats
from bertprep.pipeline.readers.files import _iter_lines, lines_before
from bertprep.pipeline.readers.segmentation import Segmenter

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
    start: int = 0
    """A byte range of the file (``readers.ranges``): its first byte, 0 for the whole file."""
    end: int | None = None
    """The byte the range ends at (the line or document that spans it is the range's), None: the file's end."""
    sync: Callable[[str], bool] | None = None
    """The lines a range of a line-based format may start after (``files._iter_lines``); None: any line."""
    _line_base: int | None = None

    def lines(self, strip_bom: bool = True) -> Iterator[tuple[int, str]]:
        return _iter_lines(
            self.path,
            encoding=self.encoding,
            max_line_chars=self.max_line_chars,
            stats=self.stats,
            strip_bom=strip_bom,
            start=self.start,
            end=self.end,
            sync=self.sync,
            line_base=self.line_base,
        )

    @property
    def mid_file(self) -> bool:
        """Whether this is a range that starts after the file's first byte (its reader starts after a sync line)."""
        return self.start > 0

    def line_base(self) -> int:
        """The lines of the file before the first line :meth:`lines` numbers 1: 0 for the whole file; for a
        range, counted (once, by reading the file up to the range) only when asked for."""
        if self._line_base is None:
            self._line_base = lines_before(self.path, self.start - 1) + 1 if self.start > 0 else 0
        return self._line_base

    def line(self, lineno: int) -> int:
        """The line number in the file of line ``lineno`` of :meth:`lines` (for messages and documents)."""
        return lineno + self.line_base() if self.start > 0 else lineno

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
