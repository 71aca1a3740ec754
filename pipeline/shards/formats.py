"""The output formats of make-shards besides its Arrow shards (``--output-format``), written through each
trainer's own library, and the dataset card that lets Hugging Face ``datasets`` load the Arrow shards.

- ``mds``: MosaicML Streaming's MDS (``streaming.MDSWriter``, the format Composer trainers such as ModernBERT's
  and MosaicBERT's read): each shard of the run becomes one MDS sub-folder (its own ``index.json`` and
  ``shard.NNNNN.mds`` files) holding the same rows in the same order as the Arrow shard would, and the
  sub-folders' indexes are merged into the top ``index.json`` by the library's ``merge_index``, so that
  ``StreamingDataset(local=OUTPUT_DIR)`` or ``StreamingDataset(remote="gs://...")`` reads the whole set
  (:func:`write_mds_shard`, :func:`merge_mds_index`).
- ``megatron``: Megatron-LM's indexed dataset (``megatron.core.datasets.indexed_dataset``'s
  ``IndexedDatasetBuilder``: ``text_sentence.bin`` and ``.idx``), one sequence per sentence and a document
  boundary after each document, as Megatron's ``tools/preprocess_data.py --split-sentences`` writes for its
  BERT dataset (``megatron_dataset.py``).
- ``arrow``: the shards as they are; :func:`dataset_card` writes the ``README.md`` whose YAML ``configs`` name
  the splits, so that ``datasets.load_dataset(OUTPUT_DIR)`` loads them with no arguments.

The libraries are optional (extras ``bertprep[mds]``, ``bertprep[megatron]``): :func:`check_output_format`
refuses a format whose library is missing, before any work. Files are written to a local temporary folder by
the library, then copied through Beam's ``FileSystems`` into the staging folder (local, ``gs://``, ``s3://``),
with their sha256 and size for the manifest: that runs in the pipeline's transforms, on its workers, which have
Beam's clients. What make-shards' driver asks of an output folder (:func:`read_manifest_if_any`,
:func:`foreign_files`) goes through ``core/storage.py``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import types
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from bertprep.core import atomic, schema, storage
from bertprep.pipeline.shards import store

#: format -> (the module it needs, the extra that installs it, the library's PyPI name).
LIBRARIES = {
    "mds": ("streaming", "mds", "mosaicml-streaming"),
    "megatron": ("megatron.core.datasets.indexed_dataset", "megatron", "megatron-core"),
}
#: The merged MDS index at the top of an ``mds`` output directory (the library's ``get_index_basename()``).
MDS_INDEX = "index.json"
#: The prefix of the Megatron files (``<prefix>.bin``, ``<prefix>.idx``): preprocess_data.py's
#: ``{output_prefix}_{json_key}_{level}`` with json key ``text`` and level ``sentence``, without a user prefix.
MEGATRON_PREFIX = "text_sentence"
MEGATRON_FILES = (MEGATRON_PREFIX + ".bin", MEGATRON_PREFIX + ".idx")
#: The Hugging Face dataset card beside the Arrow shards.
DATASET_CARD = "README.md"
#: The split the held-out set (``eval/``) is in the dataset card: the name ``datasets`` gives it.
EVAL_SPLIT = "validation"
#: Names in an output directory that another tool's files may have too: make-shards counts them as its own
#: only where the directory's manifest records them (:func:`recorded_files`).
SHARED_NAMES = (MDS_INDEX, DATASET_CARD, *MEGATRON_FILES)


class FormatError(ValueError):
    """A format that cannot be written here (its library is missing, the vocab does not fit): one line."""


def check_output_format(output_format: str, vocab_size: int, mds_compression=None, mds_hashes=()) -> None:
    """Refuse, before any work, a format whose library is not installed or that cannot hold the vocab's ids.

    Raises:
        FormatError: the line names the extra to install or the limit.
    """
    if output_format not in LIBRARIES:
        return
    module, extra, name = LIBRARIES[output_format]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise FormatError(
            f"--output-format {output_format} writes through the {name} library, which is not installed: "
            f"pip install 'bertprep[{extra}]'"
        )
    if output_format == "megatron":
        _check_megatron_vocab(vocab_size)
    elif output_format == "mds":
        _check_mds_options(vocab_size, mds_compression, mds_hashes)


def _check_megatron_vocab(vocab_size: int) -> None:
    DType = _indexed_dataset("DType")

    dtype = DType.optimal_dtype(vocab_size)
    if vocab_size - 1 > np.iinfo(dtype).max:
        raise FormatError(
            f"--output-format megatron stores token ids as {np.dtype(dtype).name} (megatron.core's "
            f"DType.optimal_dtype): the largest id of a vocab of {vocab_size:,} entries does not fit; use "
            "--output-format arrow or mds"
        )


def _check_mds_options(vocab_size: int, compression: str | None, hashes) -> None:
    streaming = import_streaming()
    if vocab_size > 2**32:
        raise FormatError(f"--output-format mds stores ids as uint32 at most: a vocab of {vocab_size:,} does not fit")
    from streaming.base.compression import get_compressions, is_compression
    from streaming.base.hashing import get_hashes, is_hash

    if compression and not is_compression(compression):
        raise FormatError(
            f"--mds-compression {compression!r} is not one of {streaming.__name__}'s: "
            f"{', '.join(sorted(get_compressions()))}"
        )
    bad = [h for h in hashes if not is_hash(h)]
    if bad:
        raise FormatError(f"--mds-hashes {bad[0]!r} is not one of the library's: {', '.join(sorted(get_hashes()))}")


def import_streaming() -> types.ModuleType:
    """The ``streaming`` package (mosaicml-streaming), or its ``streaming.base`` where the package cannot load.

    A workaround of an upstream packaging issue: ``streaming/__init__.py`` (0.13.0) imports ``streaming.vision``,
    which imports ``torchvision``, although MDS writing and reading need none of it (mosaicml/streaming lists
    torchvision as a hard requirement). With a CPU build of torch (PyTorch's CPU wheels) the torchvision wheel
    from PyPI, built against CUDA torch, fails to load (``RuntimeError: operator torchvision::nms does not
    exist``). Then ``streaming.base``, which holds ``MDSWriter``, ``StreamingDataset`` and ``merge_index``, is
    loaded under an empty ``streaming`` package. Where ``import streaming`` works this changes nothing.
    """
    loaded = sys.modules.get("streaming")
    if loaded is not None:  # the package, or the empty one of an earlier call
        return loaded if hasattr(loaded, "MDSWriter") else importlib.import_module("streaming.base")
    try:
        import streaming

        return streaming
    except (ImportError, RuntimeError):  # torchvision missing, or built for another torch
        for name in [n for n in sys.modules if n == "streaming" or n.startswith("streaming.")]:
            del sys.modules[name]
    spec = importlib.util.find_spec("streaming")
    if spec is None or spec.submodule_search_locations is None:
        raise FormatError("the mosaicml-streaming library is not installed: pip install 'bertprep[mds]'")
    package = types.ModuleType("streaming")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["streaming"] = package
    return importlib.import_module("streaming.base")


def _indexed_dataset(*names: str) -> Any:
    """``names`` of ``megatron.core.datasets.indexed_dataset``, imported without the UserWarnings that importing
    ``megatron.core`` prints where NVIDIA's Transformer Engine and Apex are not installed (none of it is used to
    write or read an indexed dataset)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex", category=UserWarning)
        module = importlib.import_module("megatron.core.datasets.indexed_dataset")
    found = tuple(getattr(module, name) for name in names)
    return found if len(found) > 1 else found[0]


