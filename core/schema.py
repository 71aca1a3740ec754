"""The shard format: the one contract between ``make-shards`` (pipeline/) and the trainer (bert_model/).

This module imports only pyarrow and the standard library (numpy inside :func:`numpy_view`), so both sides
can use it.

A shard directory holds Arrow IPC files (the "file" format, readable with ``pyarrow.ipc.open_file``)
named ``shard-00000-of-00008.arrow`` and a ``manifest.json`` written last: a directory without the
manifest is incomplete and must not be read.

One row = one pre-training instance, unpadded (docs/architecture.md, "The contract between the halls"):

============================  ==================  ==========================================================
column                        Arrow type          meaning
============================  ==================  ==========================================================
``input_ids``                 list<uint16|uint32> ``[CLS] A [SEP] B [SEP]`` after masking; length <= max_seq_length
``token_type_ids``            list<uint8>         0 for ``[CLS]``, A and the first ``[SEP]``; 1 for B and the last ``[SEP]``
``masked_lm_positions``       list<uint16>        positions of the predicted tokens, ascending (empty with dynamic masking)
``masked_lm_ids``             list<uint16|uint32> original token ids at those positions (the labels)
``next_sentence_label``       uint8               1 = NotNext (B is a random segment), 0 = IsNext (objective ``sop``:
                                                  1 = A and B swapped); absent under objective ``none``
``word_ids`` (optional)       list<int32>         word index of each piece within its row (0, 1, ...), -1 at
                                                  ``[CLS]``/``[SEP]`` (collate pads with -1 too); written with
                                                  ``--word-ids`` or a ``--word-segmenter`` (``word_segmentation.py``)
============================  ==================  ==========================================================

The tokenizer travels with the shards: BERT's WordPiece as ``vocab.txt`` (the manifest's ``vocab.file``); a BPE
or Unigram tokenizer (RoBERTa's, ModernBERT's, ``build-vocab --model bpe``'s) as its ``tokenizer.json`` with
the ``tokenizer_config.json`` / ``special_tokens_map.json`` it came with (``vocab.files``; ``vocab.model`` names
the model type, ``vocab.special_tokens`` the token of each role: :func:`vocab_entry`). ``vocab.special_token_ids``
is keyed by role, spelled as BERT's tokens (``[CLS]`` is RoBERTa's ``<s>``), whatever the tokens are.

Objective ``none`` (RoBERTa-style packing, ``config.objective`` in the manifest) writes rows
``[CLS] tokens [SEP]`` whose tokens may hold further ``[SEP]`` (one between two documents), with
``token_type_ids`` all 0 and no ``next_sentence_label`` column (:func:`columns`).

Rows stay one instance each, unpadded, whatever the trainer does with them: ``bertprep train --packing`` packs
several instances into one row of ``max_seq_length`` tokens as it builds batches
(``bert_model/pretrain/data.py`` says why on the fly), so the same shards serve padded and packed training and
both architectures.

The id type is uint16 when every id fits (vocab size <= 65,536) and uint32 otherwise; the manifest's
``schema.id_type`` says which. Names follow Hugging Face ``BertForPreTraining`` inputs and the original
generator's features (``segment_ids`` -> ``token_type_ids``, ``next_sentence_labels`` ->
``next_sentence_label``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

import pyarrow as pa

#: Version of the on-disk format; bump on incompatible change. Readers refuse other versions.
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
#: Folder of the held-out shard set inside a make-shards output directory (``--eval-fraction``).
EVAL_DIR = "eval"
SHARD_PATTERN = "shard-{index:05d}-of-{count:05d}.arrow"
SHARD_RE = re.compile(r"^shard-(\d{5})-of-(\d{5})\.arrow$")

COLUMNS = ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_label")

#: What ``next_sentence_label`` means under each objective (the manifest's ``schema.next_sentence_label``).
SENTENCE_PAIR_LABELS = {
    "nsp": "next-sentence prediction: 1 = NotNext (B is a segment of another document), 0 = IsNext",
    "sop": "sentence-order prediction: 1 = swapped (B precedes A in the document), 0 = in order",
}


#: Columns written only when asked for (the manifest's ``schema.columns`` lists the ones a directory has).
OPTIONAL_COLUMNS = ("word_ids",)


def columns(objective: str = "nsp", word_ids: bool = False) -> tuple[str, ...]:
    """The shard columns of an objective: :data:`COLUMNS`, without ``next_sentence_label`` for ``none``; then
    ``word_ids`` when asked for."""
    out = COLUMNS if objective != "none" else tuple(c for c in COLUMNS if c != "next_sentence_label")
    return out + ("word_ids",) if word_ids else out


def id_type_for_vocab(vocab_size: int) -> pa.DataType:
    """Smallest unsigned Arrow integer type that holds every id of a vocab of ``vocab_size`` entries."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return pa.uint16() if vocab_size <= 2**16 else pa.uint32()


