"""Files and line IO: finding the inputs, opening them through Beam's ``FileSystems`` (local paths as Beam's
local file system would, without importing Beam: :mod:`~bertprep.pipeline.readers.local_files`), decompression
that notices a file cut short, the binary-file check, and splitting bytes into lines (:func:`_iter_lines`)."""

from __future__ import annotations

import codecs
import logging
import lzma
import os
import re
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence

from bertprep.core import storage
from bertprep.pipeline.readers import local_files
from bertprep.pipeline.readers.base import InputError, ReaderStats

logger = logging.getLogger(__name__)

#: Bytes read from the file system per call.
BLOCK_SIZE = 1 << 20


# --------------------------------------------------------------------------------------------------
# Finding the input files


def _filesystems():
    from apache_beam.io.filesystems import FileSystems  # Beam is slow to import; import on first use

    return FileSystems


def _has_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _match(pattern: str) -> list[tuple[str, int]]:
    """``(path, size)`` of the files ``pattern`` matches, sorted: Beam's ``FileSystems.match`` (a local path: the
    same rules without Beam, :func:`local_files.match`)."""
    try:
        if local_files.is_beam_local(pattern):
            return sorted(local_files.match(pattern))
        result = _filesystems().match([pattern])[0]
    except Exception as err:  # BeamIOError, or ValueError for a scheme whose extra is not installed
        raise InputError(f"cannot list input {pattern!r}: {err}") from err
    return sorted((m.path, m.size_in_bytes) for m in result.metadata_list)


def _expand_directory(directory: str) -> list[tuple[str, int]]:
    base = directory.rstrip("/")
    pattern = base + "/**" if storage.is_remote(base) else os.path.join(base, "**")
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
    refusal = storage.beam_read_refusal(pattern, "input")
    if refusal:
        raise InputError(refusal)
    if _has_glob(pattern):
        matches = _match(pattern)
        if not matches:
            raise InputError(f"input pattern {pattern!r} matches no file; check the path and the glob")
        return matches
    if pattern.endswith("/") or (not storage.is_remote(pattern) and os.path.isdir(pattern)):
        matches = _expand_directory(pattern)
        if not matches:
            raise InputError(
                f"input directory {pattern!r} holds no readable file (hidden files and README* are skipped)"
            )
        return matches
    matches = _match(pattern)
    if matches:
        return matches
    if storage.is_remote(pattern):  # object stores have no directories: try the path as a prefix
        matches = _expand_directory(pattern)
        if matches:
            return matches
    raise InputError(f"input file {pattern!r} not found; check the path (globs and directories are accepted)")


def expand_inputs(patterns: str | Sequence[str]) -> list[str]:
    """Expand input patterns into the list of files to read, in reading order.

    ``patterns`` is one comma-separated string or a sequence of them (like the reference's
    ``--input_file``; a comma therefore cannot be part of a path). Each pattern is globbed through Beam's
    ``FileSystems.match``, a local one by the same rules without Beam (:mod:`local_files`: ``*`` within a folder,
    ``**`` across folders, ``?`` any one character, ``[...]``); the matches of each
    pattern are sorted, patterns are taken in the order given, and a file matched twice is kept at its
    first place. A directory stands for all regular files under it, recursively, sorted, **skipping
    hidden files (any path part starting with ".") and files named README***.

    Raises:
        InputError: no pattern given; a pattern that matches nothing (the message names it); a file that
            does not exist; every matched file is empty (0 bytes).
    """
    flat = _split_patterns(patterns)
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


def _split_patterns(patterns: str | Sequence[str]) -> list[str]:
    if isinstance(patterns, str):
        patterns = [patterns]
    return [p.strip() for item in patterns for p in str(item).split(",") if p.strip()]


def input_root(pattern: str, files: Sequence[str] = ()) -> str:
    """Where the files of an input pattern are, as the user names it: what :func:`input_keys` takes their
    paths relative to. A glob's fixed part up to its last ``/`` (``corpus/**/*.txt`` -> ``corpus/``,
    ``*.txt`` -> ``""``), a folder or object prefix with a ``/`` at its end (``gs://b/corpus`` ->
    ``gs://b/corpus/``), a file's folder (``corpus/a.txt`` -> ``corpus/``: a pattern found among ``files``,
    the expanded inputs, is a file)."""
    pattern = pattern.strip()
    if _has_glob(pattern):
        fixed = pattern[: min(pattern.index(c) for c in "*?[" if c in pattern)]
        return fixed[: fixed.rfind("/") + 1]
    if pattern in files or not (pattern.endswith("/") or storage.is_remote(pattern) or os.path.isdir(pattern)):
        return pattern[: pattern.rfind("/") + 1]
    return pattern.rstrip("/") + "/"


