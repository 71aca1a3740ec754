"""Reading one large file on several workers: byte ranges cut at document boundaries.

:func:`plan_ranges` cuts each input file into ranges of about ``split_bytes`` bytes; a reader given one
(``read_documents(..., byte_range=...)``) reads the documents that start in it:

- line-based formats (``bert``, ``jsonl``, ``wikiextractor``, ``wikiextractor-json``): a range starts after
  the first *sync line* that starts at or after its first byte (``bert``: a blank line; JSON lines: any line
  end; ``wikiextractor``: a ``</doc>`` line) and ends with the first sync line at or after its last byte,
  so every line is read by exactly one range, and each range starts where a reader of the whole file has no
  open document (``files._iter_lines``, ``text.LINE_SYNC``);
- ``parquet``: a range reads the row groups whose first page lies in it;
- a bz2 MediaWiki multistream dump (``*-multistream.xml.bz2``) with its index next to it
  (``*-multistream-index.txt.bz2`` or ``.txt``): the ranges are cut at the offsets of the compressed
  streams the index lists, each range decompresses whole streams of whole pages. Without the index the
  dump is read whole (logged);
- other compressed files (gzip, xz, zstd, bzip2 that is not an indexed dump) cannot be read from a middle:
  read whole, logged once per run; the ``text`` format (one document per file) is read whole, and so are
  ``csv`` / ``tsv`` files (a line break inside a quoted field looks like a row's end; ``.csv`` / ``.tsv`` names
  are logged with the files that cannot be split).

Document ids stay what a whole-file read gives: a document's ordinal counts the documents its file yields
before it, so a range's documents are numbered from 0 and shifted by the number of documents the ranges
before it yielded (a prefix sum over the ranges of the file; :func:`read_ranges` here, the
``ReadDocuments`` step of the pipeline with a side input). Nothing depends on how many ranges a file has:
the documents, their text, ids, line numbers and the reader counters (which each range counts for its own
lines and bytes) are the same as a whole-file read's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.readers import local_files
from bertprep.pipeline.readers.base import Document, InputError, ReaderStats
from bertprep.pipeline.readers.files import _compression_of, _filesystems, _open, _read_blocks

logger = logging.getLogger(__name__)

#: A range: (range_index, start, end); ``end`` None = to the end of the file.
ByteRange = tuple[int, int, "int | None"]


def _sizes(files: Sequence[str]) -> list[int]:
    """The files' sizes; 0 (read whole) for a file that cannot be listed (its reading will say why). Local files
    are asked with the standard library (:func:`local_files.match`, what Beam's local file system answers), the
    others through Beam's ``FileSystems``."""
    sizes = [_local_size(path) if local_files.is_beam_local(path) else 0 for path in files]
    remote = [i for i, path in enumerate(files) if not local_files.is_beam_local(path)]
    for i, size in zip(remote, _beam_sizes([files[i] for i in remote]), strict=True):
        sizes[i] = size
    return sizes


def _local_size(path: str) -> int:
    try:
        matches = local_files.match(path)
    except OSError:
        return 0
    return matches[0][1] if matches else 0


def _beam_sizes(files: Sequence[str]) -> list[int]:
    if not files:
        return []
    try:
        results = _filesystems().match(list(files))
    except Exception:  # BeamIOError naming the files that are not there
        results = []
        for path in files:
            try:
                results.extend(_filesystems().match([path]))
            except Exception:
                results.append(None)
    return [r.metadata_list[0].size_in_bytes if r is not None and r.metadata_list else 0 for r in results]


def wiki_index_of(path: str) -> str | None:
    """The index file of a multistream dump ``...-multistream.xml.bz2`` (also the numbered parts
    ``...-multistream1.xml-p1p41242.bz2``), found next to it, or None."""
    directory, name = os.path.split(path)
    if "-multistream" not in name or not name.endswith(".bz2"):
        return None
    base = name.replace("-multistream", "-multistream-index", 1).replace(".xml", ".txt", 1)
    candidates = [base, base[: -len(".bz2")]]  # the index as published (bz2), or decompressed (.txt)
    local = local_files.is_beam_local(path)  # (Beam's local file system is os.path's: no Beam import for it)
    join, exists = (os.path.join, os.path.exists) if local else (_filesystems().join, _filesystems().exists)
    for candidate in candidates:
        full = join(directory, candidate) if directory else candidate
        if exists(full):
            return full
    return None


_NOT_THE_INDEX = "download the index of the same dump, or move it away to read the dump whole (by one worker)"


def stream_offsets(index_path: str) -> list[int]:
    """The sorted distinct stream offsets an index (``offset:page_id:title`` per line) lists.

    Raises:
        InputError: a line that does not start with an offset (not an index: it was a 54-line ValueError).
    """
    offsets: set[int] = set()
    carry, number = b"", 0
    for block in _read_blocks(index_path, check_binary=False):
        lines = (carry + block).split(b"\n")
        carry = lines.pop()
        for line in lines:
            number += 1
            offsets.add(_offset_of(index_path, number, line))
    if carry.strip():
        offsets.add(_offset_of(index_path, number + 1, carry))
    offsets.discard(-1)
    return sorted(offsets)


def _offset_of(index_path: str, number: int, line: bytes) -> int:
    """The offset of index line ``number`` (-1 for a blank line)."""
    if not line.strip():
        return -1
    head = line.split(b":", 1)[0]
    if not head.isdigit():
        shown = line[:60].decode("utf-8", "replace")
        raise InputError(
            f"{index_path}:{number}: {shown!r} is not a multistream index line (offset:page_id:title); {_NOT_THE_INDEX}"
        )
    return int(head)


#: How a bz2 stream starts: ``BZh``, the block size 1-9, then a block's magic (pi) or the end-of-stream one.
_BZ2_STREAM_STARTS = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")


def check_stream_starts(path: str, index_path: str, offsets: Sequence[int]) -> None:
    """Check that a bz2 stream starts at each of ``offsets`` (where ranges of ``path`` start reading;
    ``file_ranges`` checks the first, middle and last: a read each, which on gs:// is a request).

    Raises:
        InputError: one does not, so the index is not this dump's (offsets shifted, another date's index): a
            range read from there failed as "truncated or corrupt ... re-download it" though the dump was intact.
    """
    with _open(path, "uncompressed") as fh:
        for offset in offsets:
            fh.seek(offset)
            head = fh.read(10)
            if not (head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in _BZ2_STREAM_STARTS):
                raise InputError(
                    f"{index_path}: offset {offset} is not the start of a bz2 stream of {path}, so this index does "
                    f"not belong to that dump (another date's, or edited); {_NOT_THE_INDEX}"
                )


def _cut(boundaries: Sequence[int], split_bytes: int) -> list[ByteRange]:
    """Ranges of about ``split_bytes`` cut at ``boundaries`` (sorted, starting with 0)."""
    starts = [0]
    for offset in boundaries[1:]:
        if offset - starts[-1] >= split_bytes:
            starts.append(offset)
    return [(i, s, starts[i + 1] if i + 1 < len(starts) else None) for i, s in enumerate(starts)]


def file_ranges(path: str, size: int, split_bytes: int, notes: dict[str, list[str]] | None = None) -> list[ByteRange]:
    """The ranges of one file of ``size`` bytes; ``notes`` collects the files that cannot be split, by reason."""
    whole: list[ByteRange] = [(0, 0, None)]
    if split_bytes <= 0 or size <= split_bytes:
        return whole
    if path.lower().endswith((".csv", ".tsv")):  # (the delimited reader: no row start is known; compressed: below)
        if notes is not None:
            notes.setdefault("CSV/TSV: a quoted line break hides where rows start", []).append(path)
        return whole
    compression = _compression_of(path)
    if compression is None:
        return _cut(range(0, size, split_bytes), split_bytes)
    if compression == "bzip2" and "-multistream" in os.path.basename(path):
        index = wiki_index_of(path)
        if index is None:
            if notes is not None:
                notes.setdefault("a multistream wiki dump without its -index.txt(.bz2) file next to it", []).append(
                    path
                )
            return whole
        ranges = _cut([0] + [o for o in stream_offsets(index) if 0 < o < size], split_bytes)
        starts = [start for _, start, _ in ranges if start]
        check_stream_starts(path, index, sorted({*starts[:1], *starts[len(starts) // 2 :][:1], *starts[-1:]}))
        return ranges
    if notes is not None:
        notes.setdefault(f"{compression}-compressed", []).append(path)
    return whole


#: What to do about the files of a reason (its part before ":") that cannot be split; compressed: decompress.
_HINTS = {"CSV/TSV": "; split such a file into several to spread its reading over the workers"}


def plan_ranges(files: Sequence[str], split_bytes: int) -> list[tuple[int, str, int, int, int | None]]:
    """``(file_index, path, range_index, start, end)`` for every range of every file, in reading order.

    A file of at most ``split_bytes`` bytes (and every file when ``split_bytes`` is 0) is one range
    ``(0, 0, None)``. Files that cannot be split are logged once, with their count (at WARNING when
    they are larger than a range: they are read by one worker each)."""
    notes: dict[str, list[str]] = {}
    out = []
    for file_index, (path, size) in enumerate(zip(files, _sizes(files), strict=True)):
        for byte_range in file_ranges(path, size, split_bytes, notes):
            out.append((file_index, path, *byte_range))
    for reason, paths in notes.items():
        shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
        logger.warning(
            "%d input file(s) larger than --split-bytes %d cannot be split (%s): each is read whole by one "
            "worker (%s)%s",
            len(paths),
            split_bytes,
            reason,
            shown,
            _HINTS.get(reason.split(":")[0], "; decompress them to spread their reading over the workers")
            if "index" not in reason
            else "",
        )
    split = sum(1 for r in out if r[2] > 0)
    if split:
        logger.info("%d input file(s) read in %d byte ranges", len({r[0] for r in out if r[2] > 0}), len(out))
    return out


def read_ranges(
    path: str,
    ranges: Sequence[ByteRange],
    input_format: str = ReadOptions.input_format,
    stats: ReaderStats | None = None,
    **kw: Any,
) -> Iterator[Document]:
    """The documents of ``path`` read range by range, numbered as a whole-file read numbers them (the
    ordinals of each range shifted by the documents of the ranges before it). ``kw``: ``read_documents``'s."""
    from bertprep.pipeline.readers import read_documents

    before = 0
    for byte_range in ranges:
        count = 0
        for doc in read_documents(path, input_format, stats=stats, byte_range=byte_range, **kw):
            count += 1
            yield Document(doc.source, doc.ordinal + before, doc.line, doc.sentences)
        before += count