# ------------------------------------------------------------------------------------------------- MDS


def mds_columns(vocab_size: int, objective: str = "nsp", word_ids: bool = False, masked: bool = True) -> dict[str, str]:
    """The MDS columns (name -> MDS encoding) of the shard columns (:func:`schema.columns`), in that order, then
    ``len`` (the row's number of tokens): ids as ``ndarray:uint16`` where the vocab fits, else ``ndarray:uint32``
    (:func:`schema.id_type_for_vocab`), as ModernBERT's loader reads pre-tokenized ``input_ids``. Without
    ``masked`` (dynamic masking: the trainer masks) ``masked_lm_positions`` and ``masked_lm_ids``, always empty,
    are left out (MDS cannot encode an empty array)."""
    ids = "ndarray:" + str(schema.id_type_for_vocab(vocab_size))
    encodings = {
        "input_ids": ids,
        "token_type_ids": "ndarray:uint8",
        "masked_lm_positions": "ndarray:uint16",
        "masked_lm_ids": ids,
        "next_sentence_label": "uint8",
        "word_ids": "ndarray:int32",
    }
    out = {name: encodings[name] for name in schema.columns(objective, word_ids)}
    if not masked:
        del out["masked_lm_positions"], out["masked_lm_ids"]
    out["len"] = "int32"
    return out


