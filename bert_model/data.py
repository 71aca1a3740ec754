"""Pre-training batches from a shard directory, with a cursor that checkpoints restore exactly.

A shard directory (``pipeline/schema.py``) holds Arrow IPC files of unpadded instances and a manifest.
``ShardDataset`` is a ``torch.utils.data.IterableDataset`` that

* checks the manifest against what the model expects (vocab fingerprint and size, ``max_seq_length``),
* splits the shards across *streams*: one stream per (DDP rank, DataLoader worker), stream
  ``rank * num_workers + worker`` of ``world_size * num_workers`` takes every ``num_streams``-th shard of the
  epoch's shard order (a seeded permutation that every rank computes alike),
* shuffles rows with a seeded buffer (``shuffle_buffer_size`` row references; a full buffer emits a random
  element and takes the next row in its place; the buffer carries over epoch boundaries),
* masks rows on the fly when the shards were made with ``--masking dynamic`` (``pipeline.masking.mask_instance``: the
  reference rule with a generator seeded from (seed, rank, worker, epoch), its state part of the cursor),
* and yields collated, padded batches (``collate``) together with the stream's state after that batch.

The stream state is the cursor: ``epoch``, ``shard`` (index into the stream's shards of that epoch), ``row``
(next row of that shard), the buffered row references and the shuffle RNG state, all JSON values. Because a
state rides with each batch, the main process always knows the state of every stream *as of the batches it
consumed*, whatever the workers have prefetched. ``ShardLoader`` wraps the ``DataLoader`` and keeps these
states plus the number of batches consumed. The DataLoader takes batches from its workers round-robin, so on
resume with W workers and C batches consumed, worker ``w`` continues logical stream ``(w + C) % W``: the
batch sequence continues exactly where it stopped. Exact resumption therefore needs the same ``world_size``
and ``num_workers``; with others, ``ShardLoader.load_state_dict`` restarts the saved epoch (and says so).
"""

from __future__ import annotations

import atexit
import bisect
import ctypes
import functools
import logging
import math
import os
import random
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bertprep.bert_model.model import IGNORE_INDEX
from bertprep.pipeline import schema
from bertprep.pipeline.masking import MaskingConfig, mask_instance

logger = logging.getLogger(__name__)

CURSOR_FORMAT = 1


# ------------------------------------------------------------------------------------------- manifest checks


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
    """Read and check ``shard_dir/manifest.json`` (``schema.read_manifest``).

    Raises:
        FileNotFoundError: no manifest (not a finished shard directory).
        ValueError: wrong format version, a listed shard is missing, the directory has no shards, or the
            manifest lacks a field the trainer needs (the message names the field).
    """
    manifest = schema.read_manifest(shard_dir)
    path = os.path.join(shard_dir, schema.MANIFEST_NAME)
    try:
        config, vocab = manifest["config"], manifest["vocab"]
        info = ShardInfo(
            shard_dir=shard_dir,
            vocab_size=int(vocab["size"]),
            vocab_sha256=str(vocab["sha256"]),
            max_seq_length=int(config["max_seq_length"]),
            max_predictions_per_seq=int(config["max_predictions_per_seq"]),
            masked_lm_prob=float(config.get("masked_lm_prob", 0.15)),
            masking=str(config.get("masking", "static")),
            do_whole_word_mask=bool(config.get("do_whole_word_mask", False)),
            special_token_ids=dict(vocab["special_token_ids"]),
            shard_files=tuple(os.path.join(shard_dir, s["file"]) for s in manifest["shards"]),
            shard_rows=tuple(int(s["rows"]) for s in manifest["shards"]),
            vocab_file=os.path.join(shard_dir, vocab["file"]) if vocab.get("file") else None,
            shard_sha256=tuple(s.get("sha256") for s in manifest["shards"]),
        )
    except KeyError as err:
        raise ValueError(f"{path}: missing field {err}; re-create the shards with bertprep make-shards") from None
    if not info.shard_rows or info.num_rows == 0:
        raise ValueError(f"{path}: the directory holds no instances")
    if info.masking not in ("static", "dynamic"):
        raise ValueError(f"{path}: config.masking is {info.masking!r}; this trainer reads 'static' or 'dynamic'")
    for token in ("[CLS]", "[SEP]", "[MASK]"):
        if token not in info.special_token_ids:
            raise ValueError(f"{path}: vocab.special_token_ids has no {token}")
    return info


