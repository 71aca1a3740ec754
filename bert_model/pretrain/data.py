"""Pre-training batches from a shard directory, with a cursor that checkpoints restore exactly.

A shard directory (``core/schema.py``) holds Arrow IPC files of unpadded instances and a manifest.
``ShardDataset`` is a ``torch.utils.data.IterableDataset`` that

* checks the manifest against what the model expects (vocab fingerprint and size, ``max_seq_length``;
  ``shard_info.py``),
* splits the shards across *streams*: one stream per (DDP rank, DataLoader worker), stream
  ``rank * num_workers + worker`` of ``world_size * num_workers`` takes every ``num_streams``-th shard of the
  epoch's shard order (a seeded permutation that every rank computes alike),
* shuffles rows with a seeded buffer (``shuffle_buffer_size`` row references; a full buffer emits a random
  element and takes the next row in its place; the buffer carries over epoch boundaries),
* masks rows on the fly when the shards were made with ``--masking dynamic`` (``pipeline.masking.mask_instance``: the
  reference rule with a generator seeded from (seed, rank, worker, epoch), its state part of the cursor), at
  the manifest's ``masked_lm_prob`` or the trainer's (``masked_lm_prob``, e.g. ModernBERT's 0.3, with
  ``max_predictions_per_seq`` scaled alike; optionally a linear schedule to ``masked_lm_prob_final``),
* and yields collated, padded batches of ``batch_size`` instances (``collate.py``) together with the
  stream's state after that batch; with ``packing``, batches of a token budget instead: ``batch_size`` rows
  of ``max_seq_length`` tokens filled with as many whole instances as fit (``packing.TokenBudgetPacker``:
  first-fit in loader order, an instance that fits in no row carried to the next batch; each instance a
  document with positions restarting at 0, the model attends block-diagonally; ``collate.collate_packed_numpy``).

Packing happens here, on the fly, not in ``make-shards``: the shards stay the 2018 format (one unpadded
instance per row, ``core/schema.py``), so the same shard directory serves the padded path (BERT as the
original) and the packed one (BERT or ModernBERT). The rows a stream reads are the same with and without
packing (same shuffle); packing changes how many of them make a batch (more when instances are short, so an
epoch takes fewer batches) and masks a batch's rows when it is complete, in row-major order. A packed
stream's cursor also holds the references of the rows read into the batch being filled (``packed``), so
exact resume holds for packed runs too.

The stream state is the cursor: ``epoch``, ``shard`` (index into the stream's shards of that epoch), ``row``
(next row of that shard), the buffered row references and the shuffle RNG state, all JSON values. Because a
state rides with each batch, the main process always knows the state of every stream *as of the batches it
consumed*, whatever the workers have prefetched. ``ShardLoader`` (``loader.py``) wraps the ``DataLoader`` and keeps
these states plus the number of batches consumed. The DataLoader takes batches from its workers round-robin, so on
resume with W workers and C batches consumed, worker ``w`` continues logical stream ``(w + C) % W``: the
batch sequence continues exactly where it stopped. Exact resumption therefore needs the same ``world_size``
and ``num_workers``; with others, ``ShardLoader.load_state_dict`` restarts the saved epoch (and says so).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from bertprep.bert_model.collate import collate_numpy, collate_packed_numpy
from bertprep.bert_model.models.packing import TokenBudgetPacker
from bertprep.bert_model.pretrain.shard_info import ShardInfo, read_shard_info
from bertprep.bert_model.pretrain.train_config import TrainConfig
from bertprep.core import schema
from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.rule import MaskingVocab, mask_instance

logger = logging.getLogger(__name__)

CURSOR_FORMAT = 1


# ------------------------------------------------------------------------------------------ dynamic masking


def continuation_pieces(vocab_file: str) -> list[bool]:
    """Per id, whether the piece continues a word: ``##`` pieces of a ``vocab.txt``; a BPE / Unigram
    ``tokenizer.json``'s pieces without its word mark (``PretrainedTokenizer.is_continuation``; all False
    when it has none: make-shards then refused word-level masking)."""
    if vocab_file.endswith(".json"):
        tokenizer = load_pretrained_tokenizer(vocab_file)
        return tokenizer.is_continuation() or [False] * len(tokenizer.tokens)
    with open(vocab_file, encoding="utf-8") as f:
        return [line.rstrip("\n").strip().startswith("##") for line in f]


def masking_config(info: ShardInfo, masked_lm_prob: float | None = None) -> MaskingConfig:
    """The ``MaskingConfig`` of a shard directory (its manifest config: make-shards' masking settings).

    ``masked_lm_prob`` replaces the manifest's rate (e.g. ModernBERT's 0.3); ``max_predictions_per_seq`` then
    scales with it (:func:`scaled_max_predictions`), so that the cap does not undo the higher rate."""
    return MaskingConfig(
        masked_lm_prob=info.masked_lm_prob if masked_lm_prob is None else masked_lm_prob,
        max_predictions_per_seq=scaled_max_predictions(info, masked_lm_prob),
        masking_scheme=info.masking_scheme,
        max_ngram_size=info.max_ngram_size,
        span_geometric_p=info.span_geometric_p,
        max_span_length=info.max_span_length,
    )


def masking_vocab(info: ShardInfo) -> MaskingVocab:
    """What dynamic masking needs of a shard directory's vocab: its size, the special ids, and for word-level
    masking without a ``word_ids`` column which pieces are ``##`` pieces (from its ``vocab.txt``).

    Raises:
        ValueError: word-level masking without ``word_ids`` and without the vocab file beside the manifest.
    """
    is_subword = None
    if info.masking_scheme != "token" and not info.has_word_ids:
        if not info.vocab_file or not os.path.exists(info.vocab_file):
            raise ValueError(
                f"shards {info.shard_dir}: dynamic whole-word masking needs the vocab file "
                f"{info.vocab_file or 'vocab.txt'} beside the manifest"
            )
        is_subword = np.array(continuation_pieces(info.vocab_file)[: info.vocab_size], dtype=bool)
    ids = info.special_token_ids
    return MaskingVocab(
        vocab_size=info.vocab_size,
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        mask_token_id=ids["[MASK]"],
        is_subword=is_subword,
    )


def scaled_max_predictions(info: ShardInfo, masked_lm_prob: float | None) -> int:
    """The manifest's ``max_predictions_per_seq`` scaled by ``masked_lm_prob / info.masked_lm_prob`` (rounded
    up, never below the manifest's, at most ``max_seq_length``): 20 at 0.15 becomes 40 at 0.3 for 128 tokens."""
    if masked_lm_prob is None or masked_lm_prob <= info.masked_lm_prob:
        return info.max_predictions_per_seq
    scaled = math.ceil(info.max_predictions_per_seq * masked_lm_prob / info.masked_lm_prob - 1e-9)
    return min(info.max_seq_length, max(info.max_predictions_per_seq, scaled))


