"""Input readers for ``make-shards`` and ``build-vocab``: files -> documents -> sentences.

A *document* is what BERT's next-sentence pairs are drawn from (both segments of an IsNext pair come from
one document); a *sentence* is the unit pairs are cut at. Every reader streams its file: it reads binary
blocks of :data:`BLOCK_SIZE` bytes through Apache Beam's ``FileSystems`` (so ``gs://`` and the other Beam
file systems work; ``.gz``/``.bz2``/``.xz``/``.zst`` files are decompressed by extension, and one cut short
is an error, never read as far as it goes) and never holds more than
one line, one JSON object, one ``<doc>`` block, one wiki ``<page>`` or one Parquet record batch at a time;
only the ``text`` format, where the whole file is one document, keeps the file's sentences.

Formats (``input_format``; :data:`INPUT_FORMATS`):

``bert``
    The original generator's input (google-research/bert ``create_pretraining_data.py``): one sentence
    per line, a blank line between documents. Read exactly as the reference does (see
    design/reference-algorithm.md "Precise details"): the byte stream is split at ``\\n`` only, each line
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
    is dropped when it occurs in the first :data:`GUTENBERG_HEADER_LINES` lines, and everything from
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
    :data:`PARQUET_BATCH_ROWS` rows with pyarrow through the ``FileSystems`` file object; the text is
    prose as for ``jsonl``; ``line`` is 0.
``auto``
    :func:`detect_format` per file, logged at INFO.

Sentence segmentation (all formats but ``bert``): ``bertprep.pipeline.segmentation``; the default is
``syntok`` (the module docstring there gives the measurement behind the choice).

Bad input. Errors raise :class:`InputError` (a ``ValueError``) naming the file (and line) and what to do:
a missing input, a glob that matches nothing, a binary file (a NUL byte in the first block, or more than
1% control bytes in any block: :func:`_check_not_binary`), a compressed file that is truncated or corrupt
(:func:`open_input`: its data ends inside a compressed stream, or fails the format's checks), a file
that is not the declared format (``jsonl`` lines that are not JSON objects or lack ``text_field``,
``wikiextractor`` without ``<doc``, XML that is not a MediaWiki dump or is cut off, a Parquet file
without the ``text_field`` string column). Other problems are counted in :class:`ReaderStats` and logged, and
reading goes on: bytes that are not valid in ``encoding`` are replaced with U+FFFD (the BERT tokenizer
deletes U+FFFD, so for the ``bert`` format this gives the same tokens as the reference's decoding with
``errors="ignore"``) and counted in ``undecodable_lines``, with one warning per file naming its first
such line and suggesting ``--encoding latin-1``; a line longer than ``max_line_chars`` characters is
skipped (``skipped_lines["over_long_line"]``) after reading at most ``4 * max_line_chars`` bytes of it
(the UTF-8 worst case), never the whole line; empty documents are skipped (``skipped_documents["empty"]``);
one-sentence documents are kept (the reference keeps them: all their pairs are NotNext) and counted.
"""

from __future__ import annotations

import codecs
import dataclasses
import html
import json
import logging
import lzma
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bertprep.pipeline.segmentation import DEFAULT_SEGMENTER, SEGMENTERS, Segmenter, get_segmenter

logger = logging.getLogger(__name__)

#: Accepted values of ``input_format`` (``--input-format``).
INPUT_FORMATS = ("auto", "bert", "jsonl", "text", "wikiextractor", "wikiextractor-json", "wiki-xml", "parquet")

#: Default limit on the characters of one line (``--max-line-chars``). One JSON line holds a whole
#: document; the longest English Wikipedia articles have a few hundred thousand characters of text (the
#: longest line of the shared WikiExtractor JSON sample: 36 K), so 1 M keeps real documents while a corrupt
#: file without newlines cannot exhaust memory (at most 4 MB of a line is buffered).
DEFAULT_MAX_LINE_CHARS = 1_000_000

#: Bytes read from the file system per call.
BLOCK_SIZE = 1 << 20

#: Bytes at the start of a file that :func:`detect_format` inspects.
DETECT_BYTES = 64 * 1024

#: A Project Gutenberg ``*** START OF ...`` marker further into a file than this is not looked for.
GUTENBERG_HEADER_LINES = 1000

_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".deflate", ".zst", ".zstd", ".lzma", ".xz")
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_GUTENBERG_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|^\*END\*\s*THE SMALL PRINT", re.I)
_GUTENBERG_END = re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|^End of (the )?Project Gutenberg", re.I)
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")
_TITLE_ATTR = re.compile(r'\btitle="([^"]*)"')
_MEDIAWIKI_ROOT = re.compile(r"^(<\?xml[^>]*\?>\s*)?(<!--.*?-->\s*)*<mediawiki[\s>]", re.S)


class InputError(ValueError):
    """Bad input; the message names the file (and line) and says what to do."""


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
        return cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if k in names})

    def _count(self, counter: dict[str, int], reason: str, n: int = 1) -> None:
        counter[reason] = counter.get(reason, 0) + n


# --------------------------------------------------------------------------------------------------
# Finding the input files


def _filesystems():
    from apache_beam.io.filesystems import FileSystems  # Beam is slow to import; import on first use

    return FileSystems


def _has_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _match(pattern: str) -> list[tuple[str, int]]:
    try:
        result = _filesystems().match([pattern])[0]
    except Exception as err:  # BeamIOError, or ValueError for a scheme whose extra is not installed
        raise InputError(f"cannot list input {pattern!r}: {err}") from err
    return sorted((m.path, m.size_in_bytes) for m in result.metadata_list)


