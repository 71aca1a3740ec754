"""The line-based formats: ``bert`` (one sentence per line), ``jsonl`` and ``wikiextractor-json`` (one JSON
object per line), ``wikiextractor`` (``<doc>`` blocks) and ``text`` (prose, one document per file).

Each reader takes a :class:`~bertprep.pipeline.readers.context.ReadContext` and yields ``(line, sentences)``
per document; the package docstring (``bertprep.pipeline.readers``) says how each format is read."""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterable, Iterator

from bertprep.pipeline.readers.base import InputError
from bertprep.pipeline.readers.context import ReadContext

logger = logging.getLogger(__name__)

#: A Project Gutenberg ``*** START OF ...`` marker further into a file than this is not looked for.
GUTENBERG_HEADER_LINES = 1000

_GUTENBERG_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|^\*END\*\s*THE SMALL PRINT", re.I)
_GUTENBERG_END = re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|^End of (the )?Project Gutenberg", re.I)
_TITLE_ATTR = re.compile(r'\btitle="([^"]*)"')


def _blank(line: str) -> bool:
    return not line.strip()


def _end_of_doc(line: str) -> bool:
    return line.strip() == "</doc>"


#: Where a byte range of a line-based format may start (``files._iter_lines``): after a line for which the
#: function holds (None: after any line). After such a line the format's reader of the whole file is in its
#: starting state (no open document), so a range read from there yields the documents the whole read yields.
LINE_SYNC = {"bert": _blank, "jsonl": None, "wikiextractor-json": None, "wikiextractor": _end_of_doc}


def read_bert(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
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


def _json_objects(ctx: ReadContext) -> Iterator[tuple[int, dict]]:
    for lineno, line in ctx.lines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise InputError(
                f"{ctx.path}:{ctx.line(lineno)}: not a JSON object ({err}); the jsonl format needs one JSON object "
                "per line. "
                "If this file is plain text, pass --input-format text (prose) or bert (one sentence per line)"
            ) from None
        if not isinstance(obj, dict):
            raise InputError(
                f"{ctx.path}:{ctx.line(lineno)}: a JSON {type(obj).__name__}, not an object; the jsonl format needs "
                "one JSON object per line with the text in a field (--text-field)"
            )
        yield lineno, obj


def _text_of(ctx: ReadContext, lineno: int, obj: dict) -> str | None:
    if ctx.text_field not in obj:
        fields = ", ".join(sorted(obj)[:10])
        raise InputError(
            f"{ctx.path}:{ctx.line(lineno)}: the JSON object has no field {ctx.text_field!r} "
            f"(its fields: {fields}); "
            "name the field that holds the document text with --text-field"
        )
    text = obj[ctx.text_field]
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(
            f"{ctx.path}:{ctx.line(lineno)}: field {ctx.text_field!r} holds a {type(text).__name__}, not a string; "
            "name the field that holds the document text with --text-field"
        )
    return text


def read_jsonl(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    for lineno, obj in _json_objects(ctx):
        text = _text_of(ctx, lineno, obj)
        sentences = ctx.segment(text) if text else []
        if sentences:
            yield lineno, sentences
        else:
            ctx.skip_document("empty")


def read_wikiextractor_json(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    for lineno, obj in _json_objects(ctx):
        text = _text_of(ctx, lineno, obj)
        title = obj.get("title")
        title = title.strip() if isinstance(title, str) else None
        sentences = ctx.segment(text, drop_first_if=title) if text else []
        if sentences:
            yield lineno, sentences
        else:
            ctx.skip_document("empty")


def read_wikiextractor(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    assert ctx.split is not None
    in_doc = False
    seen_content = ctx.mid_file  # a range after the first starts after a </doc> line
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
                f"{ctx.path}:{ctx.line(lineno)}: expected a WikiExtractor '<doc ...>' line, found {stripped[:60]!r}; "
                "this file is not WikiExtractor output: pass the right --input-format (or auto)"
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


def read_text(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
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
                logger.warning(
                    "%s:%d: paragraph longer than %d characters; segmenting it in parts",
                    ctx.path,
                    ctx.line(lineno),
                    ctx.max_line_chars,
                )
        if paragraph:
            sentences.extend(ctx.split(" ".join(paragraph)))
            paragraph, paragraph_chars = [], 0
    if paragraph:
        sentences.extend(ctx.split(" ".join(paragraph)))
    if sentences:
        yield start, sentences
    else:
        ctx.skip_document("empty")
