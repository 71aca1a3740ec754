"""The local runner's shuffle of tokenized documents with a memory budget: documents beyond it go to disk.

Beam's local runner (``FnApiRunner``) keeps every element that crosses a stage boundary in its own process,
and the ``global`` pairing scope's ``GroupByKey`` of tokenized documents crosses one: its memory grew by about
5-7 MB per MB of text (``benchmarks/scale.md``). With a spill folder, :class:`Spiller` (used by
``transforms.TokenizeDocumentFn``) hands the runner each document inline while this process's share of the
budget lasts (``--memory-budget`` over the worker processes), then appends the rest to a file of its own in
the spill folder and hands the runner a small reference instead, a
:class:`~bertprep.pipeline.instances.bucket_files.SpilledDocument` (the document's id and word pieces, and its
file, offset and length there). ``transforms.CreateInstancesFn`` reads a bucket's spilled documents back
(:func:`load`) before it sorts them, so the buckets, and every byte of the shards, are the same whatever was
spilled: only where a document waits changes. The runners that shuffle out of memory themselves (Dask,
Dataflow) get no spill folder.

The spill folder is ``<staging folder>/spill/``: a failed or interrupted run's staging folder is removed whole
(``run.py``), and :func:`report` logs what a successful run spilled and removes the folder.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import shutil
import uuid
from collections.abc import Iterable
from typing import IO

from bertprep.core import atomic
from bertprep.pipeline.errors import MakeShardsError
from bertprep.pipeline.instances.bucket_files import SpilledDocument, TokenizedDocument

log = logging.getLogger(__name__)

#: The spill folder's name in a run's staging folder.
SPILL_DIR = "spill"

#: Documents inline in this process, per spill folder (one run's): bytes of word-piece ids and lengths.
_inline_bytes: dict[str, int] = {}


def spill_folder(staging_dir: str) -> str:
    """The spill folder of the run staged in ``staging_dir`` (a local folder)."""
    return os.path.join(staging_dir, SPILL_DIR)


def is_spilled(doc: TokenizedDocument | SpilledDocument) -> bool:
    """Whether ``doc`` is a spilled document's reference rather than the document."""
    return isinstance(doc, SpilledDocument)


class Spiller:
    """Hands documents on inline up to ``budget_bytes`` (this process's share, counted per ``folder`` over
    every instance in the process), then appends them to ``<folder>/<unique>.spill`` and hands on references.

    Raises (from :meth:`keep` and :meth:`flush`) ``MakeShardsError`` naming ``folder`` when a write fails
    (no space left, no permission)."""

    def __init__(self, folder: str, budget_bytes: int):
        self.folder = folder
        self.budget_bytes = budget_bytes
        self._file: IO[bytes] | None = None
        self._path = ""
        self._offset = 0

    def keep(self, doc: TokenizedDocument) -> TokenizedDocument | SpilledDocument:
        """``doc`` itself, or its spilled reference once this process's inline documents fill the budget."""
        size = len(doc.input_ids) + len(doc.sentence_lengths)
        inline = _inline_bytes.get(self.folder, 0)
        if inline + size <= self.budget_bytes:
            _inline_bytes[self.folder] = inline + size
            return doc
        payload = pickle.dumps(
            (doc.input_ids, doc.sentence_lengths, doc.dropped_sentences, doc.word_starts),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        if self._file is None:
            atomic.check_staging_alive(self.folder)  # (StagingGone: not a full disk, the run has ended)
        try:
            if self._file is None:
                os.makedirs(self.folder, exist_ok=True)
                self._path = os.path.join(self.folder, f"{uuid.uuid4().hex}.spill")
                self._file = open(self._path, "wb")  # noqa: SIM115 - closed in close(), flushed per bundle
            self._file.write(payload)
        except OSError as err:
            raise _write_error(self.folder, err) from err
        ref = SpilledDocument(
            doc.file_index, doc.ordinal, len(doc.input_ids) // 4, self._path, self._offset, len(payload)
        )
        self._offset += len(payload)
        return ref

    def flush(self) -> None:
        """Make the documents spilled so far readable by other processes (at the end of each bundle)."""
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as err:
                raise _write_error(self.folder, err) from err

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _write_error(folder: str, err: OSError) -> MakeShardsError:
    reason = err.strerror or str(err)
    return MakeShardsError(
        f"bertprep: cannot spill tokenized documents to {folder} ({reason}); free space there, choose another "
        "--output-dir (the spill folder is inside it), or raise --memory-budget"
    )


def load(docs: Iterable[TokenizedDocument | SpilledDocument]) -> list[TokenizedDocument]:
    """``docs`` with each spilled reference replaced by its document, read back from its spill file (in file
    and offset order, each file opened once); the others as they are. Order is not kept."""
    docs = list(docs)
    kept = [d for d in docs if not isinstance(d, SpilledDocument)]
    spilled = sorted((d for d in docs if isinstance(d, SpilledDocument)), key=lambda d: (d.spill_file, d.offset))
    for path, refs in itertools.groupby(spilled, key=lambda d: d.spill_file):
        with open(path, "rb") as f:
            for ref in refs:
                f.seek(ref.offset)
                kept.append(TokenizedDocument(ref.file_index, ref.ordinal, *pickle.loads(f.read(ref.length))))
    return kept


def report(staging_dir: str, budget_mb: int) -> int:
    """Log how much the run spilled and where, remove the spill folder, and return the bytes spilled."""
    folder = spill_folder(staging_dir)
    if not os.path.isdir(folder):
        return 0
    spilled = sum(entry.stat().st_size for entry in os.scandir(folder))
    log.info(
        "spilled %.1f MB of tokenized documents to %s (beyond --memory-budget %d MB)", spilled / 1e6, folder, budget_mb
    )
    shutil.rmtree(folder, ignore_errors=True)
    return spilled
