"""Arrow shards and the manifest: instances -> Arrow, bucket files -> balanced shards, statistics.

Plain pyarrow/numpy, on two sides. What the pipeline's transforms call on its workers (the bucket files, the
shards, the vocab, the manifest, :func:`remove_tree` of the bucket files) goes through Beam's ``FileSystems``
(so ``gs://`` and ``s3://`` work): a Beam worker (Dataflow's, Dask's) has Beam's clients and the run's Beam
options, which Beam hands it, and no other. The manifest's write-then-rename there is ``core.atomic``'s, handed
Beam's file operations (:data:`BEAM_FILES`). What make-shards' driver does itself (:func:`existing_outputs`,
:func:`remove_stale_staging`) goes through ``core/storage.py``, as every command's own reads and writes do.
The bucket files are written by ``bucket_files.make_bucket_instances``, the shards and the manifest by the DoFns
of ``write.py``.

How shards are cut. Each bucket's instances are first written, in the bucket's own order, to a temporary
Arrow *stream* file ``<output>/.bertprep-tmp-<host>-<pid>-<run>/buckets/bucket-<key>.arrows``. When every
bucket is done, the buckets are ordered by key and the concatenated rows are cut into ``num_shards``
contiguous ranges whose sizes differ by at most one; each shard is written by one worker from the bucket
files its range overlaps, into the same staging folder, and moved into ``<output>`` with the manifest
only once the run has succeeded (``publish.publish``). This keeps the output byte-identical whatever the runner,
worker count or bundle order (rows
never pass through an unordered shuffle), keeps memory flat (a shard is streamed, not grouped), and
balances row counts for DDP ranks and loader workers. With one bucket the row order is the original
generator's output order.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from bertprep.core import atomic, schema, storage, strict_json

log = logging.getLogger(__name__)

DEFAULT_INSTANCES_PER_SHARD = 50_000
ROWS_PER_RECORD_BATCH = 4096
#: The kind of a make-shards staging folder (``atomic.staging_name``), and the start of its name.
STAGING_KIND = "tmp"
TMP_PREFIX = f"{atomic.STAGING_PREFIX}{STAGING_KIND}-"
#: The staging folder's subfolder for the temporary bucket files (``instances/bucket_files.py`` writes them,
#: ``write.py`` cuts them into shards and deletes them).
BUCKETS_DIR = "buckets"
VOCAB_NAME = "vocab.txt"
#: Every vocab file a shard directory may hold (``schema.vocab_file_names``: a BPE / Unigram tokenizer's).
VOCAB_NAMES = (VOCAB_NAME, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class _HashingWriter(io.RawIOBase):
    """A write-only stream that forwards to ``sink`` and keeps a sha256 and byte count of what passed."""

    def __init__(self, sink):
        self.sink = sink
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        b = bytes(b)
        self.digest.update(b)
        self.size += len(b)
        self.sink.write(b)
        return len(b)


def write_bucket_file(
    path: str,
    rows: pa.Table | Iterable[pa.RecordBatch],
    vocab_size: int,
    objective: str = "nsp",
    word_ids: bool = False,
) -> int:
    """Write one bucket's rows (a table or record batches of :func:`schema.shard_schema` of ``objective``) to
    a temporary Arrow stream file on any Beam filesystem; returns the number of rows written."""
    arrow_schema = schema.shard_schema(vocab_size, objective, word_ids)
    written = 0
    atomic.check_staging_alive(path)
    with FileSystems.create(path) as f, pa.ipc.new_stream(pa.PythonFile(f, mode="w"), arrow_schema) as writer:
        batches = rows.to_batches() if isinstance(rows, pa.Table) else rows
        for batch in batches:
            writer.write_table(pa.Table.from_batches([batch], schema=arrow_schema), max_chunksize=ROWS_PER_RECORD_BATCH)
            written += batch.num_rows
    return written


def read_bucket_rows(path: str, start: int, stop: int) -> Iterator[pa.RecordBatch]:
    """Record batches of rows ``[start, stop)`` of a bucket stream file, streamed."""
    seen = 0
    with FileSystems.open(path) as f:
        reader = pa.ipc.open_stream(pa.PythonFile(f, mode="r"))
        for batch in reader:
            lo, hi = seen, seen + batch.num_rows
            seen = hi
            if hi <= start:
                continue
            if lo >= stop:
                break
            yield batch.slice(max(start - lo, 0), min(stop, hi) - max(start, lo))


@dataclass(frozen=True)
class ShardPlan:
    """Shard ``index`` of ``count``: the slices ``(bucket_path, start, stop)`` it is made of, in order."""

    index: int
    count: int
    rows: int
    slices: tuple[tuple[str, int, int], ...]


def choose_num_shards(total_rows: int, requested: int) -> int:
    """``requested`` if set, else one shard per ~50,000 instances (at least one)."""
    if requested > 0:
        return requested
    return max(1, math.ceil(total_rows / DEFAULT_INSTANCES_PER_SHARD))


def plan_shards(buckets: Iterable[tuple[int, str, int]], num_shards: int) -> list[ShardPlan]:
    """Cut the buckets' rows, in bucket-key order, into ``num_shards`` contiguous balanced ranges.

    Args:
        buckets: ``(bucket_key, path, rows)`` for every bucket, any order.
        num_shards: number of shards (>= 1). More shards than rows gives some empty shards, so callers
            should cap it (``make-shards`` refuses a run that makes no instance at all).

    Returns:
        One :class:`ShardPlan` per shard; shard sizes differ by at most one row.
    """
    ordered = sorted(buckets)
    total = sum(rows for _, _, rows in ordered)
    plans = []
    cursor = 0  # index into ordered
    offset_in_bucket = 0
    for s in range(num_shards):
        lo = s * total // num_shards
        hi = (s + 1) * total // num_shards
        need = hi - lo
        slices = []
        while need > 0:
            _, path, rows = ordered[cursor]
            take = min(need, rows - offset_in_bucket)
            if take > 0:
                slices.append((path, offset_in_bucket, offset_in_bucket + take))
            need -= take
            offset_in_bucket += take
            if offset_in_bucket >= rows:
                cursor += 1
                offset_in_bucket = 0
        plans.append(ShardPlan(s, num_shards, hi - lo, tuple(slices)))
    return plans


def write_shard(
    output_dir: str, plan: ShardPlan, vocab_size: int, objective: str = "nsp", word_ids: bool = False
) -> dict[str, Any]:
    """Write one shard (Arrow IPC file format) from its bucket slices; returns its manifest entry."""
    arrow_schema = schema.shard_schema(vocab_size, objective, word_ids)
    name = schema.shard_name(plan.index, plan.count)
    path = FileSystems.join(output_dir, name)
    rows = 0
    tokens = 0
    atomic.check_staging_alive(path)
    with FileSystems.create(path) as f:
        hashing = _HashingWriter(f)
        sink = pa.PythonFile(hashing, mode="w")
        with pa.ipc.new_file(sink, arrow_schema) as writer:
            pending: list[pa.RecordBatch] = []
            pending_rows = 0

            def flush(force: bool) -> None:
                nonlocal pending, pending_rows
                while pending_rows >= ROWS_PER_RECORD_BATCH or (force and pending_rows):
                    table = pa.Table.from_batches(pending, schema=arrow_schema).combine_chunks()
                    take = min(ROWS_PER_RECORD_BATCH, pending_rows)
                    writer.write_batch(table.slice(0, take).to_batches()[0])
                    rest = table.slice(take)
                    pending = rest.to_batches() if rest.num_rows else []
                    pending_rows -= take

            for bucket_path, start, stop in plan.slices:
                for batch in read_bucket_rows(bucket_path, start, stop):
                    rows += batch.num_rows
                    tokens += int(pc.sum(pc.list_value_length(batch.column(0))).as_py() or 0)
                    pending.append(batch)
                    pending_rows += batch.num_rows
                    flush(False)
            flush(True)
    return {"file": name, "rows": rows, "tokens": tokens, "sha256": hashing.digest.hexdigest(), "bytes": hashing.size}


# ---------------------------------------------------------------------------------------------- stats


def merge_counts(a: Any, b: Any) -> Any:
    """Sum two count structures: numbers add, dicts merge key by key (recursively)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merge_counts(out.get(k), v)
        return out
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    raise TypeError(f"cannot merge {type(a).__name__} with {type(b).__name__}")


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole else None