def _is_remote(path: str) -> bool:
    return "://" in path


def _expand_directory(directory: str) -> list[tuple[str, int]]:
    base = directory.rstrip("/")
    pattern = base + "/**" if _is_remote(base) else os.path.join(base, "**")
    kept = []
    for path, size in _match(pattern):
        relative = path[len(base) :].lstrip("/" + os.sep)
        parts = re.split(r"[/\\]", relative)
        name = parts[-1]
        if any(part.startswith(".") for part in parts) or name.lower().startswith("readme"):
            logger.info("skipping %s (hidden files and README* are not read from a directory)", path)
            continue
        kept.append((path, size))
    return kept


def _expand_pattern(pattern: str) -> list[tuple[str, int]]:
    if _has_glob(pattern):
        matches = _match(pattern)
        if not matches:
            raise InputError(f"input pattern {pattern!r} matches no file; check the path and the glob")
        return matches
    if pattern.endswith("/") or (not _is_remote(pattern) and os.path.isdir(pattern)):
        matches = _expand_directory(pattern)
        if not matches:
            raise InputError(f"input directory {pattern!r} holds no readable file (hidden files and README* are skipped)")
        return matches
    matches = _match(pattern)
    if matches:
        return matches
    if _is_remote(pattern):  # object stores have no directories: try the path as a prefix
        matches = _expand_directory(pattern)
        if matches:
            return matches
    raise InputError(f"input file {pattern!r} not found; check the path (globs and directories are accepted)")


def expand_inputs(patterns: str | Sequence[str]) -> list[str]:
    """Expand input patterns into the list of files to read, in reading order.

    ``patterns`` is one comma-separated string or a sequence of them (like the reference's
    ``--input_file``; a comma therefore cannot be part of a path). Each pattern is globbed through Beam's
    ``FileSystems.match`` (``*``, ``?``, ``[...]``; ``**`` crosses directories); the matches of each
    pattern are sorted, patterns are taken in the order given, and a file matched twice is kept at its
    first place. A directory stands for all regular files under it, recursively, sorted, **skipping
    hidden files (any path part starting with ".") and files named README***.

    Raises:
        InputError: no pattern given; a pattern that matches nothing (the message names it); a file that
            does not exist; every matched file is empty (0 bytes).
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    flat = [p.strip() for item in patterns for p in str(item).split(",") if p.strip()]
    if not flat:
        raise InputError("no input files given; pass one or more paths or globs (comma-separated)")
    seen: set[str] = set()
    files: list[str] = []
    sizes: list[int] = []
    for pattern in flat:
        for path, size in _expand_pattern(pattern):
            if path not in seen:
                seen.add(path)
                files.append(path)
                sizes.append(size)
    if all(size == 0 for size in sizes):
        shown = ", ".join(files[:5]) + (", ..." if len(files) > 5 else "")
        raise InputError(f"all {len(files)} input files are empty (0 bytes): {shown}")
    return files


# --------------------------------------------------------------------------------------------------
# Reading lines


def _check_encoding(encoding: str) -> str:
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise InputError(f"unknown encoding {encoding!r} (--encoding); use e.g. utf-8 or latin-1") from None
    if name.startswith(("utf-16", "utf-32")):
        raise InputError(
            f"encoding {encoding!r} (--encoding) is not supported: lines are split at the byte 0x0A, which needs "
            "an ASCII-compatible encoding; convert the files to UTF-8 first (iconv -f UTF-16 -t UTF-8)"
        )
    return name


def check_options(
    input_format: str = "auto",
    *,
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = "utf-8",
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> None:
    """Validate reader options before a pipeline starts; raise :class:`InputError` naming the bad option."""
    if input_format not in INPUT_FORMATS:
        raise InputError(f"unknown input format {input_format!r} (--input-format); choose one of: {', '.join(INPUT_FORMATS)}")
    if segmenter not in SEGMENTERS:
        raise InputError(f"unknown segmenter {segmenter!r} (--segmenter); choose one of: {', '.join(SEGMENTERS)}")
    _check_encoding(encoding)
    if not isinstance(max_line_chars, int) or max_line_chars < 1:
        raise InputError(f"max_line_chars (--max-line-chars) must be a positive integer, got {max_line_chars!r}")


def _open(path: str, compression_type: str = "auto"):
    from apache_beam.io.filesystem import CompressionTypes

    try:
        return _filesystems().open(path, compression_type=getattr(CompressionTypes, compression_type.upper()))
    except FileNotFoundError:
        raise InputError(f"input file {path!r} not found; check the path") from None
    except OSError as err:
        raise InputError(f"cannot open input file {path!r}: {err}") from err


#: Compression by file-name suffix (the suffixes Beam's ``CompressionTypes`` detects) -> (name, test command).
_COMPRESSIONS = {".gz": ("gzip", "gzip -t"), ".bz2": ("bzip2", "bzip2 -t"), ".deflate": ("deflate", None),
                 ".zst": ("zstd", "zstd -t"), ".zstd": ("zstd", "zstd -t"), ".xz": ("xz", "xz -t"),
                 ".lzma": ("lzma", "xz -t")}

#: Compressed bytes read from the file system per call when decompressing.
_RAW_READ_SIZE = 256 * 1024


def _compression_of(path: str) -> str | None:
    """``gzip``, ``bzip2``, ``deflate``, ``zstd``, ``xz``/``lzma`` from the file name's suffix, else None."""
    lower = path.lower()
    for suffix, (name, _) in _COMPRESSIONS.items():
        if lower.endswith(suffix):
            return name
    return None


