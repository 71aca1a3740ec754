"""The ``csv`` and ``tsv`` formats: one document per row, the text in a column named by the header row.

Parsed with Python's ``csv`` module (RFC 4180 quoting: a field that holds the delimiter, a line break or a ``"``
is enclosed in ``"`` with inner quotes doubled, as spreadsheets, ``pandas.DataFrame.to_csv`` and BigQuery exports
write them) over the lines of ``ReadContext.lines``, so the file is streamed, decompressed, checked for binary
bytes and decoded as every other format's (bytes not valid in ``--encoding`` become U+FFFD, counted, with one
warning naming the file and line). ``tsv`` is the same with a tab as the delimiter (the ``excel-tab`` dialect).

* The first non-blank row is the header; the text column is the one named ``text_field`` (``--text-field``, also
  spelled ``--text-column``; names compared after stripping spaces). A header without it is an error naming the
  file and its columns.
* Every later row is one document: its text is prose, read as ``jsonl``'s text is (paragraphs at line breaks,
  each segmented); a quoted field keeps its line breaks, so they end paragraphs. ``line`` is the 1-based line the
  row starts on. Blank lines are passed over; a row whose text is empty is counted ``skipped_documents["empty"]``.
* Bad rows stop the run, naming the file and the line: a row with another number of fields than the header (an
  unquoted delimiter or line break in the text would otherwise shift or cut it), malformed quoting (``csv``'s
  ``strict`` mode: a closing quote not followed by a delimiter, a file that ends inside a quoted field), and a
  row of more than ``max_line_chars`` characters, which also bounds what an unclosed quote can read ahead.
* Not split across workers: a line break inside a quoted field looks like any other, so where a row starts can
  only be known by parsing the file from its first byte. Each file is read whole by one worker (the first byte
  range of it, ``readers.splittable``); many files spread over the workers as any other format's.

A TSV written without quoting (GLUE's, with raw ``"`` in the text) is not this format: a field that starts with a
``"`` reads as quoted there, and malformed quoting then stops the run with a message saying so.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator

from bertprep.pipeline.readers.base import InputError
from bertprep.pipeline.readers.context import ReadContext

#: The delimiter of each format.
DELIMITERS = {"csv": ",", "tsv": "\t"}


class _Rows:
    """The lines of a file fed to ``csv.reader`` one by one: records the line each row starts on and refuses a row
    longer than ``max_line_chars`` before the parser holds it."""

    def __init__(self, ctx: ReadContext):
        self.ctx = ctx
        self.first_line = 0  # the line the row being parsed started on
        self.line = 0  # the last line fed
        self.chars = 0  # characters of the row being parsed so far
        self.lines = ctx.lines()

    def start_row(self) -> None:
        self.first_line, self.chars = 0, 0

    def __iter__(self) -> Iterator[str]:
        for lineno, text in self.lines:
            self.line = lineno
            if not self.first_line:
                self.first_line = lineno
            self.chars += len(text) + 1
            if self.chars - 1 > self.ctx.max_line_chars:  # (the row's characters: its line breaks, not the last)
                raise InputError(
                    f"{self.ctx.path}:{self.ctx.line(self.first_line)}: a row longer than {self.ctx.max_line_chars:,} "
                    "characters (--max-line-chars); a quote that is never closed reads on to the end of the file: "
                    "check the quoting there, or raise --max-line-chars if such rows are real documents"
                )
            yield text + "\n"  # (csv needs the line end to keep line breaks inside quoted fields)


def _rows(ctx: ReadContext, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of each non-blank row of the file, ``line`` the 1-based line it starts on."""
    feed = _Rows(ctx)
    # (a process-wide setting: raised, never lowered, to let _Rows' limit on a row be the one that applies)
    csv.field_size_limit(max(csv.field_size_limit(), min(ctx.max_line_chars + 1, sys.maxsize)))
    reader = csv.reader(feed, delimiter=delimiter, quotechar='"', doublequote=True, strict=True)
    while True:
        feed.start_row()
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise InputError(
                f"{ctx.path}:{ctx.line(feed.line)}: not valid {'CSV' if delimiter == ',' else 'TSV'} ({err}); a "
                'field that starts with " must end with one, followed by the delimiter, with any " inside doubled '
                "(RFC 4180). A file whose fields are not quoted and hold raw quotes cannot be read as this format: "
                "convert it (e.g. to jsonl)"
            ) from None
        if len(fields) > 1 or (fields and fields[0].strip()):  # (a blank line is [], one of spaces ["  "])
            yield feed.first_line, fields


def _column(ctx: ReadContext, header: list[str], line: int, kind: str) -> int:
    """The index of the text column ``ctx.text_field`` in ``header``."""
    names = [name.strip() for name in header]
    if ctx.text_field.strip() not in names:
        shown = ", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
        raise InputError(
            f"{ctx.path}:{ctx.line(line)}: the {kind} header has no column {ctx.text_field!r} (its columns: {shown}); "
            "name the column that holds the document text with --text-column, and check that the file's first row "
            "is its header"
        )
    return names.index(ctx.text_field.strip())


def _read_delimited(ctx: ReadContext, fmt: str) -> Iterator[tuple[int, list[str]]]:
    kind = fmt.upper()
    rows = _rows(ctx, DELIMITERS[fmt])
    first = next(rows, None)
    if first is None:
        return
    header_line, header = first
    column = _column(ctx, header, header_line, kind)
    for line, fields in rows:
        if len(fields) != len(header):
            raise InputError(
                f"{ctx.path}:{ctx.line(line)}: a {kind} row of {len(fields)} fields, but the header (line "
                f"{ctx.line(header_line)}) has {len(header)}; a delimiter or line break in a field must be inside "
                'quotes ("...")'
            )
        text = fields[column]
        sentences = ctx.segment(text) if text else []
        if sentences:
            yield line, sentences
        else:
            ctx.skip_document("empty")


def read_csv(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    """Documents of a CSV file, one a row, the text in the header's column ``ctx.text_field`` (module docstring).

    Raises:
        InputError: no such column (the message lists the header's), a row with another number of fields than
            the header, malformed quoting, a row over ``max_line_chars`` characters (each naming the file and line).
    """
    return _read_delimited(ctx, "csv")


def read_tsv(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    """Documents of a TSV file (tab-delimited, quoted as CSV): see :func:`read_csv`."""
    return _read_delimited(ctx, "tsv")
