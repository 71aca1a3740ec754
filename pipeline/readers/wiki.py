"""The ``wiki-xml`` format: MediaWiki ``pages-articles`` dumps streamed with ``iterparse``, and the wikitext
stripping (:func:`wikitext_paragraphs`) that keeps only the text passages, as the BERT paper did."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from bertprep.pipeline.readers.base import InputError, ReaderStats
from bertprep.pipeline.readers.context import ReadContext
from bertprep.pipeline.readers.files import BLOCK_SIZE, _compression_of, _DecompressedFile, _read_blocks

logger = logging.getLogger(__name__)

#: Tags whose content is not running text (BERT paper: "ignore lists, tables, and headers"): references,
#: tables, HTML lists, galleries, formulas, code, maps...
_WIKI_DROP_TAGS = frozenset(
    {
        "ref",
        "references",
        "table",
        "tr",
        "td",
        "th",
        "caption",
        "ul",
        "ol",
        "dl",
        "li",
        "dt",
        "dd",
        "gallery",
        "math",
        "chem",
        "ce",
        "score",
        "timeline",
        "graph",
        "imagemap",
        "inputbox",
        "categorytree",
        "templatedata",
        "section",
        "pre",
        "source",
        "syntaxhighlight",
        "hiero",
        "mapframe",
        "maplink",
        "noinclude",
        "includeonly",
    }
)
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

    def __init__(self, path: str, stats: ReaderStats, start: int = 0, end: int | None = None):
        self._blocks = _read_blocks(path) if start == 0 and end is None else _stream_range_blocks(path, start, end)
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
            if isinstance(block, _Markup):  # a root element around a range's pages, not the file's bytes
                self._buffer += block.data
                continue
            self.empty = False
            self._stats.bytes += len(block)
            self._buffer += block
        if size < 0 or size > len(self._buffer):
            size = len(self._buffer)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


class _Markup:
    """Bytes :class:`_BlockStream` parses but does not count (the root element around a range's pages)."""

    def __init__(self, data: bytes):
        self.data = data


def _stream_range_blocks(path: str, start: int, end: int | None) -> Iterator[Any]:
    """The pages of the compressed streams in bytes ``[start, end)`` of a multistream dump, as one XML
    document: a range after the first gets a ``<mediawiki>`` root opened before its pages, a range before
    the last one the root closed after them (the first stream holds the dump's ``<mediawiki ...>`` and
    ``<siteinfo>``, the last one its ``</mediawiki>``; every stream between holds whole pages)."""
    if start > 0:
        yield _Markup(b"<mediawiki>")
    with _DecompressedFile(path, _compression_of(path) or "bzip2", start, end) as fh:
        while True:
            block = fh.read(BLOCK_SIZE)
            if not block:
                break
            yield block
    if end is not None:
        yield _Markup(b"</mediawiki>")


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def read_wiki_xml(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    """Articles (namespace 0, not redirects) of a MediaWiki XML dump, streamed with ``iterparse``.

    Each ``<page>`` element is cleared once read, so memory holds one page. Document ``line`` is 0.
    """
    import xml.etree.ElementTree as ET

    assert ctx.split is not None
    stream = _BlockStream(ctx.path, ctx.stats, ctx.start, ctx.end)
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
                assert root is not None  # (the first start event set it)
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
        where = f"{ctx.path}:{line}" if ctx.start == 0 else f"{ctx.path} (streams from byte {ctx.start:,}), line {line}"
        raise InputError(
            f"{where}: not well-formed XML (column {column}: {err}); is it a complete MediaWiki "
            "pages-articles dump? (--input-format)"
        ) from None
    if stream.empty:
        ctx.stats.empty_files += 1