def _new_decompressor(compression: str):
    import bz2

    if compression == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if compression == "deflate":
        return zlib.decompressobj()
    if compression == "bzip2":
        return bz2.BZ2Decompressor()
    if compression in ("xz", "lzma"):
        return lzma.LZMADecompressor()
    from apache_beam.io import filesystem as beam_filesystem  # zstandard as Beam has it (a dependency of Beam's)

    return beam_filesystem.zstandard.ZstdDecompressor().decompressobj()


class _DecompressedFile:
    """A read-only binary file of a compressed file's decompressed bytes that knows where the data ends.

    Beam's ``CompressedFile`` (what ``FileSystems.open`` returns for a ``.gz``/``.bz2``... name) stops
    silently where the compressed bytes stop, so a file cut short (an interrupted download or copy) reads
    as a shorter valid file. Here the raw bytes are read through ``FileSystems`` without decompression and
    decompressed with the standard library (``zlib``, ``bz2``, ``lzma``; ``zstandard``); concatenated
    streams (``cat a.gz b.gz``, multistream bzip2) are read one after the other, as ``gzip -d`` does; and
    when the raw bytes end inside a stream (the decompressor has not reached its end-of-stream marker, for
    gzip also the CRC-32 and length trailer) :meth:`read` raises :class:`InputError` naming the file.
    Corrupt data (a bad header, block or checksum) raises :class:`InputError` too.

    ``read(n)`` returns exactly ``n`` bytes except at the end of the data, like a regular file.
    """

    def __init__(self, path: str, compression: str):
        self.path = path
        self.compression = compression
        self._raw = _open(path, "uncompressed")
        self._decompressor = _new_decompressor(compression)
        self._fed = False  # the current stream has received compressed bytes
        self._buffer = bytearray()
        self._raw_eof = False
        self._decompressed = 0

    def _fail(self, detail: str) -> InputError:
        test = dict(_COMPRESSIONS.values()).get(self.compression)
        check = f" ({test} {os.path.basename(self.path)})" if test else ""
        return InputError(
            f"{self.path} is truncated or corrupt ({self.compression}: {detail}, after {self._decompressed:,} "
            f"decompressed bytes); re-download it, or decompress it to check{check}"
        )

    def _decompress(self, data: bytes) -> None:
        while data:
            if self._decompressor.eof:  # a stream ended and more data follows: a concatenated stream
                self._decompressor = _new_decompressor(self.compression)
                self._fed = False
            self._fed = True
            try:
                out = self._decompressor.decompress(data)
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as err:
                raise self._fail(str(err) or type(err).__name__) from None
            except Exception as err:  # zstandard.ZstdError
                if type(err).__module__.startswith("zstandard"):
                    raise self._fail(str(err)) from None
                raise
            self._buffer += out
            self._decompressed += len(out)
            data = self._decompressor.unused_data if self._decompressor.eof else b""

    def read(self, size: int = -1) -> bytes:
        while not self._raw_eof and (size < 0 or len(self._buffer) < size):
            try:
                chunk = self._raw.read(_RAW_READ_SIZE)
            except OSError as err:
                raise InputError(f"{self.path}: cannot read the file ({err})") from err
            if not chunk:
                self._raw_eof = True
                if self._fed and not self._decompressor.eof:
                    raise self._fail("the data ends before the end of the compressed stream")
                break
            self._decompress(chunk)
        if size < 0 or size >= len(self._buffer):
            out = bytes(self._buffer)
            self._buffer.clear()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        return out

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> "_DecompressedFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(path: str):
    """Open an input file for reading its (decompressed) bytes, through Beam's ``FileSystems``.

    A name ending in a compression suffix (``.gz .bz2 .deflate .zst .zstd .xz .lzma``, Beam's own list)
    gives a :class:`_DecompressedFile`, whose ``read`` raises :class:`InputError` when the file is
    truncated or corrupt; any other name gives the file system's own file object.

    Raises:
        InputError: the file does not exist or cannot be opened.
    """
    compression = _compression_of(path)
    if compression is None:
        return _open(path, "uncompressed")
    return _DecompressedFile(path, compression)


def _read_blocks(path: str, block_size: int | None = None, check_binary: bool = True) -> Iterator[bytes]:
    """The (decompressed) bytes of ``path`` in blocks; a block that looks binary is an error
    (:func:`_check_not_binary`), as is a compressed file that is truncated or corrupt."""
    block_size = block_size or BLOCK_SIZE
    offset = 0
    with open_input(path) as fh:
        while True:
            try:
                block = fh.read(block_size)
            except OSError as err:
                raise InputError(f"{path}: cannot read the file ({err})") from err
            if not block:
                return
            if check_binary:
                _check_not_binary(path, block, offset)
            offset += len(block)
            yield block


#: C0 control bytes that real text does not contain (tab, LF, VT, FF, CR, Ctrl-Z and ESC are allowed) and DEL.
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 26, 27)) + b"\x7f"
_NOT_CONTROL_BYTES = bytes(b for b in range(256) if b not in _CONTROL_BYTES)