def mds_folder_name(index: int, count: int) -> str:
    """The MDS sub-folder of shard ``index`` of ``count``: the Arrow shard's name without ``.arrow``."""
    return schema.shard_name(index, count).removesuffix(".arrow")


def _mds_samples(plan: store.ShardPlan, columns: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The rows of a shard plan as MDS samples (name -> numpy array or int), in the shard's order."""
    for bucket_path, start, stop in plan.slices:
        for batch in store.read_bucket_rows(bucket_path, start, stop):
            lists = {}
            for name, encoding in columns.items():
                if encoding.startswith("ndarray:"):
                    column = batch.column(batch.schema.get_field_index(name))
                    offsets = schema.numpy_view(column.offsets)
                    lists[name] = (schema.numpy_view(column.values), offsets)
            labels = None
            if "next_sentence_label" in columns:
                labels = schema.numpy_view(batch.column(batch.schema.get_field_index("next_sentence_label")))
            for r in range(batch.num_rows):
                sample: dict[str, Any] = {n: v[o[r] : o[r + 1]] for n, (v, o) in lists.items()}
                if labels is not None:
                    sample["next_sentence_label"] = int(labels[r])
                sample["len"] = len(sample["input_ids"])
                yield sample


def write_mds_shard(
    output_dir: str,
    plan: store.ShardPlan,
    vocab_size: int,
    objective: str = "nsp",
    word_ids: bool = False,
    compression: str | None = None,
    hashes: tuple[str, ...] = (),
    masked: bool = True,
) -> dict[str, Any]:
    """Write one shard's rows as an MDS sub-folder of ``output_dir`` (any Beam file system) with the library's
    ``MDSWriter`` (columns: :func:`mds_columns`); returns its manifest entry: ``file`` (the sub-folder),
    ``rows``, ``tokens``, ``files`` (each file's path relative to ``output_dir``, ``bytes`` and ``sha256``)."""
    streaming = import_streaming()
    columns = mds_columns(vocab_size, objective, word_ids, masked)
    folder = mds_folder_name(plan.index, plan.count)
    rows = tokens = 0
    with tempfile.TemporaryDirectory(prefix="bertprep-mds-") as local:
        out = os.path.join(local, folder)
        with (
            _library_logs_quiet(),
            streaming.MDSWriter(
                out=out, columns=columns, compression=compression, hashes=list(hashes) or None
            ) as writer,
        ):
            for sample in _mds_samples(plan, columns):
                writer.write(sample)
                rows += 1
                tokens += sample["len"]
        files = [_copy_out(os.path.join(out, name), output_dir, f"{folder}/{name}") for name in sorted(os.listdir(out))]
    return {"file": folder, "rows": rows, "tokens": tokens, "files": files}


def _copy_out(local_path: str, output_dir: str, name: str) -> dict[str, Any]:
    """Copy a local file to ``output_dir/name`` (any Beam file system); its manifest entry (file, bytes, sha256)."""
    path = FileSystems.join(output_dir, name)
    atomic.check_staging_alive(path)
    digest = hashlib.sha256()
    size = 0
    with open(local_path, "rb") as src, FileSystems.create(path) as dst:
        while block := src.read(1 << 20):
            digest.update(block)
            size += len(block)
            dst.write(block)
    return {"file": name, "bytes": size, "sha256": digest.hexdigest()}


def merge_mds_index(output_dir: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the MDS sub-folders' ``index.json`` (``entries``: the shards' manifest entries, in shard order) into
    ``output_dir/index.json`` with the library's ``merge_index``; returns its manifest entry."""
    import_streaming()
    from streaming.base.util import merge_index

    with tempfile.TemporaryDirectory(prefix="bertprep-mds-index-") as local:
        parts = []
        for entry in entries:
            os.makedirs(os.path.join(local, entry["file"]))
            part = os.path.join(local, entry["file"], MDS_INDEX)
            with FileSystems.open(FileSystems.join(output_dir, entry["file"], MDS_INDEX)) as src, open(part, "wb") as f:
                shutil.copyfileobj(src, f)
            parts.append(part)
        merged = os.path.join(local, "merged")
        with _library_logs_quiet():
            merge_index(parts, merged, keep_local=True)
        return _copy_out(os.path.join(merged, MDS_INDEX), output_dir, MDS_INDEX)


# -------------------------------------------------------------------------------------------- Megatron


def write_megatron_part(local_prefix: str, documents: Sequence[Sequence[Any]], vocab_size: int) -> int:
    """Write ``documents`` (each a list of sentences, each a list or array of token ids) with megatron.core's
    ``IndexedDatasetBuilder`` to ``local_prefix.bin``/``.idx``: one sequence per sentence and a document
    boundary after each document (``add_document``, as preprocess_data.py --split-sentences); returns the
    number of sentences."""
    DType, IndexedDatasetBuilder, get_bin_path, get_idx_path = _indexed_dataset(
        "DType", "IndexedDatasetBuilder", "get_bin_path", "get_idx_path"
    )

    builder = IndexedDatasetBuilder(get_bin_path(local_prefix), dtype=DType.optimal_dtype(vocab_size))
    sentences = 0
    dtype = DType.optimal_dtype(vocab_size)
    for document in documents:
        builder.add_document(np.concatenate([np.asarray(s, dtype=dtype) for s in document]), [len(s) for s in document])
        sentences += len(document)
    builder.finalize(get_idx_path(local_prefix))
    return sentences


#: The staging sub-folder of the Megatron parts (one per input file) before they are merged.
MEGATRON_PARTS_DIR = "megatron-parts"


def write_megatron_documents(
    output_dir: str, part: str, documents: list[tuple[bytes, bytes]], vocab_size: int
) -> dict[str, Any]:
    """Write one part (``documents``: each its ids as uint32 bytes and its sentence lengths as int32 bytes, in
    order) as ``output_dir/megatron-parts/<part>.bin``/``.idx`` (any Beam file system); returns its entry:
    ``part`` (the prefix relative to ``output_dir``), ``documents``, ``sentences``, ``tokens``."""
    docs = [
        [ids[a:b] for a, b in zip(np.cumsum(lengths) - lengths, np.cumsum(lengths), strict=True)]
        for ids, lengths in ((np.frombuffer(i, np.uint32), np.frombuffer(n, np.int32)) for i, n in documents)
    ]
    docs = [d for d in docs if d]
    prefix = f"{MEGATRON_PARTS_DIR}/{part}"
    with tempfile.TemporaryDirectory(prefix="bertprep-megatron-") as local:
        sentences = write_megatron_part(os.path.join(local, "part"), docs, vocab_size)
        for suffix in (".bin", ".idx"):
            _copy_out(os.path.join(local, "part" + suffix), output_dir, prefix + suffix)
    tokens = sum(len(s) for d in docs for s in d)
    return {"part": prefix, "documents": len(docs), "sentences": sentences, "tokens": tokens}


def megatron_manifest(output_dir: str, parts: list[dict[str, Any]], vocab_size: int) -> dict[str, Any]:
    """Merge the parts (entries of :func:`write_megatron_documents`, any order: merged in ``key`` order) into
    ``output_dir/text_sentence.bin``/``.idx``, delete them, and return the manifest's entries: ``output_format``,
    ``format_files`` and ``megatron`` (prefix, documents, sentences, tokens, dtype)."""
    DType = _indexed_dataset("DType")

    ordered = sorted(parts, key=lambda p: p["key"])
    files = merge_megatron_parts(output_dir, [p["part"] for p in ordered], vocab_size)
    store.remove_tree(FileSystems.join(output_dir, MEGATRON_PARTS_DIR))
    summary = {
        "prefix": MEGATRON_PREFIX,
        "documents": sum(p["documents"] for p in parts),
        "sentences": sum(p["sentences"] for p in parts),
        "tokens": sum(p["tokens"] for p in parts),
        "dtype": np.dtype(DType.optimal_dtype(vocab_size)).name,
    }
    return {"output_format": "megatron", "format_files": files, "megatron": summary}


@contextlib.contextmanager
def collections_skip_older_objects() -> Iterator[None]:
    """Within the block, a garbage collection walks only the objects made in it (``gc.freeze``: those that
    existed before are moved to the permanent generation; ``gc.unfreeze`` moves them back afterwards).

    A workaround of megatron-core's ``IndexedDatasetBuilder.add_index`` (0.16.1, ``indexed_dataset.py``),
    which calls ``gc.collect()`` after each part it merges, to free that part's index: a full collection walks
    every object of the process (Beam's, torch's and pyarrow's modules: about 1 s each on the development
    machine), so merging the parts of N input files cost N seconds. The part's index, made inside the block,
    is still collected. Where objects were frozen already (a worker forked by ``beam/warm_workers.py``, whose
    imports are), they stay frozen, and so do those frozen here: unfreezing would undo that worker's freeze (it
    ends with its pipeline, of which this merge is the last step)."""
    frozen_already = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_already:
            gc.unfreeze()


def merge_megatron_parts(output_dir: str, parts: list[str], vocab_size: int) -> list[dict[str, Any]]:
    """Concatenate the part datasets ``parts`` (prefixes in ``output_dir``, in order) into
    ``output_dir/text_sentence.bin``/``.idx`` with ``IndexedDatasetBuilder.add_index`` (as Megatron's
    tools/merge_datasets.py does); returns the two files' manifest entries."""
    DType, IndexedDatasetBuilder, get_bin_path, get_idx_path = _indexed_dataset(
        "DType", "IndexedDatasetBuilder", "get_bin_path", "get_idx_path"
    )

    with tempfile.TemporaryDirectory(prefix="bertprep-megatron-") as local:
        merged = os.path.join(local, MEGATRON_PREFIX)
        builder = IndexedDatasetBuilder(get_bin_path(merged), dtype=DType.optimal_dtype(vocab_size))
        for i, part in enumerate(parts):
            prefix = os.path.join(local, f"part-{i:05d}")
            for path in (get_bin_path(prefix), get_idx_path(prefix)):
                suffix = path[len(prefix) :]
                with FileSystems.open(FileSystems.join(output_dir, part + suffix)) as src, open(path, "wb") as f:
                    shutil.copyfileobj(src, f)
            with collections_skip_older_objects():
                builder.add_index(prefix)
        builder.finalize(get_idx_path(merged))
        return [_copy_out(os.path.join(local, name), output_dir, name) for name in MEGATRON_FILES]


# ---------------------------------------------------------------------------------------- the dataset card


def _feature_yaml(field: pa.Field) -> list[str]:
    """The dataset card's lines of one column's feature (``datasets``' YAML of ``Features``: ``dtype`` or a
    ``list`` of a dtype)."""
    if pa.types.is_list(field.type):
        return [f"  - name: {field.name}", f"    list: {field.type.value_type}"]
    return [f"  - name: {field.name}", f"    dtype: {field.type}"]


def dataset_card(manifest: dict[str, Any], has_eval: bool) -> str:
    """The ``README.md`` beside Arrow shards: YAML front matter with the ``configs`` (the ``train`` split, the
    shards; the ``validation`` split, ``eval/``'s, with ``has_eval``) and the ``dataset_info`` features, that
    ``datasets.load_dataset(OUTPUT_DIR)`` reads; then a few lines saying what the rows are."""
    columns = manifest["schema"]["columns"]
    vocab_size = int(manifest["vocab"]["size"])
    objective = manifest["config"].get("objective", "nsp")
    arrow_schema = schema.shard_schema(vocab_size, objective, "word_ids" in columns)
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        "    path: shard-*.arrow",
    ]
    if has_eval:
        lines += [f"  - split: {EVAL_SPLIT}", f"    path: {schema.EVAL_DIR}/shard-*.arrow"]
    lines += ["dataset_info:", "  features:"]
    for field in arrow_schema:
        lines += [f"  {line}" for line in _feature_yaml(field)]
    lines += ["---", "", "# BERT pre-training instances (bertprep make-shards)", ""]
    lines += [
        "One row per instance, unpadded: `" + "`, `".join(columns) + "`. The vocab is beside the shards "
        f"({manifest['vocab']['file']}); manifest.json holds the settings and statistics of the run.",
        "",
        "```python",
        "import datasets",
        "shards = datasets.load_dataset(SHARDS_DIR)  # splits: train"
        + (f", {EVAL_SPLIT} (the held-out set in {schema.EVAL_DIR}/)" if has_eval else ""),
        "```",
        "",
    ]
    return "\n".join(lines)