def input_keys(patterns: str | Sequence[str], files: Sequence[str]) -> list[str]:
    """The path each of ``files`` (``expand_inputs(patterns)``) is known by in the documents' keys: its path
    relative to the innermost root of the patterns (:func:`input_root`; the longest it is under), so that the
    same corpus in another folder or bucket gives the same keys, hence the same buckets, held-out split and
    mixture draws.

    ``corpus/**`` and ``gs://bucket/corpus/`` both key ``corpus/wiki/a.txt`` and
    ``gs://bucket/corpus/wiki/a.txt`` as ``wiki/a.txt``. Two files with the same relative path under
    different roots (``a/x.txt,b/x.txt``) are told apart by a ``#n`` suffix on the second and later, in
    input order. A file under no root (a spelling the file system changed) keeps its path as given.
    """
    roots = [input_root(p, files) for p in _split_patterns(patterns)]
    keys: list[str] = []
    seen: dict[str, int] = {}
    for path in files:
        under = [r for r in roots if path.startswith(r)]
        key = path[len(max(under, key=len)) :] if under else path
        seen[key] = seen.get(key, 0) + 1
        keys.append(key if seen[key] == 1 else f"{key}#{seen[key]}")
    return keys


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


def _open(path: str, compression_type: str = "auto"):
    """``path`` opened through Beam's ``FileSystems`` with ``compression_type`` (a ``CompressionTypes`` name); a local
    file that Beam would not decompress, with the standard library (:func:`local_files.open_uncompressed`)."""
    try:
        if local_files.is_beam_local(path) and (
            compression_type == "uncompressed" or (compression_type == "auto" and _compression_of(path) is None)
        ):
            return local_files.open_uncompressed(path)
        from apache_beam.io.filesystem import CompressionTypes

        return _filesystems().open(path, compression_type=getattr(CompressionTypes, compression_type.upper()))
    except FileNotFoundError:
        raise InputError(f"input file {path!r} not found; check the path") from None
    except OSError as err:
        raise InputError(f"cannot open input file {path!r}: {err}") from err