def shard_schema(vocab_size: int, objective: str = "nsp", word_ids: bool = False) -> pa.Schema:
    """Arrow schema of a shard for a vocab of ``vocab_size`` entries (see the module docstring); objective
    ``none`` has no ``next_sentence_label``; ``word_ids`` adds that column (list<int32>) last."""
    id_type = id_type_for_vocab(vocab_size)
    fields = [
        pa.field("input_ids", pa.list_(id_type), nullable=False),
        pa.field("token_type_ids", pa.list_(pa.uint8()), nullable=False),
        pa.field("masked_lm_positions", pa.list_(pa.uint16()), nullable=False),
        pa.field("masked_lm_ids", pa.list_(id_type), nullable=False),
        pa.field("next_sentence_label", pa.uint8(), nullable=False),
        pa.field("word_ids", pa.list_(pa.int32()), nullable=False),
    ]
    return pa.schema([f for f in fields if f.name in columns(objective, word_ids)])


def manifest_schema(vocab_size: int, objective: str = "nsp", word_ids: bool = False) -> dict[str, Any]:
    """The manifest's ``schema`` entry: ``id_type``, ``columns`` and, where the column exists, what
    ``next_sentence_label`` means under the objective (:data:`SENTENCE_PAIR_LABELS`)."""
    out: dict[str, Any] = {"id_type": str(id_type_for_vocab(vocab_size)), "columns": list(columns(objective, word_ids))}
    if objective in SENTENCE_PAIR_LABELS:
        out["next_sentence_label"] = SENTENCE_PAIR_LABELS[objective]
    return out


def shard_name(index: int, count: int) -> str:
    """File name of shard ``index`` (0-based) out of ``count``: ``shard-00003-of-00008.arrow``."""
    return SHARD_PATTERN.format(index=index, count=count)


def read_shard(path: str) -> pa.ipc.RecordBatchFileReader:
    """The Arrow IPC file reader of the local shard ``path``, over the file's bytes read once into this process's
    memory: the one shard reader of both halls (the trainer's loader, ``inspect`` and its ``--verify``).

    Not ``pa.memory_map``: a mapped file that is truncated while it is read (a copy or an ``rsync --inplace``
    over the shard directory, a full disk...) kills the process with SIGBUS on the next access to a page past
    the new end, with no message (in a loader worker PyTorch blames shared memory). Read once, the shard stays
    valid whatever happens to the file; a file truncated before or during the read fails to parse. A shard is
    tens of MB (make-shards writes ~50,000 instances per file).

    Raises:
        OSError: the file cannot be read. pyarrow.ArrowException: it is not an Arrow IPC file (truncated,
            overwritten); callers name the shard and say to re-create it.
    """
    with open(path, "rb") as f:
        return pa.ipc.open_file(pa.py_buffer(f.read()))


def numpy_view(array: pa.Array) -> Any:
    """A zero-copy, read-only numpy view of a fixed-width integer or float Arrow ``array`` without nulls (a
    shard column's values or offsets): shape ``(len(array),)``, the array's own dtype (``uint16`` stays
    ``uint16``). What ``array.to_numpy()`` gives, without its detour through pyarrow's pandas conversion, which
    imports pandas (0.4 s and ~50 MB in each loader worker of ``train``: apache/arrow issue 26926); other types
    (booleans, lists, strings) go to ``array.to_numpy()``.

    Raises:
        pyarrow.ArrowInvalid: the array holds nulls (as ``to_numpy()`` with its default zero-copy only).
    """
    import numpy as np

    kind = "i" if pa.types.is_signed_integer(array.type) else "u" if pa.types.is_unsigned_integer(array.type) else None
    kind = "f" if pa.types.is_floating(array.type) else kind
    if kind is None:
        return array.to_numpy()
    if array.null_count:
        raise pa.ArrowInvalid(f"a column of {array.type} holds {array.null_count} nulls; shard columns hold none")
    dtype = np.dtype(f"{kind}{array.type.bit_width // 8}")
    view = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    view.flags.writeable = False  # (Arrow's buffers are immutable; a pyarrow Buffer exports itself writable)
    return view