def recorded_files(manifest: dict[str, Any] | None) -> list[str]:
    """Every file (relative path) a manifest records besides itself: the shards (an MDS shard's files), the
    MDS index, the Megatron files, the dataset card and the vocab files."""
    if not manifest:
        return []
    files = []
    for entry in manifest.get("shards", []):
        files += [f["file"] for f in entry["files"]] if "files" in entry else [entry["file"]]
    files += [f["file"] for f in manifest.get("format_files", [])]
    if manifest.get("dataset_card"):
        files.append(manifest["dataset_card"])
    return files + schema.vocab_file_names(manifest)


def read_manifest_if_any(directory: str) -> dict[str, Any] | None:
    """The manifest of ``directory`` (local or a store: make-shards' driver reads it, through ``core/storage.py``)
    as JSON, or None when there is none or it is unreadable (a run then treats the directory's files as not its
    own)."""
    path = storage.join(directory, schema.MANIFEST_NAME)
    try:
        if not storage.exists(path):
            return None
        manifest = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError):  # (storage.StorageError is a ValueError)
        return None
    return manifest if isinstance(manifest, dict) else None


def foreign_files(output_dir: str, names: tuple[str, ...]) -> list[str]:
    """The files among ``names`` (relative to ``output_dir``) that ``output_dir`` holds and its manifest does
    not record: another tool's, which a run writing those names must not replace (asked by make-shards' driver,
    through ``core/storage.py``)."""
    recorded = set(recorded_files(read_manifest_if_any(output_dir)))
    return [n for n in names if n not in recorded and storage.exists(storage.join(output_dir, n))]