def summarize_statistics(counts: dict[str, Any]) -> dict[str, Any]:
    """Manifest ``statistics`` from the merged counters of readers, tokenizer and buckets.

    Returns a dict with: ``documents`` (read, used, skipped by reason), ``sentences``, ``instances``,
    ``not_next_share``, ``tokens``, ``masked`` (count, per token, share by kind [MASK]/random/kept),
    ``length_histogram`` (length -> instances) with its ``full_length_share``, ``truncated_share``,
    ``unk_rate`` (share of [UNK] among the corpus's word pieces), and reader/tokenizer details.

    ``counts["objective"]`` (absent: ``nsp``) changes the sentence-task figures: ``sop`` has ``swapped_share``
    and ``one_segment_chunks`` (merged, skipped, tokens skipped) instead of the NotNext ones; ``none`` has
    ``document_separators`` and neither.
    """
    reader = counts.get("reader", {}) or {}
    inst = counts.get("instances", {}) or {}
    out = {
        **_corpus_figures(reader, counts.get("tokenizer", {}) or {}),
        **_instance_figures(inst, counts.get("max_seq_length")),
        "buckets": counts.get("buckets", 0),
        "formats": dict(sorted((reader.get("formats", {}) or {}).items())),
    }
    objective = counts.get("objective", "nsp")
    return out if objective == "nsp" else _with_sentence_task(out, objective, inst)