def verify_shard_files(info: ShardInfo, *, rank: int = 0, world_size: int = 1) -> None:
    """Check the shard files of ``info`` against the sha256 its manifest recorded (one read of each file).

    Under DDP each of the ``world_size`` ranks checks every ``world_size``-th file from its ``rank`` on, so the
    shards are read once in all (a failing rank stops the others: torchrun ends the job). Cost, measured on
    the make-shards benchmark's output: about 1 s per GB (``benchmarks/bench_verify.py``).

    Raises:
        ValueError: naming the first file that is missing or whose bytes differ from when it was written.
    """
    expected_sha256 = info.shard_sha256 or (None,) * len(info.shard_files)
    for path, expected in list(zip(info.shard_files, expected_sha256))[rank::world_size]:
        if not os.path.isfile(path):
            raise ValueError(f"{path} is missing (listed in {info.shard_dir}/{schema.MANIFEST_NAME}); re-create "
                             "the shards with bertprep make-shards")
        if expected is not None and schema.sha256_file(path) != expected:
            raise ValueError(f"{path}: sha256 differs from the one in {schema.MANIFEST_NAME} (the file changed or "
                             "was truncated after make-shards wrote it); re-create the shards with bertprep "
                             "make-shards (or train with --no-verify at your own risk)")


def check_compatible(
    info: ShardInfo,
    *,
    vocab_sha256: str | None = None,
    vocab_size: int | None = None,
    max_seq_length: int | None = None,
    max_position_embeddings: int | None = None,
    what: str = "the model",
) -> None:
    """Refuse shards that were made with another vocab or sequence length than ``what`` expects.

    Each keyword left None is not checked. Raises ``ValueError`` naming the directory, both values and the fix.
    """
    where = f"shards {info.shard_dir}"
    if vocab_sha256 is not None and info.vocab_sha256 != vocab_sha256:
        raise ValueError(
            f"{where} were made with another vocab (sha256 {info.vocab_sha256[:12]}...) than {what} "
            f"({vocab_sha256[:12]}...); make the shards with the same vocab.txt"
        )
    if vocab_size is not None and info.vocab_size != vocab_size:
        raise ValueError(
            f"{where} have a vocab of {info.vocab_size} entries but {what} has vocab_size={vocab_size}; "
            "make the shards with the model's vocab (or train a new model on these shards)"
        )
    if max_seq_length is not None and info.max_seq_length != max_seq_length:
        raise ValueError(
            f"{where} have max_seq_length={info.max_seq_length} but {what} uses max_seq_length={max_seq_length}; "
            "use shards made with the same --max-seq-length (to change the length, start a new run with "
            "--init-from instead of --resume)"
        )
    if max_position_embeddings is not None and info.max_seq_length > max_position_embeddings:
        raise ValueError(
            f"{where} have max_seq_length={info.max_seq_length} but {what} has only "
            f"max_position_embeddings={max_position_embeddings}"
        )


# ----------------------------------------------------------------------------------------------- collate


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple) if multiple > 1 else max(n, 1)


def collate(
    rows: list[dict[str, np.ndarray]], *, pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, torch.Tensor]:
    """Pad a list of shard rows into a batch of int64 tensors (``collate_numpy`` as ``torch.from_numpy``).

    Args:
        rows: dicts with the shard columns (``input_ids``, ``token_type_ids``, ``masked_lm_positions``,
            ``masked_lm_ids`` as 1-D integer arrays, ``next_sentence_label`` an int).
        pad_token_id: id written after each sequence (``[PAD]``).
        pad_to_multiple_of: both the sequence length T and the number of prediction slots P are rounded up to
            a multiple of this (8 suits tensor cores and keeps the shapes ``torch.compile`` sees few).
    Returns:
        ``input_ids``, ``token_type_ids``, ``attention_mask`` (1 = real token): [B, T];
        ``masked_lm_positions`` [B, P] (padding entries point at 0); ``masked_lm_ids`` [B, P] (padding
        entries are -100, ignored by the loss); ``next_sentence_label`` [B] (1 = NotNext).
    """
    return {k: torch.from_numpy(v) for k, v in
            collate_numpy(rows, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of).items()}