def sha256_file(path: str, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a local file (streamed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_size)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def held_out_mismatch(train_manifest: dict[str, Any], eval_manifest: dict[str, Any]) -> str | None:
    """Why the shard set of ``eval_manifest`` is not the held-out set made with ``train_manifest``'s shards
    (``make-shards --eval-fraction``: the manifests' ``split`` entries), or None when it is, or when neither
    records a split (an eval set made apart: nothing to compare).

    The two sets of one run record the same split (fraction, seed, document counts) with the roles
    ``train`` and ``eval``; anything else may share documents with the training data.
    """
    train, held = train_manifest.get("split"), eval_manifest.get("split")
    if train is None and held is None:
        return None
    if held is None or held.get("role") != "eval":
        return "it is not a held-out set (its manifest records no eval side of a split)"
    if train is None or train.get("role") != "train":
        return "the training shards record no split, so they may hold its documents"
    keys = ("eval_fraction", "eval_seed", "train_documents", "eval_documents")
    differs = [k for k in keys if train.get(k) != held.get(k)]
    if differs:
        return (
            "it was held out by another split ("
            + ", ".join(f"{k} {held.get(k)} vs {train.get(k)}" for k in differs)
            + ")"
        )
    return None


def parse_manifest(data: bytes, path: str) -> dict[str, Any]:
    """The manifest in ``data`` (the bytes of ``path``, a local file or an object in a bucket), checked: valid
    JSON, a manifest, of this format version (``core.storage.read_manifest`` reads it, and checks that a local
    directory's shard files exist).

    Raises:
        ValueError: not valid JSON, not a manifest, or of another format version (the message names ``path``).
    """
    damaged = (
        f"; the shard directory is damaged (make-shards writes {MANIFEST_NAME} last, whole): make the shards again"
    )
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}){damaged}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise ValueError(f"{path} is not a shard manifest (no list of shards){damaged}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {version!r}, this bertprep reads version {FORMAT_VERSION}; "
            "re-create the shards with this version of bertprep"
        )
    return manifest


def shard_paths(shard_dir: str, manifest: dict[str, Any]) -> list[str]:
    """Local paths of the shards of the finished directory ``shard_dir`` whose ``manifest`` is given, in shard
    order."""
    return [os.path.join(shard_dir, s["file"]) for s in manifest["shards"]]


#: The vocab file of a WordPiece shard directory (the manifest's ``vocab.file`` when it has no ``vocab.files``).
VOCAB_TXT = "vocab.txt"


def vocab_entry(tokenizer: Any, source: str, size: int, sha256: str) -> dict[str, Any]:
    """The manifest's ``vocab`` entry of a BPE / Unigram tokenizer (a ``pretrained_tokenizer.PretrainedTokenizer``):
    ``file`` (its ``tokenizer.json``), ``files`` (every tokenizer file copied beside the shards), ``model``,
    ``special_tokens`` (role -> token), ``special_token_ids`` (role -> id); ``do_lower_case`` is null (the
    tokenizer's own normaliser decides)."""
    return {
        "file": "tokenizer.json",
        "files": sorted(tokenizer.files),
        "source": source,
        "model": tokenizer.model_type,
        "size": size,
        "sha256": sha256,
        "do_lower_case": None,
        "special_tokens": dict(tokenizer.special_tokens),
        "special_token_ids": tokenizer.special_token_ids(),
    }


def vocab_file_names(manifest: dict[str, Any]) -> list[str]:
    """The tokenizer files of a shard directory, by its manifest: ``vocab.txt``, or a BPE / Unigram
    tokenizer's ``tokenizer.json`` and the config files beside it."""
    vocab = manifest.get("vocab") or {}
    return list(vocab.get("files") or [vocab.get("file") or VOCAB_TXT])


def vocab_sha256(tokens: list[str]) -> str:
    """Fingerprint of a vocabulary: sha256 of its tokens in id order, one per line, UTF-8.

    The same vocab gives the same fingerprint whether it came from a ``vocab.txt`` or a
    ``tokenizer.json``; the manifest records it and the trainer compares it with its checkpoint.
    """
    digest = hashlib.sha256()
    for token in tokens:
        digest.update(token.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
