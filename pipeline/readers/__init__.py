"""Input readers for ``make-shards`` and ``build-vocab``: files -> documents -> sentences.

A *document* is what BERT's next-sentence pairs are drawn from (both segments of an IsNext pair come from
one document); a *sentence* is the unit pairs are cut at. Every reader streams its file: it reads binary
blocks of :data:`files.BLOCK_SIZE` bytes through Apache Beam's ``FileSystems`` (so ``gs://`` and the other Beam
file systems work; a local file is read as Beam's local file system reads it, without importing Beam:
:mod:`~bertprep.pipeline.readers.local_files`; ``.gz``/``.bz2``/``.xz``/``.zst`` files are decompressed by
extension, and one cut short is an error, never read as far as it goes) and never holds more than one line,
one JSON object, one ``<doc>`` block, one wiki ``<page>`` or one Parquet record batch at a time;
only the ``text`` format, where the whole file is one document, keeps the file's sentences.

Formats (``input_format``; :data:`INPUT_FORMATS`):

``bert``
    The original generator's input (google-research/bert ``create_pretraining_data.py``): one sentence
    per line, a blank line between documents. Read exactly as the reference does (its
    ``create_training_instances`` reading loop): the byte stream is split at ``\\n`` only, each line
    decoded and ``str.strip()``-ed; a line that is empty after ``strip()`` (also one of only
    non-breaking spaces) ends the document; every other line is one sentence, kept as the stripped string
    and not segmented. Empty documents (a second blank line in a row) are dropped, counted "empty".
    One difference: the reference continues the last document of a file into the next file when the
    file does not end with a blank line; here a document always ends at the end of its file.
``jsonl``
    One JSON object per line; the document is the string in ``text_field`` (default ``text``), prose:
    split into paragraphs at line breaks, each paragraph split into sentences by the segmenter.
``wikiextractor``
    WikiExtractor output: ``<doc id=.. url=.. title=..>`` ... ``</doc>`` blocks, one paragraph per line.
    The first line of a block repeats the title and is dropped (a header, not a text passage: BERT
    paper, section 3.1, "we extract only the text passages and ignore lists, tables, and headers").
``wikiextractor-json``
    WikiExtractor ``--json`` output: JSON lines with ``id``, ``url``, ``title``, ``text``; the text's first
    line (the title) is dropped as above.
``text``
    Prose, one document per file (books). A Project Gutenberg header (up to a line
    ``*** START OF THE/THIS PROJECT GUTENBERG EBOOK ... ***``, or the old ``*END*THE SMALL PRINT...``)
    is dropped when it occurs in the first :data:`text.GUTENBERG_HEADER_LINES` lines, and everything from
    ``*** END OF THE/THIS PROJECT GUTENBERG ...`` or ``End of (the) Project Gutenberg...`` on is dropped.
    Paragraphs are separated by blank lines; the hard-wrapped lines of a paragraph are joined with a
    space; each paragraph is segmented. CRLF line ends are handled (``\\r`` is stripped).
``wiki-xml``
    MediaWiki ``pages-articles*.xml[.bz2]`` dumps (also the multistream ones), parsed with
    ``xml.etree.ElementTree.iterparse`` on the stream, each ``<page>`` cleared once read. Articles
    (namespace 0) are kept; redirects (counted "redirect") and other namespaces (counted "namespace")
    are skipped. The wikitext is stripped with ``mwparserfromhell`` (:func:`wikitext_paragraphs`: lists,
    tables, headings, references, templates, files/images and categories dropped, as the BERT paper
    did); each remaining paragraph is segmented; document = article; ``line`` is 0.
``parquet``
    A Parquet file with a string column ``text_field``, read in record batches of
    :data:`parquet.PARQUET_BATCH_ROWS` rows with pyarrow through the ``FileSystems`` file object; the text is
    prose as for ``jsonl``; ``line`` is 0.
``hf``
    Hugging Face ``datasets`` on disk (``readers.hf``): the ``.arrow`` files of a ``save_to_disk`` directory
    or the ``.arrow`` / ``.parquet`` files of a downloaded Hub dataset, streamed record batch by record
    batch with pyarrow (the ``datasets`` package is not needed); string column ``text_field``, prose as for
    ``jsonl``; the metadata files (``dataset_info.json``, ``state.json``, ``dataset_dict.json``) are passed
    over; ``line`` is the row's 1-based number in its file, so ``(source, line - 1)`` is ``(file, row)``.
``csv`` / ``tsv``
    Comma- / tab-separated rows with a header row (``readers.delimited``): each row is one document, its text
    the column named ``text_field`` (``--text-field``, also spelled ``--text-column``), prose as for ``jsonl``;
    fields quoted as RFC 4180 (quoted line breaks are kept and end paragraphs); ``line`` is the line the row
    starts on. A file is read whole by one worker (a quoted line break hides where rows start).
``auto``
    :func:`detect_format` per file, logged at INFO.

Sentence segmentation (all formats but ``bert``): ``bertprep.pipeline.readers.segmentation``; the default is
``syntok`` (the module docstring there gives the measurement behind the choice).

Bad input. Errors raise :class:`InputError` (a ``ValueError``) naming the file (and line) and what to do:
a missing input, a glob that matches nothing, a binary file (a NUL byte in the first block, or more than
1% control bytes in any block: :func:`files._check_not_binary`), a compressed file that is truncated or corrupt
(:func:`files.open_input`: its data ends inside a compressed stream, or fails the format's checks), a file
that is not the declared format (``jsonl`` lines that are not JSON objects or lack ``text_field``,
``wikiextractor`` without ``<doc``, XML that is not a MediaWiki dump or is cut off, a Parquet file
without the ``text_field`` string column, a CSV/TSV header without the ``text_field`` column or a row that does
not fit its header). Other problems are counted in :class:`ReaderStats` and logged, and
reading goes on: bytes that are not valid in ``encoding`` are replaced with U+FFFD (the BERT tokenizer
deletes U+FFFD, so for the ``bert`` format this gives the same tokens as the reference's decoding with
``errors="ignore"``) and counted in ``undecodable_lines``, with one warning per file naming its first
such line and suggesting ``--encoding latin-1``; a line longer than ``max_line_chars`` characters is
skipped (``skipped_lines["over_long_line"]``) after reading at most ``4 * max_line_chars`` bytes of it
(the UTF-8 worst case), never the whole line; empty documents are skipped (``skipped_documents["empty"]``);
one-sentence documents are kept (the reference keeps them: all their pairs are NotNext) and counted.

The package, one module per job: ``base`` (the format names, :class:`Document`, :class:`ReaderStats`,
:class:`InputError`), ``files`` (finding, opening and decompressing files, the binary check, lines),
``detect`` (``auto``), ``context`` (what a format reader is given), one module per format family (``text``:
bert, jsonl, wikiextractor and its JSON, text; ``wiki``: wiki-xml; ``parquet``; ``hf``; ``delimited``: csv,
tsv), and this module: the
format registry and the entry points :func:`read_documents`, :func:`iter_corpus_texts` and
:func:`check_options`. Everything public is importable from ``bertprep.pipeline.readers``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.readers.base import DEFAULT_MAX_LINE_CHARS, INPUT_FORMATS, Document, InputError, ReaderStats
from bertprep.pipeline.readers.context import FormatReader, ReadContext
from bertprep.pipeline.readers.delimited import read_csv, read_tsv
from bertprep.pipeline.readers.detect import detect_format, looks_like_sentence_per_line, warn_if_structured
from bertprep.pipeline.readers.files import (
    _check_encoding,
    _compression_of,
    expand_inputs,
    input_keys,
    input_root,
    open_input,
)
from bertprep.pipeline.readers.hf import is_hf_metadata, read_hf
from bertprep.pipeline.readers.parquet import read_parquet
from bertprep.pipeline.readers.segmentation import DEFAULT_SEGMENTER, SEGMENTERS, get_segmenter
from bertprep.pipeline.readers.text import (
    LINE_SYNC,
    read_bert,
    read_jsonl,
    read_text,
    read_wikiextractor,
    read_wikiextractor_json,
)
from bertprep.pipeline.readers.wiki import read_wiki_xml, wikitext_paragraphs

__all__ = [
    "DEFAULT_MAX_LINE_CHARS",
    "INPUT_FORMATS",
    "Document",
    "InputError",
    "ReaderStats",
    "check_options",
    "detect_format",
    "expand_inputs",
    "input_keys",
    "input_root",
    "iter_corpus_texts",
    "looks_like_sentence_per_line",
    "open_input",
    "read_documents",
    "splittable",
    "wikitext_paragraphs",
]

logger = logging.getLogger(__name__)

#: The reader of each format (``auto`` is resolved by :func:`detect_format` first).
_READERS: dict[str, FormatReader] = {
    "bert": read_bert,
    "jsonl": read_jsonl,
    "text": read_text,
    "wikiextractor": read_wikiextractor,
    "wikiextractor-json": read_wikiextractor_json,
    "wiki-xml": read_wiki_xml,
    "parquet": read_parquet,
    "hf": read_hf,
    "csv": read_csv,
    "tsv": read_tsv,
}
assert set(_READERS) == set(INPUT_FORMATS) - {"auto"}, "every input format has a reader"


def check_options(
    input_format: str = ReadOptions.input_format,
    *,
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = ReadOptions.encoding,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> None:
    """Validate reader options before a pipeline starts (the segmenter's package included); raise
    :class:`InputError` naming the bad option."""
    if input_format not in INPUT_FORMATS:
        raise InputError(
            f"unknown input format {input_format!r} (--input-format); choose one of: {', '.join(INPUT_FORMATS)}"
        )
    if segmenter not in SEGMENTERS:
        raise InputError(f"unknown segmenter {segmenter!r} (--segmenter); choose one of: {', '.join(SEGMENTERS)}")
    try:  # its package: checked here, not by every worker (a 639-line traceback without blingfire)
        get_segmenter(segmenter)
    except ImportError as err:
        package = getattr(err.__cause__, "name", None) or segmenter
        raise InputError(
            f"segmenter {segmenter!r} (--segmenter) needs the package {package!r}, which is not installed: pip "
            f"install 'bertprep[fast]' (or pip install {package}), or leave --segmenter out for {DEFAULT_SEGMENTER}"
        ) from None
    _check_encoding(encoding)
    if not isinstance(max_line_chars, int) or max_line_chars < 1:
        raise InputError(f"max_line_chars (--max-line-chars) must be a positive integer, got {max_line_chars!r}")


def read_documents(
    path: str,
    input_format: str = ReadOptions.input_format,
    *,
    text_field: str = ReadOptions.text_field,
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = ReadOptions.encoding,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    stats: ReaderStats | None = None,
    byte_range: tuple[int, int, int | None] | None = None,
    line_numbers: bool = True,
) -> Iterator[Document]:
    """Stream the documents of one input file, or of one byte range of it (see the module docstring for
    formats, and :mod:`~bertprep.pipeline.readers.ranges` for ranges).

    Args:
        path: a file path or URL that Beam's ``FileSystems`` can open (``.gz``/``.bz2`` decompressed).
        input_format: one of :data:`INPUT_FORMATS`; ``auto`` runs :func:`detect_format` (logged at INFO).
        text_field: the JSON field holding the document text (``jsonl`` and ``wikiextractor-json``).
        segmenter: sentence segmenter for prose formats, one of ``segmentation.SEGMENTERS``.
        encoding: text encoding (ASCII-compatible; UTF-16/32 are refused). Undecodable bytes -> U+FFFD.
        max_line_chars: longest line read, in characters; longer lines are skipped and counted.
        stats: counters to add to (files, formats, documents, sentences, bytes, skips); optional.
        byte_range: ``(range_index, start, end)`` of ``ranges.plan_ranges`` (``end`` None: to the file's end);
            None: the whole file. The documents of all ranges of a file, in range order, are the file's
            documents, and their counters sum to the whole file's.
        line_numbers: False: a range that starts after byte 0 gives its documents ``line`` 0 instead of
            counting the file's lines before it (messages still name the right line).

    Returns:
        An iterator of :class:`Document` with ``ordinal`` 0, 1, 2... in file order; for a byte range, in
        the range's order: its document ``k`` is the file's document ``k + n`` where ``n`` is the number of
        documents the ranges before it yield (``ranges.read_ranges``). The options are validated when
        this is called; the file is opened on the first ``next()``.

    Raises:
        InputError: a bad option (names it), or bad input (names the file and line and what to do).
    """
    check_options(input_format, segmenter=segmenter, encoding=encoding, max_line_chars=max_line_chars)
    return _read_documents(
        path,
        input_format,
        text_field,
        segmenter,
        encoding,
        max_line_chars,
        stats if stats is not None else ReaderStats(),
        byte_range,
        line_numbers,
    )


def splittable(path: str, fmt: str) -> bool:
    """Whether a file of format ``fmt`` can be read in byte ranges: an uncompressed file of a line-based
    format (cut at blank lines, line ends or ``</doc>``: ``text.LINE_SYNC``) or Parquet (row groups), and a
    bz2 wiki dump (cut at the compressed streams that ``ranges.plan_ranges`` found in its index). The
    ``text`` format is one document per file; ``csv`` and ``tsv`` have no safe place to start a range (a line
    break inside quotes looks like a row's end); other compressed files cannot be read from a middle."""
    compression = _compression_of(path)
    if fmt == "wiki-xml":
        return compression == "bzip2"
    return compression is None and (fmt in LINE_SYNC or fmt == "parquet")


def _read_documents(
    path: str,
    input_format: str,
    text_field: str,
    segmenter: str,
    encoding: str,
    max_line_chars: int,
    stats: ReaderStats,
    byte_range: tuple[int, int, int | None] | None = None,
    line_numbers: bool = True,
) -> Iterator[Document]:
    index, start, end = byte_range if byte_range is not None else (0, 0, None)
    first = index == 0  # the file's counters (files, formats) and its messages come from its first range
    if input_format == "auto":
        fmt = detect_format(path, encoding=encoding, max_line_chars=max_line_chars)
        if first:
            logger.info("%s: input format %s (detected)", path, fmt)
    else:
        fmt = input_format
        if first:
            logger.info("%s: input format %s", path, fmt)
    if (start or end is not None) and not splittable(path, fmt):
        if not first:
            return  # the first range reads the whole file
        start, end = 0, None
    if first and not (fmt == "hf" and is_hf_metadata(path)):  # (a dataset's dataset_info.json: no documents)
        stats.files += 1
        stats._count(stats.formats, fmt)
    ctx = ReadContext(
        path,
        text_field,
        None if fmt == "bert" else get_segmenter(segmenter),
        encoding,
        max_line_chars,
        stats,
        start=start,
        end=end,
        sync=LINE_SYNC.get(fmt),
    )
    if input_format in ("bert", "text") and first:
        warn_if_structured(ctx, input_format)
    for ordinal, (line, sentences) in enumerate(_READERS[fmt](ctx)):
        stats.documents += 1
        stats.sentences += len(sentences)
        if len(sentences) == 1:
            stats.one_sentence_documents += 1
        if line and start:
            line = ctx.line(line) if line_numbers else 0
        yield Document(source=path, ordinal=ordinal, line=line, sentences=sentences)


def iter_corpus_texts(
    patterns: str | Sequence[str], input_format: str = ReadOptions.input_format, **kw: Any
) -> Iterator[str]:
    """Every sentence of every document of the inputs, in reading order (for ``build-vocab``).

    ``patterns`` as for :func:`expand_inputs`; ``kw`` are :func:`read_documents`' keyword options
    (``text_field``, ``segmenter``, ``encoding``, ``max_line_chars``, ``stats``).

    Raises:
        InputError: as :func:`expand_inputs` and :func:`read_documents`, and when the inputs hold no
            sentence at all.
    """
    stats = kw.pop("stats", None)
    stats = stats if stats is not None else ReaderStats()
    check_options(input_format, **{k: v for k, v in kw.items() if k != "text_field"})
    files = expand_inputs(patterns)
    found = False
    for path in files:
        for document in read_documents(path, input_format, stats=stats, **kw):
            found = True
            yield from document.sentences
    if not found:
        raise InputError(
            f"no text found in the {len(files)} input file(s) "
            f"({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}); "
            "check the files and --input-format"
        )