def collate_numpy(
    rows: list[dict[str, np.ndarray]], *, pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, np.ndarray]:
    """``collate`` with int64 numpy arrays (what loader workers send: one pickled buffer per array is much
    cheaper than a shared-memory tensor per array for batches of this size)."""
    B = len(rows)
    T = _round_up(max(len(r["input_ids"]) for r in rows), pad_to_multiple_of)
    P = _round_up(max(len(r["masked_lm_positions"]) for r in rows), pad_to_multiple_of)
    input_ids = np.full((B, T), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((B, T), dtype=np.int64)
    attention_mask = np.zeros((B, T), dtype=np.int64)
    masked_lm_positions = np.zeros((B, P), dtype=np.int64)
    masked_lm_ids = np.full((B, P), IGNORE_INDEX, dtype=np.int64)
    next_sentence_label = np.empty(B, dtype=np.int64)
    for i, r in enumerate(rows):
        n, m = len(r["input_ids"]), len(r["masked_lm_positions"])
        input_ids[i, :n] = r["input_ids"]
        token_type_ids[i, :n] = r["token_type_ids"]
        attention_mask[i, :n] = 1
        masked_lm_positions[i, :m] = r["masked_lm_positions"]
        masked_lm_ids[i, :m] = r["masked_lm_ids"]
        next_sentence_label[i] = r["next_sentence_label"]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_lm_positions": masked_lm_positions,
        "masked_lm_ids": masked_lm_ids,
        "next_sentence_label": next_sentence_label,
    }


# ------------------------------------------------------------------------------------------ dynamic masking