def _corpus_figures(reader: dict[str, Any], tok: dict[str, Any]) -> dict[str, Any]:
    """The statistics of what was read and tokenized: files, documents, sentences, skipped lines, word pieces."""
    skipped = dict(reader.get("skipped_documents", {}) or {})
    if tok.get("empty_documents"):
        skipped["empty_after_tokenization"] = skipped.get("empty_after_tokenization", 0) + tok["empty_documents"]
    # The reader's counters are merged in the order the workers finish (merge_counts): sorted, so that the
    # manifest's bytes do not depend on timing (statistics.formats of inputs in mixed formats did).
    skipped = dict(sorted(skipped.items()))
    return {
        "files": reader.get("files", 0),
        "documents": {
            "read": reader.get("documents", 0),
            "used": tok.get("documents", 0) - tok.get("empty_documents", 0),
            "skipped": skipped,
            "one_sentence": tok.get("one_sentence_documents", 0),
        },
        "sentences": tok.get("sentences", 0),
        "lines_skipped": dict(sorted((reader.get("skipped_lines", {}) or {}).items())),
        "undecodable_lines": reader.get("undecodable_lines", 0),
        "sentences_dropped_empty_after_tokenization": tok.get("empty_sentences", 0),
        "corpus_word_pieces": tok.get("tokens", 0),
        "unk_rate": _share(tok.get("unk_tokens", 0), tok.get("tokens", 0)),
    }


def _instance_figures(inst: dict[str, Any], max_len: int | None) -> dict[str, Any]:
    """The statistics of the instances made: count, NotNext share, tokens, masking, truncation, lengths."""
    n_inst = inst.get("instances", 0)
    masked = inst.get("masked", 0)
    hist = {int(k): v for k, v in (inst.get("length_histogram") or {}).items()}
    return {
        "instances": n_inst,
        "not_next_share": _share(inst.get("not_next", 0), n_inst),
        "not_next_same_document": inst.get("same_document_not_next", 0),
        "tokens": inst.get("tokens", 0),
        "mean_length": _share(inst.get("tokens", 0), n_inst),
        "masked": {
            "positions": masked,
            "per_token": _share(masked, inst.get("tokens", 0)),
            "per_instance": _share(masked, n_inst),
            "mask_share": _share(inst.get("masked_as_mask", 0), masked),
            "random_share": _share(inst.get("masked_as_random", 0), masked),
            "kept_share": _share(inst.get("masked_as_kept", 0), masked),
        },
        "truncated_share": _share(inst.get("truncated", 0), n_inst),
        "full_length_share": _share(hist.get(max_len, 0), n_inst) if max_len else None,
        "length_histogram": {str(k): hist[k] for k in sorted(hist)},
    }


