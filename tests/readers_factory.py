"""What the reader tests share: the reader fixtures folder, reading a whole file, and the original
generator's reading of a ``bert``-format file (the oracle of the ``bert`` reader)."""

from __future__ import annotations

from pathlib import Path

from bertprep.pipeline.readers import ReaderStats, read_documents

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "readers"

# Edge cases of the reference's line handling: \r\n, \r, \x0b, \x1c and \u2028 inside a line (not line
# breaks), a line of non-breaking spaces (a document break), two blank lines in a row (an empty document).
BERT_EDGE = (
    "\ufeffFirst sentence.\r\n"
    "Has a\rcarriage return and a \x0bvertical tab.\n"
    "Has a\u2028line separator and \x1c file separator.  \n"
    "\u00a0\u00a0\u00a0\n"
    "Second document.\n"
    "\n"
    "\n"
    "Third document, one sentence.\n"
    "\n"
    "\t Fourth\tdocument. \n"
    "Last line without newline."
)


def read_all(path, input_format="auto", **kw):
    stats = kw.pop("stats", None) or ReaderStats()
    return list(read_documents(str(path), input_format, stats=stats, **kw)), stats


def reference_bert_documents(path: Path) -> list[list[str]]:
    """The original generator's reading (create_pretraining_data.py): lines at \\n, strip, blank = break."""
    documents: list[list[str]] = [[]]
    for raw in path.read_bytes().split(b"\n"):
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            documents.append([])
        else:
            documents[-1].append(line)
    return [d for d in documents if d]