def masked_lm_prob_at(start: float, final: float | None, progress: float) -> float:
    """The masking rate of a linear schedule from ``start`` to ``final`` at ``progress`` in [0, 1] (clipped);
    ``start`` throughout when ``final`` is None."""
    if final is None:
        return start
    return start + (final - start) * min(1.0, max(0.0, progress))


# -------------------------------------------------------------------------------------------- shard reading

_LIST_COLUMNS = ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids")

_DAMAGED = "the shard is damaged; re-create the shards with bertprep make-shards"


class ShardReadError(ValueError):
    """A shard file cannot be read as its manifest describes it (truncated, overwritten, wrong row count, ids
    outside the vocab): the message names the file and says to re-create the shards. The trainer checkpoints
    the last finished step before it reports one met mid-run."""


class _ShardReader:
    """Random access to the rows of one Arrow IPC file read into memory (zero-copy numpy views of it;
    ``schema.read_shard`` says why not memory-mapped).

    With ``vocab_size``, token ids (``input_ids``, ``masked_lm_ids``) must be below it. Raises
    ``ShardReadError`` naming the file when it is not a readable Arrow file (truncated, overwritten), lacks a
    column of its ``objective`` (``schema.columns``) or holds ids out of range. Rows carry
    ``next_sentence_label`` unless the objective is ``none``.
    """

    def __init__(self, path: str, vocab_size: int | None = None, objective: str = "nsp"):
        self.path = path
        try:
            reader = schema.read_shard(path)
            missing = set(schema.columns(objective)) - set(reader.schema.names)
            if missing:
                raise ShardReadError(f"{path}: columns {sorted(missing)} are missing; not a bertprep shard")
            # (word_ids, where the shards have it: the words of dynamic word-level masking)
            self._list_columns = _LIST_COLUMNS + (("word_ids",) if "word_ids" in reader.schema.names else ())
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            self._batches = [self._columns(batch, vocab_size, objective) for batch in batches]
        except (pa.ArrowException, OSError) as err:
            raise ShardReadError(f"{path}: not a readable Arrow shard ({err}); {_DAMAGED}") from None
        starts = [0]
        for batch in batches:
            starts.append(starts[-1] + batch.num_rows)
        self._starts = starts
        self.num_rows = starts[-1]

    def _columns(self, batch: pa.RecordBatch, vocab_size: int | None, objective: str) -> dict[str, Any]:
        """One record batch's columns as numpy views: ``(offsets, values)`` per list column, and the labels."""
        cols: dict[str, Any] = {}
        for name in self._list_columns:
            arr = batch.column(name)
            cols[name] = (schema.numpy_view(arr.offsets), schema.numpy_view(arr.values))
        if objective != "none":
            cols["next_sentence_label"] = schema.numpy_view(batch.column("next_sentence_label"))
        for name in ("input_ids", "masked_lm_ids") if vocab_size is not None else ():
            values = cols[name][1]
            if len(values) and int(values.max()) >= vocab_size:
                raise ShardReadError(
                    f"{self.path}: {name} holds id {int(values.max())}, outside the vocab of {vocab_size} "
                    f"entries; {_DAMAGED}"
                )
        return cols

    def row(self, index: int) -> dict[str, Any]:
        b = bisect.bisect_right(self._starts, index) - 1
        cols, local = self._batches[b], index - self._starts[b]
        out: dict[str, Any] = {}
        for name in self._list_columns:
            offsets, values = cols[name]
            out[name] = values[offsets[local] : offsets[local + 1]]
        if "next_sentence_label" in cols:
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
        packing: batches of ``batch_size`` rows of ``max_seq_length`` tokens, each filled with as many whole
            instances as fit (``packing.TokenBudgetPacker``; ``collate.collate_packed_numpy``), instead of
            ``batch_size`` instances padded to the batch's longest.
        masked_lm_prob: dynamic masking rate instead of the manifest's (shards made with ``--masking dynamic``
            only; ``max_predictions_per_seq`` scales with it, see ``scaled_max_predictions``).
        masked_lm_prob_final, schedule_batches: a linear schedule of the rate, from ``masked_lm_prob`` (or the
            manifest's) to ``masked_lm_prob_final`` over the first ``schedule_batches`` batches of each stream.
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
        shuffle_buffer_size: int = TrainConfig.shuffle_buffer_size,
        infinite: bool = True,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        pad_to_multiple_of: int = 8,
        info: ShardInfo | None = None,
        packing: bool = False,
        masked_lm_prob: float | None = None,
        masked_lm_prob_final: float | None = None,
        schedule_batches: int = 1,
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
        self._set_masking(shard_dir, masked_lm_prob, masked_lm_prob_final, schedule_batches)
        self.packing = packing
        # Set by ShardLoader before each iteration.
        self.start_states: dict[int, dict[str, Any]] = {}
        self.worker_offset = 0

    def _set_masking(
        self,
        shard_dir: str,
        masked_lm_prob: float | None,
        masked_lm_prob_final: float | None,
        schedule_batches: int,
    ) -> None:
        """The masking rate and its schedule (see the class docstring's ``masked_lm_prob``,
        ``masked_lm_prob_final``, ``schedule_batches``) and, for shards made with ``--masking dynamic`` (unmasked
        rows, masked as they are batched), the masking settings and vocab of the rule.

        Raises:
            ValueError: a rate given for shards that make-shards masked (naming ``shard_dir``).
        """
        if (masked_lm_prob is not None or masked_lm_prob_final is not None) and self.info.masking != "dynamic":
            raise ValueError(
                f"shards {shard_dir} were masked by make-shards (--masking {self.info.masking}, masked_lm_prob "
                f"{self.info.masked_lm_prob}); another masking rate needs shards made with --masking dynamic"
            )
        self.masked_lm_prob = self.info.masked_lm_prob if masked_lm_prob is None else masked_lm_prob
        self.masked_lm_prob_final = masked_lm_prob_final
        self.schedule_batches = max(1, schedule_batches)
        final = self.masked_lm_prob if masked_lm_prob_final is None else max(self.masked_lm_prob, masked_lm_prob_final)
        self.masking = masking_config(self.info, final) if self.info.masking == "dynamic" else None
        self.masking_vocab = masking_vocab(self.info) if self.info.masking == "dynamic" else None

    # -- stream mechanics

    def stream_index(self, logical_worker: int) -> int:
        return self.rank * self.num_logical_workers + logical_worker

    def stream_shards(self, stream: int, epoch: int) -> list[int]:
        """Shard indices stream ``stream`` reads in ``epoch``, in reading order."""
        order = epoch_shard_order(self.info.num_shards, self.seed, epoch, self.shuffle)
        return order[stream :: self.num_streams]

    def _fresh_state(self, logical_worker: int, epoch: int = 0) -> dict[str, Any]:
        stream = self.stream_index(logical_worker)
        rng = random.Random(f"bertprep-buffer:{self.seed}:{stream}:{self.num_streams}")
        return {
            "stream": logical_worker,
            "epoch": epoch,
            "shard": 0,
            "row": 0,
            "buffer": [],
            "rng": _rng_to_json(rng.getstate()),
            "mask_rng": self._mask_rng(logical_worker, epoch).bit_generator.state,
        }

    def _mask_rng(self, logical_worker: int, epoch: int) -> np.random.Generator:
        """Generator of the dynamic masking of one stream in one epoch, seeded from (seed, rank, worker, epoch)."""
        return np.random.default_rng([self.seed, self.rank, logical_worker, epoch, 0x6D61736B])

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        worker = get_worker_info()
        if worker is not None and worker.num_workers != self.num_logical_workers:
            raise RuntimeError(
                f"ShardDataset built for {self.num_logical_workers} workers runs in "
                f"{worker.num_workers}; pass the DataLoader's num_workers to ShardDataset"
            )
        worker_id = worker.id if worker is not None else 0
        logical = (worker_id + self.worker_offset) % self.num_logical_workers
        state = self.start_states.get(logical) or self._fresh_state(logical)
        if worker is None:
            yield from self._stream(logical, state)
            return
        try:
            yield from self._stream(logical, state)
        except ValueError as err:  # a damaged shard: the message alone, without the worker's traceback
            yield _StreamError(str(err), isinstance(err, ShardReadError)), None

    def _stream(self, logical: int, state: dict[str, Any]) -> Iterator[tuple[dict[str, torch.Tensor], dict]]:
        """Batches of one logical worker's stream from the cursor ``state`` on, each with the cursor after it:
        shard by shard, epoch by epoch (or one pass, then the shuffle buffer and the short last batch)."""
        st = self._open_stream(logical, state)
        while True:
            shards = self.stream_shards(st.stream, st.epoch)
            while st.shard_pos < len(shards):
                self._prefetch_next(st, shards)
                yield from self._stream_shard(st, shards[st.shard_pos])
                st.shard_pos, st.row = st.shard_pos + 1, 0
                st.readers.clear()  # unmap shards no longer read (buffered refs reopen on demand)
            if not self.infinite:
                break
            st.epoch, st.shard_pos, st.row = st.epoch + 1, 0, 0
            st.mask_rng = self._mask_rng(logical, st.epoch)
        # One pass only: drain the buffer in random order, then the short last batch.
        st.rng.shuffle(st.buffer)
        for ref in st.buffer:
            batch = self._emit(st, ref)
            if batch is not None:
                yield batch, self._snapshot(st)
        st.buffer.clear()
        if st.pending:
            yield self._collate(st.pending), self._snapshot(st)
        if st.packer is not None:
            for layout in st.packer.flush():
                yield self._packed_step(st, layout), self._snapshot(st)

    def _prefetch_next(self, st: _Stream, shards: list[int]) -> None:
        """Start fetching the shard the stream reads after ``shards[st.shard_pos]`` (shards in a bucket only):
        the next of the epoch, or the first of the next epoch."""
        if self.info.source is None:
            return
        if st.shard_pos + 1 < len(shards):
            self.info.prefetch(shards[st.shard_pos + 1])
        elif self.infinite:
            self.info.prefetch(self.stream_shards(st.stream, st.epoch + 1)[0])

    def _open_stream(self, logical: int, state: dict[str, Any]) -> _Stream:
        """The stream of logical worker ``logical`` at the cursor ``state`` (see ``_snapshot``)."""
        rng = random.Random()
        rng.setstate(_rng_from_json(state["rng"]))
        if "mask_rng" in state:
            mask_rng = np.random.default_rng()
            mask_rng.bit_generator.state = state["mask_rng"]
        else:  # a cursor saved before dynamic masking existed: the stream's generator for this epoch
            mask_rng = self._mask_rng(logical, state["epoch"])
        st = _Stream(
            logical=logical,
            stream=self.stream_index(logical),
            epoch=state["epoch"],
            shard_pos=state["shard"],
            row=state["row"],
            buffer=list(state["buffer"]),
            rng=rng,
            mask_rng=mask_rng,
            batches=state.get("batches", 0),
        )
        if self.packing:
            st.packer = TokenBudgetPacker(self.batch_size, self.info.max_seq_length)
            for ref in state.get("packed", []):  # the half-filled step, replayed (it completes no step)
                completed = self._emit(st, ref)
                assert completed is None, "a saved half-filled step replays without completing"
        return st

    def _stream_shard(self, st: _Stream, shard: int) -> Iterator[tuple[dict[str, torch.Tensor], dict]]:
        """The batches completed while reading ``shard`` from row ``st.row`` on (through the shuffle buffer)."""
        num_rows, first = self.info.shard_rows[shard], self._offsets[shard]
        while st.row < num_rows:
            ref = first + st.row
            st.row += 1
            if self.shuffle_buffer_size:
                if len(st.buffer) < self.shuffle_buffer_size:
                    st.buffer.append(ref)
                    continue
                j = st.rng.randrange(len(st.buffer))
                ref, st.buffer[j] = st.buffer[j], ref
            batch = self._emit(st, ref)
            if batch is not None:
                yield batch, self._snapshot(st)

    def _read_row(self, st: _Stream, ref: int) -> dict[str, Any]:
        """Row ``ref`` (numbered over all shards), opening its shard when needed.

        Raises:
            ShardReadError: the shard cannot be read, or holds another number of rows than its manifest says.
        """
        shard = bisect.bisect_right(self._offsets, ref) - 1
        if shard not in st.readers:
            st.readers[shard] = self._open_shard(shard)
            if st.readers[shard].num_rows != self.info.shard_rows[shard]:
                raise ShardReadError(
                    f"{self.info.shard_files[shard]} holds {st.readers[shard].num_rows} rows, the "
                    f"manifest says {self.info.shard_rows[shard]}; the directory is corrupt"
                )
        return st.readers[shard].row(ref - self._offsets[shard])

    def _open_shard(self, shard: int) -> _ShardReader:
        """The reader of shard ``shard``: its file, or for shards in a bucket its cached copy (fetched when not
        there; fetched again once when another process removed it from the cache before it was read).

        Raises:
            ShardReadError: the shard cannot be read or fetched (the message names the file or object).
        """
        for attempt in range(2):
            try:
                path = self.info.shard_path(shard)
            except ValueError as err:  # (remote_shards.RemoteShardError)
                raise ShardReadError(str(err)) from None
            try:
                return _ShardReader(path, self.info.vocab_size, self.info.objective)
            except ShardReadError:
                if self.info.source is None or attempt or os.path.exists(path):
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _emit(self, st: _Stream, ref: int) -> dict[str, np.ndarray] | None:
        """Add row ``ref`` (masked now, with dynamic masking) to the pending batch; returns the batch when full.

        With ``packing``, the row goes to the stream's ``TokenBudgetPacker`` unmasked; the rows of a step are
        masked when it completes, in row-major order (so a saved half-filled step is row references only)."""
        if st.packer is not None:
            row_data = self._read_row(st, ref)
            key = st.received  # (not ref: a tiny epoch may bring a row back while its first read still waits)
            st.received += 1
            st.unmasked[key] = (ref, row_data)
            layout = st.packer.add(key, len(row_data["input_ids"]))
            return None if layout is None else self._packed_step(st, layout)
        row_data = self._masked_row(st, self._read_row(st, ref))
        st.pending.append(row_data)
        if len(st.pending) == self.batch_size:
            batch = self._collate(st.pending)
            st.pending.clear()
            st.batches += 1
            return batch
        return None

    def _packed_step(self, st: _Stream, layout: list[list[int]]) -> dict[str, np.ndarray]:
        """The packed batch of a completed step (rows of references), its rows masked now in row-major order."""
        rows, index = [], []
        for keys in layout:
            index.append(list(range(len(rows), len(rows) + len(keys))))
            for key in keys:
                _, row_data = st.unmasked.pop(key)
                rows.append(self._masked_row(st, row_data))
        st.batches += 1
        return collate_packed_numpy(
            rows, max_seq_length=self.info.max_seq_length, pad_token_id=self.info.pad_token_id, layout=index
        )

    def _masked_row(self, st: _Stream, row_data: dict[str, Any]) -> dict[str, Any]:
        """``row_data`` masked now (dynamic masking; static rows as they are), without its ``word_ids`` (used for
        masking; not a model input)."""
        if self.masking is not None:
            ids, positions, labels = mask_instance(
                row_data["input_ids"],
                self._masking_now(st),
                self.masking_vocab,
                st.mask_rng,
                word_ids=row_data.get("word_ids"),
            )
            row_data = dict(row_data, input_ids=ids, masked_lm_positions=positions, masked_lm_ids=labels)
        row_data.pop("word_ids", None)
        return row_data

    def _masking_now(self, st: _Stream) -> MaskingConfig:
        """The masking config of the stream's next batch: the rate of the schedule at its batch count (the
        same one the manifest's config gives without a schedule). ``max_predictions_per_seq`` is that of the
        highest rate of the run, so it never caps a rate of the schedule."""
        p = masked_lm_prob_at(self.masked_lm_prob, self.masked_lm_prob_final, st.batches / self.schedule_batches)
        if p != self.masking.masked_lm_prob:
            self.masking = dataclasses.replace(self.masking, masked_lm_prob=p)
        return self.masking

    def _collate(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        if self.packing:
            return collate_packed_numpy(
                rows, max_seq_length=self.info.max_seq_length, pad_token_id=self.info.pad_token_id
            )
        return collate_numpy(rows, pad_token_id=self.info.pad_token_id, pad_to_multiple_of=self.pad_to_multiple_of)

    def _snapshot(self, st: _Stream) -> dict[str, Any]:
        """The data cursor of ``st`` now (JSON-able; ``_open_stream`` continues from it). With ``packing`` it
        also holds ``packed``: the references of the rows read into the step being filled (or carried)."""
        packed = {} if st.packer is None else {"packed": [st.unmasked[key][0] for key, _ in st.packer.pending()]}
        return {
            "stream": st.logical,
            "epoch": st.epoch,
            "shard": st.shard_pos,
            "row": st.row,
            "buffer": list(st.buffer),
            "rng": _rng_to_json(st.rng.getstate()),
            "mask_rng": st.mask_rng.bit_generator.state,
            "batches": st.batches,
            "shards": self.stream_shards(st.stream, st.epoch),
        } | packed


@dataclass
class _Stream:
    """Where one logical worker's stream is (what its data cursor saves), and its open shards and partial batch."""

    logical: int
    stream: int
    epoch: int
    shard_pos: int
    """Position in the epoch's shard order (``stream_shards``)."""
    row: int
    """Next row of that shard."""
    buffer: list[int]
    """The shuffle buffer: rows (numbered over all shards) read but not yet emitted."""
    rng: random.Random
    mask_rng: np.random.Generator
    batches: int = 0
    """Batches this stream has emitted (all epochs): the clock of the masking-rate schedule."""
    readers: dict[int, _ShardReader] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    packer: TokenBudgetPacker | None = None
    """With ``packing``: the step being filled (references of rows read, not yet emitted)."""
    unmasked: dict[int, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """With ``packing``: the packer's rows by key, as (reference, row as read); masked when their step completes."""
    received: int = 0
    """With ``packing``: rows given to the packer (the next key)."""


@dataclass(frozen=True)
class _StreamError:
    """What a loader worker sends instead of a batch when its stream fails with a ``ValueError`` (a damaged
    shard): ``ShardLoader`` raises it again in the training process with the one-line message. (PyTorch would
    re-raise it with the worker's whole traceback in the message.)"""

    message: str
    shard_read: bool = True
    """The error was a ``ShardReadError`` (raised again as one), else another ``ValueError``."""


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss_next = state
    return [version, list(internal), gauss_next]


def _rng_from_json(state: list) -> tuple:
    version, internal, gauss_next = state
    return (version, tuple(internal), gauss_next)


def num_batches_per_epoch(info: ShardInfo, batch_size: int, world_size: int = 1) -> int:
    """Approximate optimizer micro-steps per epoch on each rank (rows / (batch_size * world_size))."""
    return math.ceil(info.num_rows / (batch_size * world_size))


__all__ = [
    "CURSOR_FORMAT",
    "ShardDataset",
    "ShardReadError",
    "epoch_shard_order",
    "masked_lm_prob_at",
    "masking_config",
    "masking_vocab",
    "num_batches_per_epoch",
    "scaled_max_predictions",
]