#: A block with more control bytes than this share (and at least :data:`BINARY_MIN_CONTROL_BYTES`) is
#: binary. Measured: the shared text corpora (English books and Wikipedia, Latin-1 Gutenberg, Korean and
#: Chinese prose, GLUE, SQuAD) have 0 to 1 such byte per MB; uniformly random bytes have 9.7%.
BINARY_CONTROL_SHARE = 0.01
BINARY_MIN_CONTROL_BYTES = 4


def _check_not_binary(path: str, block: bytes, offset: int = 0) -> None:
    """Raise :class:`InputError` when ``block`` (the bytes of ``path`` from ``offset`` on) is not text.

    Binary means a NUL byte in the file's first block (``offset`` 0: UTF-16 text, images, archives), or,
    in any block, more than :data:`BINARY_CONTROL_SHARE` of control bytes (C0 controls other than
    whitespace, Ctrl-Z and ESC, and DEL), which text in any ASCII-compatible encoding (UTF-8, Latin-1,
    CJK) does not have but random or compressed bytes do.
    """
    if offset == 0:
        nul = block.find(b"\x00")
        if nul >= 0:
            raise InputError(
                f"{path}: looks like a binary file (NUL byte at offset {nul}); inputs must be text in an "
                "ASCII-compatible encoding (UTF-8, Latin-1, ...). Remove it from the inputs, or convert UTF-16 "
                "text to UTF-8 (iconv -f UTF-16 -t UTF-8)"
            )
    controls = len(block.translate(None, _NOT_CONTROL_BYTES))
    if controls >= BINARY_MIN_CONTROL_BYTES and controls > BINARY_CONTROL_SHARE * len(block):
        raise InputError(
            f"{path}: looks like a binary file ({controls:,} control bytes, {controls / len(block):.1%} of bytes "
            f"{offset:,}-{offset + len(block) - 1:,}; text has almost none); inputs must be text in an "
            "ASCII-compatible encoding (UTF-8, Latin-1, ...). Remove it from the inputs"
        )


