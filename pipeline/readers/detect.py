"""Format detection (``--input-format auto``): :func:`detect_format` and the hints given when a file read as
plain text looks structured."""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import bertprep.pipeline.readers.files as files
from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.readers.base import DEFAULT_MAX_LINE_CHARS, InputError, ReaderStats
from bertprep.pipeline.readers.files import _check_not_binary, _iter_lines, _read_blocks
from bertprep.pipeline.readers.hf import is_hf_metadata

if TYPE_CHECKING:
    from bertprep.pipeline.readers.context import ReadContext

logger = logging.getLogger(__name__)

#: Bytes at the start of a file that :func:`detect_format` inspects.
DETECT_BYTES = 64 * 1024

_COMPRESSION_SUFFIXES = tuple(files._COMPRESSIONS)  # the suffixes files.open_input decompresses
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")
_MEDIAWIKI_ROOT = re.compile(r"^(<\?xml[^>]*\?>\s*)?(<!--.*?-->\s*)*<mediawiki[\s>]", re.S)


def _strip_compression(path: str) -> str:
    lower = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            return lower[: -len(suffix)]
    return lower


def _read_head(path: str, n_bytes: int, check_binary: bool = True) -> bytes:
    head = bytearray()
    for block in _read_blocks(path, block_size=min(files.BLOCK_SIZE, n_bytes), check_binary=check_binary):
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
    pairs = [(a, b) for a, b in itertools.pairwise(lines) if a.strip() and b.strip()]
    lower_next = sum(b.strip()[0].islower() for _, b in pairs) / len(pairs) if pairs else 0.0
    lengths = sorted(len(line) for line in nonblank)
    p90 = lengths[int(0.9 * (len(lengths) - 1))]
    near_width = sum(n >= p90 - 12 for n in lengths) / len(lengths)
    hard_wrapped = len(lengths) >= 20 and lengths[-1] <= 100 and near_width >= 0.6
    return final >= 0.6 and lower_next <= 0.3 and not hard_wrapped


def detect_format(
    path: str, *, encoding: str = ReadOptions.encoding, max_line_chars: int = DEFAULT_MAX_LINE_CHARS
) -> str:
    """Guess the input format of ``path`` from its extension and its first :data:`DETECT_BYTES` bytes.

    Rules, in order: a ``.parquet`` name or the Parquet magic ``PAR1`` -> ``parquet``; a ``.arrow`` name or a
    ``datasets`` metadata file (``dataset_info.json``, ``state.json``, ``dataset_dict.json``) -> ``hf``; a ``.csv`` /
    ``.tsv`` name (before a compression suffix) -> ``csv`` / ``tsv``; a root element
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
    if name.endswith(".arrow") or is_hf_metadata(path):
        return "hf"  # a Hugging Face dataset's files (the metadata files are passed over)
    if name.endswith((".csv", ".tsv")):
        return name[-3:]
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


def warn_if_structured(ctx: ReadContext, input_format: str) -> None:
    """A hint when a file read as plain text looks like JSON lines or WikiExtractor output."""
    head = _read_head(ctx.path, 4096).decode(ctx.encoding, "replace").lstrip("\ufeff").lstrip()
    if head.startswith("{"):
        logger.warning(
            "%s: read as %r but it starts with '{' (JSON lines?); --input-format jsonl or auto may be meant",
            ctx.path,
            input_format,
        )
    elif head.startswith("<doc "):
        logger.warning(
            "%s: read as %r but it is WikiExtractor output; --input-format wikiextractor or auto may be meant",
            ctx.path,
            input_format,
        )