def masking_config(info: ShardInfo) -> MaskingConfig:
    """The ``MaskingConfig`` of a shard directory (its manifest config, special ids, and for whole-word masking
    its ``vocab.txt``). Raises ``ValueError`` when whole-word masking is asked for without a vocab file."""
    is_subword = None
    if info.do_whole_word_mask:
        if not info.vocab_file or not os.path.exists(info.vocab_file):
            raise ValueError(f"shards {info.shard_dir}: dynamic whole-word masking needs the vocab file "
                             f"{info.vocab_file or 'vocab.txt'} beside the manifest")
        with open(info.vocab_file, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        is_subword = np.array([t.strip().startswith("##") for t in tokens[:info.vocab_size]], dtype=bool)
    ids = info.special_token_ids
    return MaskingConfig(vocab_size=info.vocab_size, cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
                         mask_token_id=ids["[MASK]"], masked_lm_prob=info.masked_lm_prob,
                         max_predictions_per_seq=info.max_predictions_per_seq, is_subword=is_subword)


# -------------------------------------------------------------------------------------------- shard reading

_LIST_COLUMNS = ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids")


class _ShardReader:
    """Random access to the rows of one memory-mapped Arrow IPC file (zero-copy numpy views).

    With ``vocab_size``, token ids (``input_ids``, ``masked_lm_ids``) must be below it. Raises ``ValueError``
    naming the file when it is not a readable Arrow file (truncated, overwritten) or holds ids out of range.
    """

    def __init__(self, path: str, vocab_size: int | None = None):
        self.path = path
        damaged = "the shard is damaged; re-create the shards with bertprep make-shards"
        try:
            source = pa.memory_map(path, "r")
            reader = pa.ipc.open_file(source)
            missing = set(schema.COLUMNS) - set(reader.schema.names)
            if missing:
                raise ValueError(f"{path}: columns {sorted(missing)} are missing; not a bertprep shard")
            self._batches = []
            starts = [0]
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                cols = {}
                for name in _LIST_COLUMNS:
                    arr = batch.column(name)
                    cols[name] = (arr.offsets.to_numpy(), arr.values.to_numpy())
                cols["next_sentence_label"] = batch.column("next_sentence_label").to_numpy()
                if vocab_size is not None:
                    for name in ("input_ids", "masked_lm_ids"):
                        values = cols[name][1]
                        if len(values) and int(values.max()) >= vocab_size:
                            raise ValueError(f"{path}: {name} holds id {int(values.max())}, outside the vocab of "
                                             f"{vocab_size} entries; {damaged}")
                self._batches.append(cols)
                starts.append(starts[-1] + batch.num_rows)
        except (pa.ArrowException, OSError) as err:
            raise ValueError(f"{path}: not a readable Arrow shard ({err}); {damaged}") from None
        self._starts = starts
        self.num_rows = starts[-1]

    def row(self, index: int) -> dict[str, Any]:
        b = bisect.bisect_right(self._starts, index) - 1
        cols, local = self._batches[b], index - self._starts[b]
        out: dict[str, Any] = {}
        for name in _LIST_COLUMNS:
            offsets, values = cols[name]
            out[name] = values[offsets[local]:offsets[local + 1]]
        out["next_sentence_label"] = int(cols["next_sentence_label"][local])
        return out


# ----------------------------------------------------------------------------------------------- dataset


def epoch_shard_order(num_shards: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """Shard indices in the order of ``epoch``: a permutation seeded by (seed, epoch), the same on every rank."""
    order = list(range(num_shards))
    if shuffle:
        random.Random(f"bertprep-shards:{seed}:{epoch}").shuffle(order)
    return order


class ShardDataset(IterableDataset):
    """Batches of pre-training instances from a shard directory (see the module docstring).

    Args:
        shard_dir: finished shard directory (has ``manifest.json``).
        batch_size: instances per batch (per rank, per micro-step).
        seed: seeds the epoch shard orders and the per-stream shuffle buffers.
        shuffle: shuffle shard order and rows (training) or read in file order (evaluation).
        shuffle_buffer_size: row references held by each stream's shuffle buffer (at most the rows a
            stream reads per epoch, so that no row is buffered twice).
        infinite: loop over epochs forever (training); else one pass, the last batch may be short.
        rank, world_size: this process's DDP rank and the number of ranks.
        num_workers: DataLoader workers per rank that will iterate this dataset (0 = in the main process).
        pad_to_multiple_of: see ``collate``.
        info: the directory's ``ShardInfo`` when already read.
    Yields:
        ``(batch, state)``: ``batch`` as ``collate_numpy`` returns it, ``state`` the stream's JSON-serialisable
        cursor after the batch. ``ShardLoader`` turns the arrays into tensors and keeps the states.
    Raises:
        ValueError: (when iterated) fewer shards than training streams (``world_size * max(1, num_workers)``).
    """

    def __init__(
        self,
        shard_dir: str,
        *,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_buffer_size: int = 10_000,
        infinite: bool = True,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        pad_to_multiple_of: int = 8,
        info: ShardInfo | None = None,
    ):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if shuffle and shuffle_buffer_size <= 0:
            raise ValueError(f"shuffle_buffer_size must be positive, got {shuffle_buffer_size}")
        self.info = info if info is not None else read_shard_info(shard_dir)
        # Row references are global row numbers: shard i holds rows offsets[i] .. offsets[i+1]-1.
        self._offsets = [0]
        for rows in self.info.shard_rows:
            self._offsets.append(self._offsets[-1] + rows)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.shuffle_buffer_size = shuffle_buffer_size if shuffle else 0
        self.infinite = infinite
        self.rank, self.world_size = rank, world_size
        self.num_logical_workers = max(1, num_workers)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.num_streams = world_size * self.num_logical_workers
        if infinite and self.info.num_shards < self.num_streams:
            raise ValueError(
                f"shards {shard_dir} hold {self.info.num_shards} shard file(s) but training reads "
                f"{self.num_streams} streams (world size {world_size} x {self.num_logical_workers} loader "
                "worker(s)); make the shards with more output files or use fewer --num-workers"
            )
        # The buffer must fill within one epoch of a stream (else it would hold the same row twice).
        rows_per_stream_epoch = (self.info.num_shards // self.num_streams) * min(self.info.shard_rows)
        if self.shuffle_buffer_size > rows_per_stream_epoch > 0:
            self.shuffle_buffer_size = rows_per_stream_epoch
        # Shards made with --masking dynamic hold unmasked rows: mask each row as it is batched.
        self.masking = masking_config(self.info) if self.info.masking == "dynamic" else None
        # Set by ShardLoader before each iteration.
        self.start_states: dict[int, dict[str, Any]] = {}
        self.worker_offset = 0

    # -- stream mechanics

    def stream_index(self, logical_worker: int) -> int:
        return self.rank * self.num_logical_workers + logical_worker

    def stream_shards(self, stream: int, epoch: int) -> list[int]:
        """Shard indices stream ``stream`` reads in ``epoch``, in reading order."""
        order = epoch_shard_order(self.info.num_shards, self.seed, epoch, self.shuffle)
        return order[stream::self.num_streams]

    def _fresh_state(self, logical_worker: int, epoch: int = 0) -> dict[str, Any]:
        stream = self.stream_index(logical_worker)
        rng = random.Random(f"bertprep-buffer:{self.seed}:{stream}:{self.num_streams}")
        return {"stream": logical_worker, "epoch": epoch, "shard": 0, "row": 0, "buffer": [],
                "rng": _rng_to_json(rng.getstate()),
                "mask_rng": self._mask_rng(logical_worker, epoch).bit_generator.state}

    def _mask_rng(self, logical_worker: int, epoch: int) -> np.random.Generator:
        """Generator of the dynamic masking of one stream in one epoch, seeded from (seed, rank, worker, epoch)."""
        return np.random.default_rng([self.seed, self.rank, logical_worker, epoch, 0x6D61736B])

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        worker = get_worker_info()
        if worker is not None and worker.num_workers != self.num_logical_workers:
            raise RuntimeError(f"ShardDataset built for {self.num_logical_workers} workers runs in "
                               f"{worker.num_workers}; pass the DataLoader's num_workers to ShardDataset")
        worker_id = worker.id if worker is not None else 0
        logical = (worker_id + self.worker_offset) % self.num_logical_workers
        state = self.start_states.get(logical) or self._fresh_state(logical)
        if worker is None:
            yield from self._stream(logical, state)
            return
        try:
            yield from self._stream(logical, state)
        except ValueError as err:  # a damaged shard: the message alone, without the worker's traceback
            yield _StreamError(str(err)), None

    def _stream(self, logical: int, state: dict[str, Any]) -> Iterator[tuple[dict[str, torch.Tensor], dict]]:
        stream = self.stream_index(logical)
        epoch, shard_pos, row = state["epoch"], state["shard"], state["row"]
        buffer: list[int] = list(state["buffer"])
        rng = random.Random()
        rng.setstate(_rng_from_json(state["rng"]))
        if "mask_rng" in state:
            mask_rng = np.random.default_rng()
            mask_rng.bit_generator.state = state["mask_rng"]
        else:  # a cursor saved before dynamic masking existed: the stream's generator for this epoch
            mask_rng = self._mask_rng(logical, epoch)
        readers: dict[int, _ShardReader] = {}
        pending: list[dict[str, Any]] = []

        def read_row(ref: int) -> dict[str, Any]:
            shard = bisect.bisect_right(self._offsets, ref) - 1
            if shard not in readers:
                readers[shard] = _ShardReader(self.info.shard_files[shard], self.info.vocab_size)
                if readers[shard].num_rows != self.info.shard_rows[shard]:
                    raise ValueError(f"{self.info.shard_files[shard]} holds {readers[shard].num_rows} rows, the "
                                     f"manifest says {self.info.shard_rows[shard]}; the directory is corrupt")
            return readers[shard].row(ref - self._offsets[shard])

        def snapshot() -> dict[str, Any]:
            return {"stream": logical, "epoch": epoch, "shard": shard_pos, "row": row,
                    "buffer": list(buffer), "rng": _rng_to_json(rng.getstate()),
                    "mask_rng": mask_rng.bit_generator.state,
                    "shards": self.stream_shards(stream, epoch)}

        def emit(ref: int):
            row_data = read_row(ref)
            if self.masking is not None:
                ids, positions, labels = mask_instance(row_data["input_ids"], self.masking, mask_rng)
                row_data = dict(row_data, input_ids=ids, masked_lm_positions=positions, masked_lm_ids=labels)
            pending.append(row_data)
            if len(pending) == self.batch_size:
                batch = collate_numpy(pending, pad_token_id=self.info.pad_token_id,
                                      pad_to_multiple_of=self.pad_to_multiple_of)
                pending.clear()
                return batch
            return None

        while True:
            shards = self.stream_shards(stream, epoch)
            while shard_pos < len(shards):
                shard = shards[shard_pos]
                num_rows, first = self.info.shard_rows[shard], self._offsets[shard]
                while row < num_rows:
                    ref = first + row
                    row += 1
                    if self.shuffle_buffer_size:
                        if len(buffer) < self.shuffle_buffer_size:
                            buffer.append(ref)
                            continue
                        j = rng.randrange(len(buffer))
                        ref, buffer[j] = buffer[j], ref
                    batch = emit(ref)
                    if batch is not None:
                        yield batch, snapshot()
                shard_pos, row = shard_pos + 1, 0
                readers.clear()  # unmap shards no longer read (buffered refs reopen on demand)
            if not self.infinite:
                break
            epoch, shard_pos, row = epoch + 1, 0, 0
            mask_rng = self._mask_rng(logical, epoch)
        # One pass only: drain the buffer in random order, then the short last batch.
        rng.shuffle(buffer)
        for ref in buffer:
            batch = emit(ref)
            if batch is not None:
                yield batch, snapshot()
        buffer.clear()
        if pending:
            yield collate_numpy(pending, pad_token_id=self.info.pad_token_id,
                                pad_to_multiple_of=self.pad_to_multiple_of), snapshot()


@dataclass(frozen=True)
class _StreamError:
    """What a loader worker sends instead of a batch when its stream fails with a ``ValueError`` (a damaged
    shard): ``ShardLoader`` raises it again in the training process with the one-line message. (PyTorch would
    re-raise it with the worker's whole traceback in the message.)"""

    message: str


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss_next = state
    return [version, list(internal), gauss_next]


def _rng_from_json(state: list) -> tuple:
    version, internal, gauss_next = state
    return (version, tuple(internal), gauss_next)


# -------------------------------------------------------------------------------------------------- loader


def _as_is(item):
    return item



#: Seconds between the loader workers' checks that the training process is still alive (the fallback where
#: ``PR_SET_PDEATHSIG`` is not available).
PARENT_CHECK_INTERVAL_S = 1.0

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> None:
    """Make this process die as soon as ``parent_pid`` (its parent) does, however the parent dies.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill this process when the thread that
    created it exits, SIGKILL of the parent included. Everywhere (and as a fallback) a daemon thread checks
    ``os.getppid()`` every ``PARENT_CHECK_INTERVAL_S`` and ends the process with ``os._exit`` once the parent
    is gone: a worker must never wait for a parent that will not read its queue (the orphaned workers of a
    killed trainer otherwise block for ever in a futex, each holding its memory).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl (an unusual libc): the watchdog below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_INTERVAL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="bertprep-parent-watchdog", daemon=True).start()


def _init_loader_worker(parent_pid: int, worker_id: int) -> None:
    """``worker_init_fn`` of the loader workers.

    * They die with the training process (``_die_with_parent``), however it dies.
    * They leave SIGINT / SIGTERM to the training process, which stops after the current step and checkpoints
      the cursor (a worker killed first by a signal sent to the whole process group would fail that step).
      The training process ends them itself (``ShardLoader`` closes its workers, and kills any that are
      still alive, when iteration ends, fails or the process exits).
    """
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


#: Worker processes of the loaders of this process that may still run (see ``_kill_live_workers``).
_LIVE_WORKERS: weakref.WeakSet = weakref.WeakSet()


def _kill_live_workers() -> None:
    """At exit: SIGKILL the loader workers still alive. Registered after ``multiprocessing`` imported, so it
    runs before multiprocessing's own exit handler, which would send them SIGTERM (ignored, see
    ``_init_loader_worker``) and then wait for them for ever. PyTorch's iterator does not shut its workers down
    once the interpreter is exiting, e.g. after an uncaught exception in the training loop."""
    for process in list(_LIVE_WORKERS):
        try:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        except (OSError, ValueError, AssertionError):  # already reaped, or not our child
            pass


atexit.register(_kill_live_workers)


def _close_loader_iterator(iterator: Any) -> None:
    """Stop the workers of a ``DataLoader`` iterator now: PyTorch's orderly shutdown, then SIGKILL for any
    worker that did not exit (they ignore the SIGTERM that PyTorch's shutdown falls back to)."""
    workers = list(getattr(iterator, "_workers", ()))
    shutdown = getattr(iterator, "_shutdown_workers", None)
    try:
        if shutdown is not None:
            shutdown()
    finally:
        for process in workers:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            _LIVE_WORKERS.discard(process)


class ShardLoader:
    """A ``DataLoader`` over a ``ShardDataset`` that keeps the data cursor (see the module docstring).

    Iterating yields batches (dicts of tensors). ``state_dict()`` returns the cursor as of the batches
    yielded so far (JSON values); ``load_state_dict()`` before iterating makes the next iteration continue
    from it.

    Worker processes live as long as one iteration: they are shut down when it ends, when it raises, or when
    the caller closes the generator (``batches.close()``; the trainer does it in a ``finally``), and killed
    if they do not exit. They also die with the process that created them, however it dies
    (``_die_with_parent``).
    """

    def __init__(self, dataset: ShardDataset, *, num_workers: int = 0, pin_memory: bool = False,
                 prefetch_factor: int = 2):
        if max(1, num_workers) != dataset.num_logical_workers:
            raise ValueError("ShardLoader num_workers differs from the ShardDataset's num_workers")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.prefetch_factor = prefetch_factor
        self._streams: dict[int, dict[str, Any]] = {}
        self._batches = 0

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.dataset.start_states = dict(self._streams)
        self.dataset.worker_offset = self._batches % self.dataset.num_logical_workers
        loader = DataLoader(
            self.dataset,
            batch_size=None,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch_factor if self.num_workers else None,
            persistent_workers=False,
            collate_fn=_as_is,  # batches are collated already; default_convert would walk the cursor lists
            worker_init_fn=functools.partial(_init_loader_worker, os.getpid()),
            # The loader draws a base seed from this generator, not from torch's global RNG (dropout),
            # so the number of loaders created does not change training randomness.
            generator=torch.Generator().manual_seed(self.dataset.seed),
        )
        iterator = iter(loader)
        _LIVE_WORKERS.update(getattr(iterator, "_workers", ()))
        try:
            for arrays, state in iterator:
                if isinstance(arrays, _StreamError):
                    raise ValueError(arrays.message)
                self._streams[state["stream"]] = state
                self._batches += 1
                batch = {k: torch.from_numpy(v) for k, v in arrays.items()}
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                yield batch
        finally:
            # Runs when iteration ends, fails, or the caller closes this generator (the trainer does so on any
            # exception): the workers are gone before the exception reaches the user.
            _close_loader_iterator(iterator)

    @property
    def batches_consumed(self) -> int:
        return self._batches

    def state_dict(self) -> dict[str, Any]:
        """The cursor: format, rank, world size, workers, batches consumed and each stream's state."""
        return {
            "format": CURSOR_FORMAT,
            "rank": self.dataset.rank,
            "world_size": self.dataset.world_size,
            "num_workers": self.dataset.num_logical_workers,
            "seed": self.dataset.seed,
            "batches": self._batches,
            "streams": [self._streams.get(i) for i in range(self.dataset.num_logical_workers)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a cursor saved by ``state_dict()`` of the same rank.

        With the same seed, world size and number of workers the batch sequence continues exactly. Otherwise
        (a different layout) every stream restarts at the beginning of the earliest saved epoch, with a
        warning, since rows cannot be re-assigned to a different set of streams mid-epoch.
        """
        if state.get("format") != CURSOR_FORMAT:
            raise ValueError(f"data cursor format {state.get('format')!r} is not {CURSOR_FORMAT}")
        same_layout = (state["world_size"] == self.dataset.world_size
                       and state["num_workers"] == self.dataset.num_logical_workers
                       and state["seed"] == self.dataset.seed
                       and state["rank"] == self.dataset.rank)
        if same_layout:
            self._streams = {i: s for i, s in enumerate(state["streams"]) if s is not None}
            self._batches = int(state["batches"])
            return
        epochs = [s["epoch"] for s in state["streams"] if s is not None]
        epoch = min(epochs) if epochs else 0
        logger.warning(
            "data cursor was saved with world size %s, %s workers, seed %s; now %s, %s, %s: restarting the data "
            "at the beginning of epoch %d (exact resumption needs the same layout)",
            state["world_size"], state["num_workers"], state["seed"], self.dataset.world_size,
            self.dataset.num_logical_workers, self.dataset.seed, epoch)
        self._streams = {}
        for i in range(self.dataset.num_logical_workers):
            self._streams[i] = self.dataset._fresh_state(i, epoch)
        self._batches = 0


def num_batches_per_epoch(info: ShardInfo, batch_size: int, world_size: int = 1) -> int:
    """Approximate optimizer micro-steps per epoch on each rank (rows / (batch_size * world_size))."""
    return math.ceil(info.num_rows / (batch_size * world_size))
