"""The trainer's side of the shard contract: what a shard directory's ``manifest.json`` says (:class:`ShardInfo`),
read and checked (:func:`read_shard_info`), its files checked against the recorded sha256
(:func:`verify_shard_files`), and shards refused that do not fit a model (:func:`check_compatible`).

The manifest itself is written and read by ``core/schema.py`` (pyarrow only), the one module both sides
share; this module reads no Arrow data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from bertprep.core import schema, storage
from bertprep.pipeline.masking.config import MaskingConfig


class ShardSource(Protocol):
    """Where the shard files of a :class:`ShardInfo` are read from when they are not local files: a bucket
    through a local cache (``remote_shards.ShardCache``)."""

    def fetch(self, index: int) -> str:
        """The local path of shard ``index``, its bytes checked against the manifest (fetched when needed).
        Raises ``ValueError`` naming the object and what to do."""
        ...

    def prefetch(self, index: int) -> None:
        """Start fetching shard ``index`` in the background, if it is not cached yet."""
        ...


@dataclass(frozen=True)
class ShardInfo:
    """What the trainer needs to know about a shard directory, from its manifest."""

    shard_dir: str
    vocab_size: int
    vocab_sha256: str
    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    masking: str
    do_whole_word_mask: bool
    special_token_ids: dict[str, int]
    shard_files: tuple[str, ...]
    shard_rows: tuple[int, ...]
    vocab_file: str | None
    shard_sha256: tuple[str | None, ...] = ()
    """The sha256 the manifest recorded for each shard file (None where it has none)."""
    objective: str = "nsp"
    """``config.objective`` of the manifest (older manifests: ``nsp``): ``nsp`` and ``sop`` rows carry a
    ``next_sentence_label``, ``none`` rows do not (the trainer then uses the masked-LM loss alone)."""

    masking_scheme: str = MaskingConfig.masking_scheme
    """The manifest's ``config.masking_scheme`` (absent: ``whole-word`` with ``do_whole_word_mask``, else
    ``token``); dynamic masking uses it, with the n-gram / span settings below (absent: make-shards' defaults)."""
    max_ngram_size: int = MaskingConfig.max_ngram_size
    span_geometric_p: float = MaskingConfig.span_geometric_p
    max_span_length: int = MaskingConfig.max_span_length
    vocab_model: str = "WordPiece"
    """The tokenizer's model type (the manifest's ``vocab.model``: ``BPE``, ``Unigram``; absent: ``WordPiece``);
    its files are ``vocab_file`` (a ``tokenizer.json`` then) and the config files beside it."""
    special_tokens: dict[str, str] = field(default_factory=dict)
    """Role -> token text (``[CLS]`` -> ``<s>`` for RoBERTa's); a WordPiece manifest's roles are its tokens."""
    has_word_ids: bool = False
    """The shards have a ``word_ids`` column (the manifest's ``schema.columns``): dynamic masking takes its
    words from it (a word segmenter's words) instead of the vocab's ``##`` pieces."""
    source: ShardSource | None = None
    """Shards in a bucket: the cache that fetches them (``shard_files`` are then their URLs, ``vocab_file``
    the cached copy); None for a local directory."""

    def shard_path(self, index: int) -> str:
        """The local file to read shard ``index`` from: ``shard_files[index]``, or for shards in a bucket
        its cached copy, fetched now when it is not there (``ValueError`` naming the object when it cannot be)."""
        return self.shard_files[index] if self.source is None else self.source.fetch(index)

    def prefetch(self, index: int) -> None:
        """Fetch shard ``index`` in the background when it lives in a bucket (nothing for local shards)."""
        if self.source is not None:
            self.source.prefetch(index)

    @property
    def has_sentence_label(self) -> bool:
        """Whether the rows carry ``next_sentence_label`` (objective ``nsp`` or ``sop``)."""
        return self.objective != "none"

    @property
    def num_shards(self) -> int:
        return len(self.shard_rows)

    @property
    def num_rows(self) -> int:
        return sum(self.shard_rows)

    @property
    def pad_token_id(self) -> int:
        return self.special_token_ids.get("[PAD]", 0)


def read_shard_info(shard_dir: str) -> ShardInfo:
    """Read and check ``shard_dir/manifest.json`` (``storage.read_manifest``).

    Raises:
        FileNotFoundError: no manifest (not a finished shard directory).
        ValueError: wrong format version, a listed shard is missing, the directory has no shards, or the
            manifest lacks a field the trainer needs (the message names the field).
    """
    return shard_info_from_manifest(storage.read_manifest(shard_dir), shard_dir)


def shard_info_from_manifest(
    manifest: dict[str, Any], shard_dir: str, *, vocab_dir: str | None = None, source: ShardSource | None = None
) -> ShardInfo:
    """The :class:`ShardInfo` of the checked ``manifest`` of ``shard_dir`` (a local folder or a bucket's URL),
    its vocab file in ``vocab_dir`` (default ``shard_dir``: the cache folder for shards in a bucket), its shards
    read through ``source`` when given. Raises ``ValueError`` as :func:`read_shard_info` does."""
    path = _join(shard_dir, schema.MANIFEST_NAME)
    vocab_dir = shard_dir if vocab_dir is None else vocab_dir
    if manifest.get("output_format") == "mds":  # make-shards --output-format mds: for Composer / streaming
        raise ValueError(
            f"{path}: these are MDS shards (make-shards --output-format mds), which a Composer trainer reads "
            "through mosaicml-streaming; bertprep train reads Arrow shards: make them with --output-format arrow"
        )
    try:
        config, vocab = manifest["config"], manifest["vocab"]
        info = ShardInfo(
            shard_dir=shard_dir,
            vocab_size=int(vocab["size"]),
            vocab_sha256=str(vocab["sha256"]),
            max_seq_length=int(config["max_seq_length"]),
            max_predictions_per_seq=int(config["max_predictions_per_seq"]),
            masked_lm_prob=float(config.get("masked_lm_prob", MaskingConfig.masked_lm_prob)),
            masking=str(config.get("masking", "static")),
            do_whole_word_mask=bool(config.get("do_whole_word_mask", False)),
            special_token_ids=dict(vocab["special_token_ids"]),
            shard_files=tuple(_join(shard_dir, s["file"]) for s in manifest["shards"]),
            shard_rows=tuple(int(s["rows"]) for s in manifest["shards"]),
            vocab_file=os.path.join(vocab_dir, vocab["file"]) if vocab.get("file") else None,
            shard_sha256=tuple(s.get("sha256") for s in manifest["shards"]),
            objective=str(config.get("objective", "nsp")),
            masking_scheme=str(
                config.get("masking_scheme", "whole-word" if config.get("do_whole_word_mask") else "token")
            ),
            max_ngram_size=int(config.get("max_ngram_size", MaskingConfig.max_ngram_size)),
            span_geometric_p=float(config.get("span_geometric_p", MaskingConfig.span_geometric_p)),
            max_span_length=int(config.get("max_span_length", MaskingConfig.max_span_length)),
            has_word_ids="word_ids" in manifest.get("schema", {}).get("columns", ()),
            vocab_model=str(vocab.get("model", "WordPiece")),
            special_tokens=dict(vocab.get("special_tokens") or {r: r for r in vocab["special_token_ids"]}),
            source=source,
        )
    except KeyError as err:
        raise ValueError(f"{path}: missing field {err}; re-create the shards with bertprep make-shards") from None
    _check(info, path)
    return info


def _join(shard_dir: str, name: str) -> str:
    """``shard_dir/name``, with ``/`` for a URL (``gs://...``) whatever the local separator."""
    return storage.join(shard_dir, name)


def _check(info: ShardInfo, path: str) -> None:
    """Refuse a manifest the trainer cannot read (``ValueError`` naming ``path``, the field and the fix)."""
    if not info.shard_rows or info.num_rows == 0:
        raise ValueError(f"{path}: the directory holds no instances")
    if info.objective not in ("nsp", "sop", "none"):
        raise ValueError(f"{path}: config.objective is {info.objective!r}; this trainer reads nsp, sop or none")
    if info.masking not in ("static", "dynamic"):
        raise ValueError(f"{path}: config.masking is {info.masking!r}; this trainer reads 'static' or 'dynamic'")
    for token in ("[CLS]", "[SEP]", "[MASK]"):
        if token not in info.special_token_ids:
            raise ValueError(f"{path}: vocab.special_token_ids has no {token}")


def verify_shard_files(info: ShardInfo, *, rank: int = 0, world_size: int = 1) -> None:
    """Check the shard files of ``info`` against the sha256 its manifest recorded (one read of each file).

    Under DDP each of the ``world_size`` ranks checks every ``world_size``-th file from its ``rank`` on, so the
    shards are read once in all (a failing rank stops the others: torchrun ends the job). Cost, measured on
    the make-shards benchmark's output: about 1 s per GB (``benchmarks/bench_verify.py``).

    Raises:
        ValueError: naming the first file that is missing or whose bytes differ from when it was written.
    """
    if info.source is not None:  # in a bucket: each file is checked as it is fetched
        return
    expected_sha256 = info.shard_sha256 or (None,) * len(info.shard_files)
    for path, expected in list(zip(info.shard_files, expected_sha256, strict=True))[rank::world_size]:
        if not os.path.isfile(path):
            raise ValueError(
                f"{path} is missing (listed in {info.shard_dir}/{schema.MANIFEST_NAME}); re-create "
                "the shards with bertprep make-shards"
            )
        if expected is not None and schema.sha256_file(path) != expected:
            raise ValueError(
                f"{path}: sha256 differs from the one in {schema.MANIFEST_NAME} (the file changed or "
                "was truncated after make-shards wrote it); re-create the shards with bertprep "
                "make-shards (or train with --no-verify at your own risk)"
            )


def check_compatible(
    info: ShardInfo,
    *,
    vocab_sha256: str | None = None,
    vocab_size: int | None = None,
    max_seq_length: int | None = None,
    max_position_embeddings: int | None = None,
    what: str = "the model",
) -> None:
    """Refuse shards that were made with another vocab or sequence length than ``what`` expects. A model's
    ``vocab_size`` may exceed the shards' vocab (a padded embedding matrix), never fall short of it.

    Each keyword left None is not checked. Raises ``ValueError`` naming the directory, both values and the fix.
    """
    where = f"shards {info.shard_dir}"
    if vocab_sha256 is not None and info.vocab_sha256 != vocab_sha256:
        raise ValueError(
            f"{where} were made with another vocab (sha256 {info.vocab_sha256[:12]}...) than {what} "
            f"({vocab_sha256[:12]}...); make the shards with the same vocab.txt"
        )
    # A model may have more rows than its tokenizer has entries (padded embedding matrices: MosaicBERT's 30,528,
    # DeBERTa-v3's 128,100; transformers accepts them): every id of the shards must fit, no more.
    if vocab_size is not None and info.vocab_size > vocab_size:
        raise ValueError(
            f"{where} have a vocab of {info.vocab_size} entries but {what} has only vocab_size={vocab_size} "
            "(their ids would not fit); make the shards with the model's vocab (or train a new model on these shards)"
        )
    if max_seq_length is not None and info.max_seq_length != max_seq_length:
        raise ValueError(
            f"{where} have max_seq_length={info.max_seq_length} but {what} uses max_seq_length={max_seq_length}; "
            "use shards made with the same --max-seq-length (to change the length, start a new run with "
            "--model instead of --resume)"
        )
    if max_position_embeddings is not None and info.max_seq_length > max_position_embeddings:
        raise ValueError(
            f"{where} have max_seq_length={info.max_seq_length} but {what} has only "
            f"max_position_embeddings={max_position_embeddings}"
        )


__all__ = [
    "ShardInfo",
    "ShardSource",
    "check_compatible",
    "read_shard_info",
    "shard_info_from_manifest",
    "verify_shard_files",
]