#: Compression by file-name suffix (the suffixes Beam's ``CompressionTypes`` detects) -> (name, test command).
_COMPRESSIONS = {
    ".gz": ("gzip", "gzip -t"),
    ".bz2": ("bzip2", "bzip2 -t"),
    ".deflate": ("deflate", None),
    ".zst": ("zstd", "zstd -t"),
    ".zstd": ("zstd", "zstd -t"),
    ".xz": ("xz", "xz -t"),
    ".lzma": ("lzma", "xz -t"),
}

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
    import zstandard  # (a dependency of Beam's, the module its CompressedFile uses: no Beam import for a local file)

    return zstandard.ZstdDecompressor().decompressobj()


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

    def __init__(self, path: str, compression: str, start: int = 0, end: int | None = None):
        self.path = path
        self.compression = compression
        self._raw = _open(path, "uncompressed")
        if start:  # a range of whole compressed streams (the bz2 streams of a multistream wiki dump)
            self._raw.seek(start)
        self._left = None if end is None else end - start  # compressed bytes left to read
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
                if self._left is None:
                    chunk = self._raw.read(_RAW_READ_SIZE)
                else:
                    chunk = self._raw.read(min(_RAW_READ_SIZE, self._left)) if self._left else b""
                    self._left -= len(chunk)
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

    def __enter__(self) -> _DecompressedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(path: str):
    """Open an input file for reading its (decompressed) bytes, through Beam's ``FileSystems`` (a local file with
    the standard library, as Beam's local file system opens it).

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


def _read_blocks(path: str, block_size: int | None = None, check_binary: bool = True) -> Generator[bytes, None, None]:
    """The (decompressed) bytes of ``path`` in blocks; a block that looks binary is an error
    (:func:`_check_not_binary`), as is a compressed file that is truncated or corrupt."""
    for _, block in _read_blocks_at(path, 0, block_size, check_binary):
        yield block


def _read_blocks_at(
    path: str, start: int = 0, block_size: int | None = None, check_binary: bool = True
) -> Iterator[tuple[int, bytes]]:
    """``(offset, block)`` of an uncompressed file's bytes from the block that holds byte ``start`` on.

    Blocks are read at multiples of ``block_size`` whatever ``start`` is, so a range of a file
    (:mod:`~bertprep.pipeline.readers.ranges`) checks exactly the blocks a whole-file read checks
    (:func:`_check_not_binary`). A compressed file can only be read from ``start`` 0.
    """
    block_size = block_size or BLOCK_SIZE
    offset = start - start % block_size
    if offset and _compression_of(path) is not None:
        raise ValueError(f"{path}: a compressed file cannot be read from byte {start}")
    with open_input(path) as fh:
        if offset:
            fh.seek(offset)
        while True:
            try:
                block = fh.read(block_size)
            except OSError as err:
                raise InputError(f"{path}: cannot read the file ({err})") from err
            if not block:
                return
            if check_binary:
                _check_not_binary(path, block, offset)
            yield offset, block
            offset += len(block)


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


def lines_before(path: str, start: int) -> int:
    """The number of ``\\n`` bytes in ``path`` before byte ``start`` (a range's first line number - 1 is
    computed from it only when a message or a caller needs it: see :func:`_iter_lines`)."""
    count = 0
    for offset, block in _read_blocks_at(path, 0, check_binary=False):
        if offset + len(block) >= start:
            return count + block.count(b"\n", 0, start - offset)
        count += block.count(b"\n")
    return count


def _iter_lines(
    path: str,
    *,
    encoding: str,
    max_line_chars: int,
    stats: ReaderStats,
    strip_bom: bool,
    start: int = 0,
    end: int | None = None,
    sync: Callable[[str], bool] | None = None,
    line_base: Callable[[], int] | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of ``path``, split at ``\\n`` only (1-based numbers).

    The text keeps its ``\\r`` (if any); an over-long line is skipped and counted without being loaded
    beyond ``4 * max_line_chars`` bytes; undecodable bytes become U+FFFD and the line is counted.

    A byte range ``[start, end)`` of the file (``end`` None: to its end) yields the lines after the first
    *sync line* (a line, decoded, for which ``sync`` holds; ``sync`` None: every line) that starts at or
    after ``start``, up to and including the first sync line that starts at or after ``end``. The ranges
    that cut a file therefore yield each line exactly once, and a range starts where a reader of the whole
    file is in a known state (after a blank line, a ``</doc>``...). Lines before a range's first sync line
    belong to the range before: not counted. ``stats.bytes`` counts the bytes of ``[start, end)``. Line
    numbers of a range that starts after byte 0 count from the first line starting at or after ``start``
    (numbered 1); ``line_base()`` (called only for a warning) gives the lines before it.
    """
    lines = _LineTexts(path, encoding, max_line_chars, stats, strip_bom and start == 0, line_base, owned=start == 0)
    complete = lines.complete
    lineno = 0
    line_start = 0  # offset of the first byte of the current line
    empty = True
    for offset, block in _range_blocks(path, start, end, stats):
        if empty:  # the first block starts at the range's first line
            empty, line_start = False, offset
        pieces = block.split(b"\n")
        next_start = offset
        for piece in pieces[:-1]:  # each of these ends a line
            lineno += 1
            this_start, next_start = line_start, next_start + len(piece) + 1
            line_start = next_start
            text = complete(piece, lineno)
            if text is None:
                continue
            if lines.owned:
                yield lineno, text
                if end is not None and this_start >= end and (sync is None or sync(text)):
                    return  # the next range starts after this line
            elif sync is None or sync(text):
                if end is not None and this_start >= end:
                    return  # no sync line in [start, end): the range is empty, the next one starts here too
                lines.owned = True  # this range's lines start after its first sync line
        lines.keep(pieces[-1])
    last = lines.finish(lineno + 1, empty)
    if last is not None:
        yield lineno + 1, last


def _range_blocks(path: str, start: int, end: int | None, stats: ReaderStats) -> Iterator[tuple[int, bytes]]:
    """``(offset, block)`` of ``path``'s bytes for :func:`_iter_lines`' range ``[start, end)``: read from byte
    ``start - 1`` on (to see whether ``start`` begins a line), the first block yielded cut to begin at the first
    line that starts at or after ``start`` (blocks before it are not yielded), each block read counted in
    ``stats.bytes`` for its bytes within ``[start, end)`` (``end`` None: to the file's end)."""
    seeking = start > 0  # dropping bytes up to the first line start at or after `start`
    for offset, block in _read_blocks_at(path, max(0, start - 1)):
        block_end = offset + len(block)
        stats.bytes += max(0, min(block_end, block_end if end is None else end) - max(offset, start))
        if seeking:
            cut = _first_line_start(block, offset, start)
            if cut < 0:
                continue
            seeking = False
            offset += cut
            block = block[cut:]
        yield offset, block