# ------------------------------------------------------------------------------------- inspect and --verify


def iter_mds_rows(shard_dir: str, manifest: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The rows of a local MDS shard directory in order, read with the library's ``StreamingDataset``, as the
    Arrow rows are (lists of ints; ``masked_lm_positions``/``masked_lm_ids`` empty where the run masked
    dynamically)."""
    streaming = import_streaming()
    with _library_logs_quiet():
        dataset = streaming.StreamingDataset(local=shard_dir, shuffle=False, batch_size=1)
    empty: dict[str, Any] = {"masked_lm_positions": [], "masked_lm_ids": []}
    for i in range(len(dataset)):
        sample = dataset[i]
        yield empty | {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sample.items() if k != "len"}


def verify_format_files(shard_dir: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Check the files of a local ``mds`` or ``megatron`` directory against its manifest: each recorded file's
    size and sha256 (an MDS shard's files, the index, the Megatron files), then the set as the trainer's library
    opens it: MDS, ``StreamingDataset``'s row count and tokens (the ``len`` column) as the manifest's;
    Megatron, ``IndexedDataset``'s sequences, documents and tokens as the manifest's ``megatron`` entry.
    Returns ``{"rows": n, "files": k, "errors": [messages...]}``."""
    errors: list[str] = []
    files = [f for e in manifest.get("shards", []) for f in e.get("files", [])] + manifest.get("format_files", [])
    for f in files:
        path = os.path.join(shard_dir, f["file"])
        if not os.path.exists(path):
            errors.append(f"{f['file']}: missing")
        elif os.path.getsize(path) != f["bytes"] or schema.sha256_file(path) != f["sha256"]:
            errors.append(f"{f['file']}: its bytes are not the ones the manifest records (sha256); make it again")
    if errors:
        return {"rows": 0, "files": len(files), "errors": errors}
    if manifest.get("output_format") == "mds":
        rows = tokens = 0
        streaming = import_streaming()
        with _library_logs_quiet():
            dataset = streaming.StreamingDataset(local=shard_dir, shuffle=False, batch_size=1)
        for i in range(len(dataset)):
            rows, tokens = rows + 1, tokens + int(dataset[i]["len"])
        expected = (sum(e["rows"] for e in manifest["shards"]), sum(e["tokens"] for e in manifest["shards"]))
        if (rows, tokens) != expected:
            errors.append(f"StreamingDataset reads {rows} rows of {tokens} tokens; the manifest has {expected}")
        return {"rows": rows, "files": len(files), "errors": errors}
    IndexedDataset = _indexed_dataset("IndexedDataset")

    meta = manifest["megatron"]
    dataset = IndexedDataset(os.path.join(shard_dir, meta["prefix"]))
    found = (len(dataset), len(dataset.document_indices) - 1, int(dataset.sequence_lengths.sum()))
    if found != (meta["sentences"], meta["documents"], meta["tokens"]):
        errors.append(f"IndexedDataset holds (sentences, documents, tokens) {found}; the manifest's megatron entry")
    return {"rows": found[0], "files": len(files), "errors": errors}


class _library_logs_quiet:
    """Silence the WARNING lines the streaming library logs on every write and merge (``merge_index`` logs its
    temporary folder on the root logger) while the block runs; errors still show."""

    def __enter__(self) -> None:
        logging.disable(logging.WARNING)

    def __exit__(self, *exc) -> None:
        logging.disable(logging.NOTSET)