def _iter_lines(
    path: str, *, encoding: str, max_line_chars: int, stats: ReaderStats, strip_bom: bool
) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of ``path``, split at ``\\n`` only (1-based numbers).

    The text keeps its ``\\r`` (if any); an over-long line is skipped and counted without being loaded
    beyond ``4 * max_line_chars`` bytes; undecodable bytes become U+FFFD and the line is counted.
    """
    max_bytes = 4 * max_line_chars
    warned_decode = warned_long = False
    lineno = 0
    carry: list[bytes] = []  # pieces of the current unfinished line
    carry_len = 0
    skipping = False  # inside an over-long line: drop bytes until the next \n
    empty = True

    def over_long(n: int) -> None:
        nonlocal warned_long
        stats._count(stats.skipped_lines, "over_long_line")
        if not warned_long:
            warned_long = True
            logger.warning(
                "%s:%d: line longer than %d characters skipped (counted in skipped_lines['over_long_line']); "
                "raise --max-line-chars if such lines are real documents", path, n, max_line_chars,
            )

    def decode(raw: bytes, n: int) -> str | None:
        nonlocal warned_decode
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError:
            text = raw.decode(encoding, "replace")
            stats.undecodable_lines += 1
            if not warned_decode:
                warned_decode = True
                logger.warning(
                    "%s:%d: bytes that are not valid %s were replaced with U+FFFD (counted in undecodable_lines); "
                    "if the file is Latin-1, pass --encoding latin-1", path, n, encoding,
                )
        if len(text) > max_line_chars:
            over_long(n)
            return None
        if n == 1 and strip_bom and text.startswith("\ufeff"):
            text = text[1:]
        return text

    for block in _read_blocks(path):
        empty = False
        stats.bytes += len(block)
        pieces = block.split(b"\n")
        for piece in pieces[:-1]:  # each of these ends a line
            lineno += 1
            if skipping:
                skipping = False
                over_long(lineno)
                continue
            if carry:
                carry.append(piece)
                raw = b"".join(carry)
                carry, carry_len = [], 0
            else:
                raw = piece
            if len(raw) > max_bytes:
                over_long(lineno)
                continue
            text = decode(raw, lineno)
            if text is not None:
                yield lineno, text
        tail = pieces[-1]
        if tail and not skipping:
            if carry_len + len(tail) > max_bytes:
                skipping = True
                carry, carry_len = [], 0
            else:
                carry.append(tail)
                carry_len += len(tail)
    if empty:
        stats.empty_files += 1
        logger.info("%s: empty file", path)
        return
    if skipping:
        over_long(lineno + 1)
    elif carry:
        lineno += 1
        text = decode(b"".join(carry), lineno)
        if text is not None:
            yield lineno, text


# --------------------------------------------------------------------------------------------------
# Format detection


def _strip_compression(path: str) -> str:
    lower = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            return lower[: -len(suffix)]
    return lower


def _read_head(path: str, n_bytes: int, check_binary: bool = True) -> bytes:
    head = bytearray()
    for block in _read_blocks(path, block_size=min(BLOCK_SIZE, n_bytes), check_binary=check_binary):
        head += block
        if len(head) >= n_bytes:
            break
    return bytes(head[:n_bytes])


def _first_json_object(path: str, encoding: str, max_line_chars: int) -> dict | None:
    """The first non-blank line of ``path`` parsed as JSON, or None when it is not a JSON object."""
    stats = ReaderStats()
    for _, line in _iter_lines(path, encoding=encoding, max_line_chars=max_line_chars, stats=stats, strip_bom=True):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None
    return None


def looks_like_sentence_per_line(lines: Sequence[str]) -> bool:
    """Whether text lines look like the BERT format (one sentence per line) rather than wrapped prose.

    Measured on the shared data: in one-sentence-per-line files (``samples/sample_text.txt``,
    ``golden/*.txt``) 79-100% of the non-blank lines end with sentence-final punctuation (``.!?…``
    optionally followed by closing quotes or brackets) and almost no line starts in lower case, while in
    Project Gutenberg books (prose and verse) 9-30% do and 80-92% of the prose lines that follow another
    line start in lower case (hard wrapping). Rule: at least 60% sentence-final ends, at most 30%
    lower-case continuations, and not hard-wrapped (20+ lines, none over 100 characters, 60% or more
    within 12 characters of the 90th percentile width).
    """
    lines = [line.rstrip() for line in lines]
    nonblank = [line for line in lines if line.strip()]
    if not nonblank:
        return False
    final = sum(bool(_SENTENCE_END.search(line)) for line in nonblank) / len(nonblank)
    pairs = [(a, b) for a, b in zip(lines, lines[1:]) if a.strip() and b.strip()]
    lower_next = sum(b.strip()[0].islower() for _, b in pairs) / len(pairs) if pairs else 0.0
    lengths = sorted(len(line) for line in nonblank)
    p90 = lengths[int(0.9 * (len(lengths) - 1))]
    near_width = sum(n >= p90 - 12 for n in lengths) / len(lengths)
    hard_wrapped = len(lengths) >= 20 and lengths[-1] <= 100 and near_width >= 0.6
    return final >= 0.6 and lower_next <= 0.3 and not hard_wrapped


def detect_format(path: str, *, encoding: str = "utf-8", max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> str:
    """Guess the input format of ``path`` from its extension and its first :data:`DETECT_BYTES` bytes.

    Rules, in order: a ``.parquet`` name or the Parquet magic ``PAR1`` -> ``parquet``; a root element
    ``<mediawiki`` (after an optional XML declaration) -> ``wiki-xml``; a ``.jsonl``/``.json``/``.ndjson``
    name (before a compression suffix) or a first non-blank character ``{`` -> ``wikiextractor-json`` when
    the first object has ``title``, ``url`` and ``text``, else ``jsonl``; content starting with ``<doc ``
    -> ``wikiextractor``; other text -> ``bert`` when :func:`looks_like_sentence_per_line` holds for its
    lines, else ``text``. An empty file gives ``text``.

    Raises:
        InputError: the file is missing, unreadable, or binary (a NUL byte near its start), or an
            ``.xml`` file that is not a MediaWiki dump.
    """
    name = _strip_compression(path)
    if name.endswith(".parquet"):
        return "parquet"
    head = _read_head(path, DETECT_BYTES, check_binary=False)
    if head.startswith(b"PAR1"):
        return "parquet"
    _check_not_binary(path, head)
    text = head.decode(encoding, "replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if _MEDIAWIKI_ROOT.match(stripped):
        return "wiki-xml"
    if name.endswith(".xml") or stripped.startswith("<?xml"):
        raise InputError(
            f"{path}: an XML file that is not a MediaWiki dump (no <mediawiki> root element); bertprep reads "
            "pages-articles*.xml[.bz2] dumps (--input-format wiki-xml)"
        )
    if name.endswith(_JSON_SUFFIXES) or stripped.startswith("{"):
        obj = _first_json_object(path, encoding, max_line_chars)
        if obj is not None:
            return "wikiextractor-json" if {"title", "url", "text"} <= obj.keys() else "jsonl"
        if name.endswith(_JSON_SUFFIXES):
            return "jsonl"  # reading it will say which line is not JSON
    if stripped.startswith("<doc "):
        return "wikiextractor"
    lines = text.split("\n")
    if len(head) == DETECT_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut off
    return "bert" if looks_like_sentence_per_line(lines) else "text"


# --------------------------------------------------------------------------------------------------
# Format readers: each yields (line, sentences) per document; empty documents are counted, not yielded.

_Reader = Callable[["_Context"], Iterator[tuple[int, list[str]]]]


@dataclass
class _Context:
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


def _read_bert(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    sentences: list[str] = []
    start = 0
    # strip_bom=False: the reference keeps a BOM (it is not whitespace); its tokenizer deletes it.
    for lineno, line in ctx.lines(strip_bom=False):
        line = line.strip()
        if not line:
            if sentences:
                yield start, sentences
                sentences = []
            else:
                ctx.skip_document("empty")
            continue
        if not sentences:
            start = lineno
        sentences.append(line)
    if sentences:
        yield start, sentences


def _json_objects(ctx: _Context) -> Iterator[tuple[int, dict]]:
    for lineno, line in ctx.lines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise InputError(
                f"{ctx.path}:{lineno}: not a JSON object ({err}); the jsonl format needs one JSON object per line. "
                "If this file is plain text, pass --input-format text (prose) or bert (one sentence per line)"
            ) from None
        if not isinstance(obj, dict):
            raise InputError(
                f"{ctx.path}:{lineno}: a JSON {type(obj).__name__}, not an object; the jsonl format needs one JSON "
                "object per line with the text in a field (--text-field)"
            )
        yield lineno, obj


def _text_of(ctx: _Context, lineno: int, obj: dict) -> str | None:
    if ctx.text_field not in obj:
        fields = ", ".join(sorted(obj)[:10])
        raise InputError(
            f"{ctx.path}:{lineno}: the JSON object has no field {ctx.text_field!r} (its fields: {fields}); "
            "name the field that holds the document text with --text-field"
        )
    text = obj[ctx.text_field]
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(
            f"{ctx.path}:{lineno}: field {ctx.text_field!r} holds a {type(text).__name__}, not a string; "
            "name the field that holds the document text with --text-field"
        )
    return text


def _read_jsonl(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    for lineno, obj in _json_objects(ctx):
        text = _text_of(ctx, lineno, obj)
        sentences = ctx.segment(text) if text else []
        if sentences:
            yield lineno, sentences
        else:
            ctx.skip_document("empty")


def _read_wikiextractor_json(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    for lineno, obj in _json_objects(ctx):
        text = _text_of(ctx, lineno, obj)
        title = obj.get("title")
        title = title.strip() if isinstance(title, str) else None
        sentences = ctx.segment(text, drop_first_if=title) if text else []
        if sentences:
            yield lineno, sentences
        else:
            ctx.skip_document("empty")


def _read_wikiextractor(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    in_doc = False
    seen_content = False
    start = 0
    title: str | None = None
    first_line = True
    sentences: list[str] = []

    def finish() -> Iterator[tuple[int, list[str]]]:
        if sentences:
            yield start, sentences
        else:
            ctx.skip_document("empty")

    for lineno, line in ctx.lines():
        stripped = line.strip()
        if not stripped:
            continue
        if not seen_content and not stripped.startswith("<doc"):
            raise InputError(
                f"{ctx.path}:{lineno}: expected a WikiExtractor '<doc ...>' line, found {stripped[:60]!r}; this file "
                "is not WikiExtractor output: pass the right --input-format (or auto)"
            )
        seen_content = True
        if stripped.startswith("<doc ") or stripped == "<doc>":
            if in_doc:  # a block without </doc>: close it
                yield from finish()
            in_doc, start, first_line, sentences = True, lineno, True, []
            match = _TITLE_ATTR.search(stripped)
            title = html.unescape(match.group(1)).strip() if match else None
            continue
        if stripped == "</doc>":
            if in_doc:
                yield from finish()
            in_doc, sentences = False, []
            continue
        if not in_doc:
            ctx.stats._count(ctx.stats.skipped_lines, "outside_doc")
            continue
        if first_line:
            first_line = False
            if title is None or title in (stripped, html.unescape(stripped)):
                continue  # the title line repeats the header
        sentences.extend(ctx.split(stripped))
    if in_doc:
        logger.warning("%s: the last <doc> block has no </doc>; its text is kept", ctx.path)
        yield from finish()


def _without_gutenberg_boilerplate(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Drop a Project Gutenberg header (up to its START marker) and footer (from its END marker on)."""
    buffered: list[tuple[int, str]] = []
    scanning = True
    for lineno, line in lines:
        stripped = line.strip()
        if _GUTENBERG_END.match(stripped):
            break
        if scanning:
            if _GUTENBERG_START.match(stripped):
                buffered.clear()
                scanning = False
                continue
            buffered.append((lineno, line))
            if len(buffered) >= GUTENBERG_HEADER_LINES:
                scanning = False
                yield from buffered
                buffered.clear()
            continue
        yield lineno, line
    yield from buffered


def _read_text(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    assert ctx.split is not None
    sentences: list[str] = []
    start = 0
    paragraph: list[str] = []
    paragraph_chars = 0
    warned = False
    for lineno, line in _without_gutenberg_boilerplate(ctx.lines()):
        stripped = line.strip()
        if stripped:
            if not start:
                start = lineno
            paragraph.append(stripped)
            paragraph_chars += len(stripped) + 1
            if paragraph_chars <= ctx.max_line_chars:
                continue
            if not warned:  # a "paragraph" this long has no blank lines: segment what we have
                warned = True
                logger.warning("%s:%d: paragraph longer than %d characters; segmenting it in parts",
                               ctx.path, lineno, ctx.max_line_chars)
        if paragraph:
            sentences.extend(ctx.split(" ".join(paragraph)))
            paragraph, paragraph_chars = [], 0
    if paragraph:
        sentences.extend(ctx.split(" ".join(paragraph)))
    if sentences:
        yield start, sentences
    else:
        ctx.skip_document("empty")


# ---- wiki-xml: MediaWiki pages-articles dumps

#: Tags whose content is not running text (BERT paper: "ignore lists, tables, and headers"): references,
#: tables, HTML lists, galleries, formulas, code, maps...
_WIKI_DROP_TAGS = frozenset({
    "ref", "references", "table", "tr", "td", "th", "caption", "ul", "ol", "dl", "li", "dt", "dd", "gallery",
    "math", "chem", "ce", "score", "timeline", "graph", "imagemap", "inputbox", "categorytree", "templatedata",
    "section", "pre", "source", "syntaxhighlight", "hiero", "mapframe", "maplink", "noinclude", "includeonly",
})
_WIKI_LIST_MARKUP = frozenset({"*", "#", ":", ";"})
_WIKI_MEDIA_LINK = re.compile(r"^\s*(?i:file|image|media|category)\s*:")
_WIKI_INTERLANGUAGE_LINK = re.compile(r"^\s*[a-z]{2,3}(?:-[a-z]+)*\s*:")
_WIKI_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_WIKI_TABLE_LEFTOVER = ("{|", "|", "!")
_WIKI_EMPTY_PARENS = re.compile(r"\s?\(\s*[,;]?\s*\)")  # "Brahui ({{IPA|...}}) is" -> "Brahui is"
_LIST_LINE = "\x00"  # marks a line that started with list markup; such lines are dropped
_REDIRECT_TEXT = re.compile(r"^\s*#REDIRECT", re.I)


def _strip_wikicode(code: Any) -> str:
    """Text of parsed wikitext without templates, headings, tables, lists, references, files, categories."""
    from mwparserfromhell.nodes import Comment, Heading, Tag, Template, Wikilink

    parts: list[str] = []
    for node in code.nodes:
        if isinstance(node, (Template, Heading, Comment)):
            continue
        if isinstance(node, Tag):
            if node.wiki_markup in _WIKI_LIST_MARKUP:
                parts.append(_LIST_LINE)
                continue
            tag = str(node.tag).strip().lower()
            if tag in _WIKI_DROP_TAGS:
                continue
            if node.contents is not None and not node.self_closing:
                parts.append(_strip_wikicode(node.contents))  # bold, italics, spans, divs...
            continue
        if isinstance(node, Wikilink):
            title = str(node.title)
            if _WIKI_MEDIA_LINK.match(title) or _WIKI_INTERLANGUAGE_LINK.match(title):
                continue
            parts.append(_strip_wikicode(node.text) if node.text is not None else node.title.strip_code())
            continue
        stripped = node.__strip__(normalize=True, collapse=True, keep_template_params=False)
        if stripped:
            parts.append(str(stripped))
    return "".join(parts)


def wikitext_paragraphs(wikitext: str) -> list[str]:
    """The text passages of an article's wikitext, one string per paragraph, markup removed.

    Implements the BERT paper's Wikipedia preprocessing (section 3.1: "we extract only the text passages
    and ignore lists, tables, and headers") with ``mwparserfromhell``: templates (infoboxes, citations,
    navigation boxes), headings, tables (wiki and HTML), list items (lines starting with ``*#:;`` and HTML
    lists), ``<ref>`` references, galleries, formulas, code, file/image links, category and interlanguage
    links, comments and magic words are dropped; links keep their visible text; HTML entities are decoded.
    """
    import mwparserfromhell

    text = _strip_wikicode(mwparserfromhell.parse(wikitext))
    paragraphs = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or line.startswith(_LIST_LINE) or line.startswith(_WIKI_TABLE_LEFTOVER):
            continue
        line = _WIKI_EMPTY_PARENS.sub("", _WIKI_MAGIC_WORD.sub("", line).replace(_LIST_LINE, ""))
        line = " ".join(line.split())
        if line:
            paragraphs.append(line)
    return paragraphs


class _BlockStream:
    """A read()-only binary file over :func:`_read_blocks` (for ``ElementTree.iterparse``), counting bytes."""

    def __init__(self, path: str, stats: ReaderStats):
        self._blocks = _read_blocks(path)
        self._buffer = bytearray()
        self._stats = stats
        self._eof = False
        self.empty = True

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._buffer) < size):
            block = next(self._blocks, None)
            if block is None:
                self._eof = True
                break
            self.empty = False
            self._stats.bytes += len(block)
            self._buffer += block
        if size < 0 or size > len(self._buffer):
            size = len(self._buffer)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _read_wiki_xml(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    """Articles (namespace 0, not redirects) of a MediaWiki XML dump, streamed with ``iterparse``.

    Each ``<page>`` element is cleared once read, so memory holds one page. Document ``line`` is 0.
    """
    import xml.etree.ElementTree as ET

    assert ctx.split is not None
    stream = _BlockStream(ctx.path, ctx.stats)
    root = None
    title = ns = text = None
    redirect = False
    try:
        for event, elem in ET.iterparse(stream, events=("start", "end")):
            name = _local_name(elem.tag)
            if event == "start":
                if root is None:
                    root = elem
                    if name != "mediawiki":
                        raise InputError(
                            f"{ctx.path}: the XML root element is <{name}>, not <mediawiki>; this is not a MediaWiki "
                            "pages-articles dump: pass the right --input-format (or auto)"
                        )
                elif name == "page":
                    title, ns, text, redirect = None, None, None, False
                continue
            if name == "title":
                title = elem.text or ""
            elif name == "ns":
                ns = (elem.text or "").strip()
            elif name == "redirect":
                redirect = True
            elif name == "text":
                text = elem.text or ""
            elif name == "page":
                root.clear()  # drop the finished page (and any earlier siblings) from the tree
                if ns not in (None, "0"):
                    ctx.skip_document("namespace")
                    continue
                if redirect or _REDIRECT_TEXT.match(text or ""):
                    ctx.skip_document("redirect")
                    continue
                sentences = [s for paragraph in wikitext_paragraphs(text or "") for s in ctx.split(paragraph)]
                if sentences:
                    yield 0, sentences
                else:
                    logger.debug("%s: page %r has no text passage", ctx.path, title)
                    ctx.skip_document("empty")
    except ET.ParseError as err:
        if stream.empty:
            return
        line, column = err.position
        raise InputError(
            f"{ctx.path}:{line}: not well-formed XML (column {column}: {err}); is it a complete MediaWiki "
            "pages-articles dump? (--input-format)"
        ) from None
    if stream.empty:
        ctx.stats.empty_files += 1


# ---- parquet

#: Rows per record batch read from a Parquet file.
PARQUET_BATCH_ROWS = 256


def _read_parquet(ctx: _Context) -> Iterator[tuple[int, list[str]]]:
    """Documents from the string column ``text_field`` of a Parquet file, read in record batches.

    The text is prose, as for ``jsonl``. Document ``line`` is 0; ``bytes`` counts the UTF-8 text read.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with _open(ctx.path) as fh:
        try:
            parquet = pq.ParquetFile(fh)
        except (pa.ArrowException, OSError) as err:
            raise InputError(
                f"{ctx.path}: not a readable Parquet file ({err}); pass the right --input-format (or auto)"
            ) from err
        schema = parquet.schema_arrow
        if ctx.text_field not in schema.names:
            raise InputError(
                f"{ctx.path}: the Parquet file has no column {ctx.text_field!r} (its columns: "
                f"{', '.join(schema.names[:10])}); name the text column with --text-field"
            )
        column_type = schema.field(ctx.text_field).type
        if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)
                or getattr(pa.types, "is_string_view", lambda t: False)(column_type)):
            raise InputError(
                f"{ctx.path}: column {ctx.text_field!r} has type {column_type}, not string; name the text column "
                "with --text-field"
            )
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[ctx.text_field]):
            column = batch.column(0)
            ctx.stats.bytes += pc.sum(pc.binary_length(column)).as_py() or 0
            for text in column.to_pylist():
                sentences = ctx.segment(text) if text else []
                if sentences:
                    yield 0, sentences
                else:
                    ctx.skip_document("empty")


_READERS: dict[str, _Reader] = {
    "bert": _read_bert,
    "jsonl": _read_jsonl,
    "text": _read_text,
    "wikiextractor": _read_wikiextractor,
    "wikiextractor-json": _read_wikiextractor_json,
    "wiki-xml": _read_wiki_xml,
    "parquet": _read_parquet,
}


def _warn_if_structured(ctx: _Context, input_format: str) -> None:
    """A hint when a file read as plain text looks like JSON lines or WikiExtractor output."""
    head = _read_head(ctx.path, 4096).decode(ctx.encoding, "replace").lstrip("\ufeff").lstrip()
    if head.startswith("{"):
        logger.warning("%s: read as %r but it starts with '{' (JSON lines?); --input-format jsonl or auto may be meant",
                       ctx.path, input_format)
    elif head.startswith("<doc "):
        logger.warning("%s: read as %r but it is WikiExtractor output; --input-format wikiextractor or auto may be meant",
                       ctx.path, input_format)


def read_documents(
    path: str,
    input_format: str = "auto",
    *,
    text_field: str = "text",
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = "utf-8",
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    stats: ReaderStats | None = None,
) -> Iterator[Document]:
    """Stream the documents of one input file (one call per file; see the module docstring for formats).

    Args:
        path: a file path or URL that Beam's ``FileSystems`` can open (``.gz``/``.bz2`` decompressed).
        input_format: one of :data:`INPUT_FORMATS`; ``auto`` runs :func:`detect_format` (logged at INFO).
        text_field: the JSON field holding the document text (``jsonl`` and ``wikiextractor-json``).
        segmenter: sentence segmenter for prose formats, one of ``segmentation.SEGMENTERS``.
        encoding: text encoding (ASCII-compatible; UTF-16/32 are refused). Undecodable bytes -> U+FFFD.
        max_line_chars: longest line read, in characters; longer lines are skipped and counted.
        stats: counters to add to (files, formats, documents, sentences, bytes, skips); optional.

    Returns:
        An iterator of :class:`Document` with ``ordinal`` 0, 1, 2... in file order. The options are
        validated when this is called; the file is opened on the first ``next()``.

    Raises:
        InputError: a bad option (names it), or bad input (names the file and line and what to do).
    """
    check_options(input_format, segmenter=segmenter, encoding=encoding, max_line_chars=max_line_chars)
    return _read_documents(path, input_format, text_field, segmenter, encoding, max_line_chars,
                           stats if stats is not None else ReaderStats())


def _read_documents(
    path: str, input_format: str, text_field: str, segmenter: str, encoding: str, max_line_chars: int,
    stats: ReaderStats,
) -> Iterator[Document]:
    if input_format == "auto":
        fmt = detect_format(path, encoding=encoding, max_line_chars=max_line_chars)
        logger.info("%s: input format %s (detected)", path, fmt)
    else:
        fmt = input_format
        logger.info("%s: input format %s", path, fmt)
    stats.files += 1
    stats._count(stats.formats, fmt)
    ctx = _Context(path, text_field, None if fmt == "bert" else get_segmenter(segmenter), encoding,
                   max_line_chars, stats)
    if input_format in ("bert", "text"):
        _warn_if_structured(ctx, input_format)
    ordinal = 0
    for line, sentences in _READERS[fmt](ctx):
        stats.documents += 1
        stats.sentences += len(sentences)
        if len(sentences) == 1:
            stats.one_sentence_documents += 1
        yield Document(source=path, ordinal=ordinal, line=line, sentences=sentences)
        ordinal += 1


def iter_corpus_texts(patterns: str | Sequence[str], input_format: str = "auto", **kw: Any) -> Iterator[str]:
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
            f"no text found in the {len(files)} input file(s) ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}); "
            "check the files and --input-format"
        )