def _with_sentence_task(out: dict[str, Any], objective: str, inst: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the sentence-task figures of ``objective`` (``sop``, ``none``) where the NotNext ones were."""
    figures = list(out.items())
    at = [k for k, _ in figures].index("not_next_share")
    task: dict[str, Any] = {"objective": objective}
    if objective == "sop":
        task["swapped_share"] = out["not_next_share"]
        task["one_segment_chunks"] = {
            "merged": inst.get("one_segment_chunks_merged", 0),
            "skipped": inst.get("one_segment_chunks_skipped", 0),
            "tokens_skipped": inst.get("one_segment_tokens_skipped", 0),
        }
    else:
        task["document_separators"] = inst.get("document_separators", 0)
    rest = [(k, v) for k, v in figures[at:] if k not in ("not_next_share", "not_next_same_document")]
    return dict(figures[:at] + list(task.items()) + rest)


def write_manifest(output_dir: str, manifest: dict[str, Any]) -> str:
    """Write ``manifest.json`` (the commit marker) through a temporary name and a rename (``atomic.write_bytes``
    over Beam's ``FileSystems``: on ``gs://`` a rename is a copy, atomic per object, not POSIX)."""
    path = FileSystems.join(output_dir, schema.MANIFEST_NAME)
    atomic.write_bytes(
        path, (strict_json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8"), BEAM_FILES
    )
    return path


def copy_vocab(output_dir: str, tokens: Sequence[str], files: dict[str, str] | None = None) -> None:
    """Write the vocab beside the shards: ``files`` (name -> text: a BPE / Unigram tokenizer's ``tokenizer.json``
    and config files) when given, else ``vocab.txt`` (one token per line, line number = id)."""
    for name, text in (files or {"vocab.txt": "\n".join(tokens) + "\n"}).items():
        atomic.check_staging_alive(FileSystems.join(output_dir, name))
        with FileSystems.create(FileSystems.join(output_dir, name)) as f:
            f.write(text.encode("utf-8"))


def is_output_name(name: str) -> bool:
    """Whether a file name is one make-shards writes (and ``--overwrite`` replaces) in its output directory:
    ``shard-NNNNN-of-MMMMM.arrow``, ``manifest.json`` (or its ``.tmp``) or a vocab file (:data:`VOCAB_NAMES`)."""
    return bool(schema.SHARD_RE.match(name)) or name in (
        schema.MANIFEST_NAME,
        schema.MANIFEST_NAME + ".tmp",
        *VOCAB_NAMES,
    )


def existing_outputs(output_dir: str) -> list[str]:
    """The paths of the shard files, manifest (or its ``.tmp``) and vocab files (:func:`is_output_name`) directly in
    ``output_dir``, sorted; empty when it does not exist. Folders are not listed (a staging folder, an MDS shard's
    sub-folder). Driver-side: through ``core/storage.py``.

    Raises:
        storage.StorageError: the store cannot be listed (one line).
    """
    return [path for path in storage.list_files(output_dir) if is_output_name(os.path.basename(path))]


def remove_tree(path: str) -> None:
    """Delete the folder ``path`` and everything under it, on any Beam filesystem: the pipeline's own clean-up
    inside its transforms (the bucket files, the Megatron parts), on its workers. The driver's is
    ``storage.remove_tree``.

    On object stores (``gs://``, ``s3://``) a folder is only a name prefix: ``FileSystems.exists`` is False
    for it and ``FileSystems.delete`` of the bare prefix deletes nothing, so its objects are matched and
    deleted.
    """
    if FileSystems.exists(path):
        FileSystems.delete([path])
        return
    matched = FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list
    if matched:
        FileSystems.delete([m.path for m in matched])


# ------------------------------------------------------------------------------- staging and the swap
#
# A run writes everything into a staging folder inside the output directory, ``.bertprep-tmp-<host>-<pid>-<run>``
# (hidden: globs and directory inputs skip it): bucket files under ``buckets/``, then the shards, vocab.txt
# and manifest.json. Only when the pipeline has succeeded does ``publish.publish`` move them into place,
# so a failed or killed run never touches an earlier run's output; a killed run's staging folder is
# removed by the next successful run in the same directory (:func:`remove_stale_staging`).


class _BeamFiles(atomic.LocalFiles):
    """``atomic.write_bytes``' file operations over Beam's ``FileSystems`` (local disks, ``gs://`` and the other
    Beam file systems): what :func:`write_manifest`, which runs in the pipeline's last transform on a worker,
    hands it."""

    @staticmethod
    def create(path: str):
        return FileSystems.create(path)

    @staticmethod
    def rename(src: str, dst: str) -> None:
        FileSystems.rename([src], [dst])

    @staticmethod
    def delete(path: str) -> None:
        FileSystems.delete([path])

    @staticmethod
    def exists(path: str) -> bool:
        return FileSystems.exists(path)

    @staticmethod
    def join(directory: str, name: str) -> str:
        return FileSystems.join(directory, name)


#: The file operations of the shard store's workers, for ``core.atomic``.
BEAM_FILES = _BeamFiles


def staging_dir_name() -> str:
    """A new staging folder name, ``.bertprep-tmp-<host>-<pid>-<8 hex>`` (``atomic.staging_name``): host and
    process id say whether the run that made it is still alive (``atomic.is_stale_staging``)."""
    return atomic.staging_name(STAGING_KIND)


def remove_stale_staging(output_dir: str, keep: str = "") -> list[str]:
    """Delete the staging folders of dead runs in ``output_dir`` (``atomic.remove_stale_staging`` over
    ``storage.Files``: local folders and stores alike), except ``keep``; returns their paths. Failures to delete
    are logged, not raised."""
    removed = atomic.remove_stale_staging(output_dir, STAGING_KIND, keep=keep, files=storage.Files)
    for path in removed:
        log.info("removed %s, left by an earlier run that was stopped", path)
    return removed


def os_error_message(err: OSError, doing: str) -> str:
    """One line for an ``OSError`` met while ``doing`` something (e.g. "writing shard X"), with what to do."""
    reason = err.strerror or str(err) or type(err).__name__
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"{reason.lower().rstrip('.')} while {doing}; free some space (or choose another --output-dir) "
            "and run again: the previous output, if any, is untouched"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{reason.lower()} while {doing}; choose a writable --output-dir"
    where = f" ({err.filename})" if err.filename else ""
    return f"{reason}{where} while {doing}"