def _first_line_start(block: bytes, offset: int, start: int) -> int:
    """Where in ``block`` (the file's bytes from ``offset`` on) the first line that starts at or after byte
    ``start`` starts: after the first ``\\n`` at or after byte ``start - 1``; -1 when not in this block."""
    cut = block.find(b"\n", max(0, start - 1 - offset))
    return cut if cut < 0 else cut + 1


class _LineTexts:
    """The lines of one :func:`_iter_lines` pass as text: joins a line's pieces across blocks, skips and counts
    over-long lines (never holding more than ``4 * max_line_chars`` bytes of one), decodes (undecodable
    bytes counted, one warning each kind per file), strips a first line's BOM. ``owned``: the lines are the
    range's (before its first sync line they are not: nothing is counted)."""

    def __init__(
        self,
        path: str,
        encoding: str,
        max_line_chars: int,
        stats: ReaderStats,
        strip_bom: bool,
        line_base: Callable[[], int] | None,
        owned: bool,
    ):
        self.path = path
        self.encoding = encoding
        self.max_line_chars = max_line_chars
        self.max_bytes = 4 * max_line_chars
        self.stats = stats
        self.strip_bom = strip_bom
        self.line_base = line_base
        self.owned = owned
        self.base: int | None = None
        self.warned_decode = self.warned_long = False
        self.carry: list[bytes] = []  # pieces of the current unfinished line
        self.carry_len = 0
        self.skipping = False  # inside an over-long line: drop bytes until the next \n

    def complete(self, piece: bytes, n: int) -> str | None:
        """Line ``n`` ended by ``piece`` (its last bytes, before the ``\\n``): its text, or None when skipped."""
        if self.skipping:
            self.skipping = False
            self.over_long(n)
            return None
        if self.carry:
            self.carry.append(piece)
            raw = b"".join(self.carry)
            self.carry, self.carry_len = [], 0
        else:
            raw = piece
        if len(raw) > self.max_bytes:
            self.over_long(n)
            return None
        try:
            text = raw.decode(self.encoding)
        except UnicodeDecodeError:
            text = self.replaced(raw, n)
        if len(text) > self.max_line_chars:
            self.over_long(n)
            return None
        if n == 1 and self.strip_bom and text.startswith("\ufeff"):
            text = text[1:]
        return text

    def keep(self, tail: bytes) -> None:
        """Hold ``tail``, the start of a line that goes on in the next block (dropped once it is over-long)."""
        if tail and not self.skipping:
            if self.carry_len + len(tail) > self.max_bytes:
                self.skipping = True
                self.carry, self.carry_len = [], 0
            else:
                self.carry.append(tail)
                self.carry_len += len(tail)

    def last(self, n: int) -> str | None:
        """The file's last line ``n`` when it has no ``\\n`` at its end: its text, or None (none, or skipped)."""
        if self.skipping:
            self.over_long(n)
        elif self.carry:
            return self.complete(b"", n)  # (the carried bytes are within the limit: keep checked them)
        return None

    def finish(self, n: int, empty: bool) -> str | None:
        """At the end of the range: :meth:`last` (line ``n``), or None where the lines are not the range's
        (``owned`` false), or where the file is empty (``empty``: no byte read; counted in ``empty_files``)."""
        if not self.owned:
            return None
        if empty:
            self.stats.empty_files += 1
            logger.info("%s: empty file", self.path)
            return None
        return self.last(n)

    def where(self, n: int) -> int:
        """Line ``n`` of the range as a line number of the file (for a warning)."""
        if self.line_base is None:
            return n
        if self.base is None:
            self.base = self.line_base()
        return self.base + n

    def over_long(self, n: int) -> None:
        """Count over-long line ``n`` (a warning for the first)."""
        if not self.owned:
            return
        self.stats._count(self.stats.skipped_lines, "over_long_line")
        if not self.warned_long:
            self.warned_long = True
            logger.warning(
                "%s:%d: line longer than %d characters skipped (counted in skipped_lines['over_long_line']); "
                "raise --max-line-chars if such lines are real documents",
                self.path,
                self.where(n),
                self.max_line_chars,
            )

    def replaced(self, raw: bytes, n: int) -> str:
        """Line ``n``'s undecodable ``raw`` with U+FFFD for the bad bytes, counted (a warning for the first)."""
        if self.owned:
            self.stats.undecodable_lines += 1
            if not self.warned_decode:
                self.warned_decode = True
                logger.warning(
                    "%s:%d: bytes that are not valid %s were replaced with U+FFFD (counted in undecodable_lines); "
                    "if the file is Latin-1, pass --encoding latin-1",
                    self.path,
                    self.where(n),
                    self.encoding,
                )
        return raw.decode(self.encoding, "replace")
