"""Packed ("flattened") batches: several documents per row, no attention across them, no compute on padding.

The representation is the one of Hugging Face ``DataCollatorWithFlattening`` and of ModernBERT's unpadding
(Warner et al. 2024, section 2.1.3; FlashAttention's ``varlen`` interface):

* padded-packed: ``input_ids`` (B, T) holding several documents one after another in each row, a per-token
  document number ``sequence_ids`` (B, T) (0, 1, 2... within a row, -1 on padding) and ``position_ids``
  (B, T) that restart at 0 at each document. A token attends only within its document: a block-diagonal mask
  (:func:`block_diagonal_mask`, optionally intersected with a sliding window) for the dense kernel, or the
  segments of the flattened rows (:func:`cu_seqlens_from_sequence_ids`) for FlashAttention's varlen kernel
  (``attention.py`` chooses);
* unpadded: the real tokens only, 1-D (N,), with ``cu_seqlens`` (D + 1,) the cumulative document lengths
  (:func:`unpad`, undone by :func:`pad`).

:func:`pack_documents` builds padded-packed rows from token arrays (NumPy, for data loaders); the other
functions are PyTorch and run on the model's device.

Shapes: B rows, T row length (``max_seq_length``), N real tokens in the batch, D documents in the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

#: ``sequence_ids`` / ``document_ids`` value of a padding position.
PADDING_SEQUENCE_ID = -1


def pack_documents(
    documents: Sequence[Sequence[int] | np.ndarray],
    max_seq_length: int,
    pad_token_id: int = 0,
    aligned: Mapping[str, tuple[Sequence[Sequence[int] | np.ndarray], int]] | None = None,
    layout: Sequence[Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """Pack token arrays into rows of ``max_seq_length`` tokens, in order, greedily (next-fit), or as ``layout`` says.

    Without ``layout``, documents are taken in the order given. A document longer than ``max_seq_length`` is
    cut into pieces of ``max_seq_length`` tokens (the last one shorter), each piece a document of its own (its
    positions restart at 0). A piece goes into the current row if it fits in the room left, otherwise it starts
    a new row; rows are never reordered and no piece is ever split further, so the output is a deterministic
    function of the input and every token appears exactly once. Empty documents contribute nothing.

    With ``layout`` (e.g. a step of :class:`TokenBudgetPacker`), row ``b`` holds the documents
    ``layout[b]``, whole, in that order; the layout must name every document exactly once.

    Args:
        documents: 1-D sequences of token ids (lists or integer arrays).
        max_seq_length: length T of every row (>= 1).
        pad_token_id: id written at the padding positions.
        aligned: more per-token arrays to pack the same way, as ``{name: (arrays, fill_value)}`` with one
            array per document, of its length: e.g. ``{"token_type_ids": (types, 0), "labels": (labels, -100)}``.
        layout: the rows as lists of indices into ``documents`` (None = next-fit in order).
    Returns:
        A dict of int64 arrays, each of shape (B, T):
        ``input_ids`` (tokens, ``pad_token_id`` on padding), ``position_ids`` (0, 1, ... restarting at each
        document, 0 on padding), ``sequence_ids`` (document number within its row: 0, 1, ...; -1 on padding),
        ``document_ids`` (index into ``documents`` of the token's source document; -1 on padding), and one
        array per ``aligned`` name (its fill value on padding).
    Raises:
        ValueError: ``max_seq_length`` < 1, a document that is not 1-D, an aligned array whose length
            differs from its document's, or a ``layout`` that does not name each document once or overfills a
            row.
    """
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 1:
        raise ValueError(f"max_seq_length must be a positive integer, got {max_seq_length!r}")
    T = int(max_seq_length)
    aligned = dict(aligned or {})
    arrays = [np.asarray(doc, dtype=np.int64) for doc in documents]
    _check_documents(arrays, aligned)
    rows = _next_fit_rows(arrays, T) if layout is None else _layout_rows(arrays, layout, T)
    return _fill_rows(rows, arrays, aligned, T, pad_token_id)


def _check_documents(documents: list[np.ndarray], aligned: dict) -> None:
    """Raise ValueError for a document that is not 1-D or an aligned array not of its document's length."""
    for doc_index, tokens in enumerate(documents):
        if tokens.ndim != 1:
            raise ValueError(f"document {doc_index} must be 1-D, got shape {tokens.shape}")
    for name, (arrays, _) in aligned.items():
        if len(arrays) != len(documents) or any(len(a) != len(d) for a, d in zip(arrays, documents, strict=True)):
            raise ValueError(f"aligned {name!r} must have one array per document, of the document's length")


def _layout_rows(documents: list[np.ndarray], layout: Sequence[Sequence[int]], T: int) -> list[list[tuple]]:
    """Rows as lists of (document index, start, stop) pieces: each document of ``layout`` whole."""
    if sorted(i for row in layout for i in row) != list(range(len(documents))):
        raise ValueError("layout must name every document exactly once")
    if any(sum(len(documents[i]) for i in row) > T for row in layout):
        raise ValueError(f"layout puts more than max_seq_length={T} tokens in a row")
    return [[(i, 0, len(documents[i])) for i in row] for row in layout]


def _next_fit_rows(documents: list[np.ndarray], T: int) -> list[list[tuple]]:
    """Rows as lists of (document index, start, stop) pieces: documents in order, cut into pieces of at most
    ``T`` tokens, each piece in the current row if it fits, else in a new one (next-fit)."""
    rows: list[list[tuple[int, int, int]]] = []
    room = 0
    for doc_index, tokens in enumerate(documents):
        for start in range(0, len(tokens), T):
            stop = min(start + T, len(tokens))
            if stop - start > room:
                rows.append([])
                room = T
            rows[-1].append((doc_index, start, stop))
            room -= stop - start
    return rows


def _fill_rows(rows: list[list[tuple]], documents: list[np.ndarray], aligned: dict, T: int, pad_token_id: int):
    """The (B, T) int64 arrays of :func:`pack_documents` for ``rows`` of (document index, start, stop)."""
    B = len(rows)
    out = {
        "input_ids": np.full((B, T), pad_token_id, dtype=np.int64),
        "position_ids": np.zeros((B, T), dtype=np.int64),
        "sequence_ids": np.full((B, T), PADDING_SEQUENCE_ID, dtype=np.int64),
        "document_ids": np.full((B, T), PADDING_SEQUENCE_ID, dtype=np.int64),
    }
    for name, (_, fill_value) in aligned.items():
        if name in out:
            raise ValueError(f"aligned name {name!r} is one of the outputs")
        out[name] = np.full((B, T), fill_value, dtype=np.int64)
    for b, row in enumerate(rows):
        offset = 0
        for seq, (doc_index, start, stop) in enumerate(row):
            span = slice(offset, offset + stop - start)
            out["input_ids"][b, span] = documents[doc_index][start:stop]
            out["position_ids"][b, span] = np.arange(stop - start)
            out["sequence_ids"][b, span] = seq
            out["document_ids"][b, span] = doc_index
            for name, (arrays, _) in aligned.items():
                out[name][b, span] = np.asarray(arrays[doc_index], dtype=np.int64)[start:stop]
            offset += stop - start
    return out


class TokenBudgetPacker:
    """Fills training steps of ``num_rows`` rows of ``max_seq_length`` tokens with whole instances, first-fit.

    The rule (``bertprep train --packing``): instances arrive in loader order. Each goes into the first row
    (lowest index) with room for it (first-fit, the bin-packing heuristic taken online). One that fits in no
    row is set aside in the *carry*. When the carry holds ``num_rows`` instances the step is complete: it is
    emitted, and the next step starts with the carried instances, placed first-fit in the order they were set
    aside (``num_rows`` instances of at most ``max_seq_length`` tokens always fit in ``num_rows`` empty rows).
    So every instance goes into the step being filled or the next one (it waits at most one step), each exactly
    once, and the layout is a deterministic function of the arrival order and the lengths. At the end of the
    data, ``flush`` emits the step being filled and then the carried instances' step.

    Keys are opaque (a loader's row references); ``pending()`` lists the instances added but not yet emitted,
    in an order that ``add`` replays into the same state (how a data cursor saves a half-filled step).
    """

    def __init__(self, num_rows: int, max_seq_length: int):
        if num_rows < 1 or max_seq_length < 1:
            raise ValueError(f"num_rows and max_seq_length must be >= 1, got {num_rows}, {max_seq_length}")
        self.num_rows, self.max_seq_length = num_rows, max_seq_length
        self._start([])

    def _start(self, carried: list[tuple[object, int]]) -> None:
        self.rows: list[list[object]] = [[] for _ in range(self.num_rows)]
        self.room = [self.max_seq_length] * self.num_rows
        self.placed: list[tuple[object, int]] = []  # (key, length) in the order they were placed
        self.carry: list[tuple[object, int]] = []
        for key, length in carried:
            placed = self._place(key, length)
            assert placed, "at most num_rows carried instances always fit in an empty step"

    def _place(self, key: object, length: int) -> bool:
        for b, room in enumerate(self.room):
            if length <= room:
                self.rows[b].append(key)
                self.room[b] -= length
                self.placed.append((key, length))
                return True
        return False

    def add(self, key: object, length: int) -> list[list[object]] | None:
        """Add one instance of ``length`` tokens; returns the step it completed, as ``num_rows`` rows of keys
        (a row may be empty), or None.

        Raises:
            ValueError: ``length`` outside 1..``max_seq_length``.
        """
        if not 1 <= length <= self.max_seq_length:
            raise ValueError(f"instance of {length} tokens does not fit rows of {self.max_seq_length}")
        if self._place(key, length):
            return None
        self.carry.append((key, length))
        if len(self.carry) < self.num_rows:
            return None
        step = self.rows
        self._start(self.carry)
        return step

    def flush(self) -> list[list[list[object]]]:
        """The steps still open at the end of the data: the one being filled, then the carried instances'."""
        steps = []
        while self.placed:
            steps.append(self.rows)
            self._start(self.carry)
        return steps

    def pending(self) -> list[tuple[object, int]]:
        """``(key, length)`` of the instances added but not emitted: the placed ones, then the carry."""
        return self.placed + self.carry


def _as_tensor(x: torch.Tensor | np.ndarray) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))


def sequence_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``sequence_ids`` of an ordinary padded batch: one document per row (0) and -1 where the mask is 0.

    Args:
        attention_mask: (B, T), 1 / True for real tokens.
    Returns:
        int64 (B, T).
    """
    attention_mask = _as_tensor(attention_mask)
    return torch.where(attention_mask.bool(), 0, PADDING_SEQUENCE_ID).long()


def attention_pairs(sequence_ids: torch.Tensor) -> torch.Tensor:
    """The (query, key) pairs a batch's attention really has: the sum over its documents of length squared,
    sum(l^2), as an int64 scalar on ``sequence_ids``' device (no host sync). Each document counts alone, so a
    row packed with two documents of 64 tokens counts 2 x 64^2, not 128^2 (what MFU's attention term counts:
    ``bert_config.flops``).

    Args:
        sequence_ids: int (B, T), document number within its row, -1 on padding (a padded batch:
            :func:`sequence_ids_from_attention_mask`).
    """
    sequence_ids = _as_tensor(sequence_ids).long()
    B, T = sequence_ids.shape
    rows = torch.arange(B, device=sequence_ids.device)[:, None] * T  # (B, 1)
    slot = torch.where(sequence_ids >= 0, rows + sequence_ids, torch.full_like(sequence_ids, B * T))  # (B, T)
    lengths = torch.zeros(B * T + 1, dtype=torch.int64, device=sequence_ids.device)
    lengths.scatter_add_(0, slot.reshape(-1), torch.ones_like(slot).reshape(-1))  # (B*T + 1,) tokens per document
    return (lengths[:-1] ** 2).sum()


def position_ids_from_sequence_ids(sequence_ids: torch.Tensor) -> torch.Tensor:
    """Positions that restart at 0 wherever ``sequence_ids`` changes along a row (0 on padding).

    A document is a maximal run of equal, non-negative ``sequence_ids`` in a row, as :func:`pack_documents`
    writes them.

    Args:
        sequence_ids: int (B, T), -1 on padding.
    Returns:
        int64 (B, T).
    """
    sequence_ids = _as_tensor(sequence_ids).long()
    B, T = sequence_ids.shape
    index = torch.arange(T, device=sequence_ids.device).expand(B, T)  # (B, T)
    starts = segment_starts(sequence_ids)  # (B, T)
    start_index = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # (B, T)
    return torch.where(sequence_ids >= 0, index - start_index, torch.zeros_like(index))


def block_diagonal_mask(sequence_ids: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Boolean attention mask of a packed batch, True = the query may attend to that key.

    A token attends only to the tokens of its own document (equal ``sequence_ids`` in the same row), and with
    ``window`` only to those at most ``window // 2`` positions away on either side (ModernBERT's local
    attention: ``window`` is ``local_attention``, the whole window, as in Hugging Face's
    ``ModernBertConfig.sliding_window = local_attention // 2``). Real tokens never attend to padding. A padding
    query attends to the padding keys (itself included) instead, so that no row of the mask is empty (an empty
    row makes ``scaled_dot_product_attention`` return NaN, which would then reach real tokens through 0 x NaN);
    what padding positions compute is never read.

    Args:
        sequence_ids: int (B, T), document number within the row, -1 on padding.
        window: total sliding-window width, or None for the whole document.
    Returns:
        bool (B, 1, T, T), broadcastable over heads, for ``F.scaled_dot_product_attention``'s ``attn_mask``.
    """
    sequence_ids = _as_tensor(sequence_ids).long()
    mask = sequence_ids[:, :, None] == sequence_ids[:, None, :]  # (B, T, T): query i, key j
    if window is not None:
        mask = mask & sliding_window_band(sequence_ids.size(1), window, sequence_ids.device)[None]
    return mask[:, None]  # (B, 1, T, T)


def sliding_window_band(seq_length: int, window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """bool (T, T): |i - j| <= window // 2 (the local-attention band alone, no documents)."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    index = torch.arange(seq_length, device=device)
    return (index[:, None] - index[None, :]).abs() <= window // 2  # (T, T)


def segment_starts(sequence_ids: torch.Tensor) -> torch.Tensor:
    """bool (B, T): True where a segment of the flattened rows starts: at each row's first token and wherever
    ``sequence_ids`` changes along the row (a run of padding, -1, is a segment of its own)."""
    sequence_ids = _as_tensor(sequence_ids).long()
    starts = torch.ones_like(sequence_ids, dtype=torch.bool)  # (B, T)
    starts[:, 1:] = sequence_ids[:, 1:] != sequence_ids[:, :-1]
    return starts


def cu_seqlens_from_sequence_ids(sequence_ids: torch.Tensor) -> torch.Tensor:
    """The FlashAttention ``varlen`` segments of a (B, T) batch seen as one stream of B * T tokens.

    Every sequence of every row is a segment, and so is every run of padding (-1), so that the segments tile
    the stream without a gap: ``q.reshape(B * T, nh, hs)`` goes to the kernel as it is, no token attends
    across a sequence (or row) boundary, and padding attends only to padding. A padded batch (one sequence and
    then padding per row) gives two segments per padded row.

    Args:
        sequence_ids: int (B, T), sequence number within the row, -1 on padding (``pack_documents``; for a
            padded batch, 0 on real tokens).
    Returns:
        int32 (S + 1,): 0, then the cumulative segment lengths; the last entry is B * T.
    """
    starts = segment_starts(sequence_ids).reshape(-1)  # (B*T,)
    index = torch.nonzero(starts, as_tuple=False).flatten()  # (S,)
    total = torch.tensor([starts.numel()], device=index.device)
    return torch.cat([index, total]).to(torch.int32)


def sequence_starts_from_sequence_ids(sequence_ids: torch.Tensor) -> torch.Tensor:
    """int64 (D,): flat index (row * T + column) of the first token of each sequence (not padding), in row-major
    order, the order of a packed batch's ``next_sentence_label``."""
    sequence_ids = _as_tensor(sequence_ids).long()
    first = segment_starts(sequence_ids) & (sequence_ids >= 0)  # (B, T)
    return torch.nonzero(first.reshape(-1), as_tuple=False).flatten()


@dataclass
class UnpaddedBatch:
    """The real tokens of a packed batch, concatenated (FlashAttention ``varlen`` layout)."""

    input_ids: torch.Tensor
    """int64 (N,): the real tokens, row by row."""
    position_ids: torch.Tensor
    """int64 (N,): position of each token within its document."""
    cu_seqlens: torch.Tensor
    """int32 (D + 1,): 0, then the cumulative document lengths; document d is ``[cu_seqlens[d], cu_seqlens[d+1])``."""
    max_seqlen: int
    """Length of the longest document."""
    indices: torch.Tensor
    """int64 (N,): where each token was in the flattened (B * T) batch, for :func:`pad`."""
    batch_size: int
    """B of the padded batch."""
    seq_length: int
    """T of the padded batch."""


def unpad(input_ids: torch.Tensor, sequence_ids: torch.Tensor) -> UnpaddedBatch:
    """Drop the padding of a packed batch: 1-D tokens, ``cu_seqlens`` and the indices to put them back.

    A document is a maximal run of equal, non-negative ``sequence_ids`` in a row (a document never continues
    into the next row).

    Args:
        input_ids: int (B, T).
        sequence_ids: int (B, T), -1 on padding.
    Returns:
        :class:`UnpaddedBatch`.
    """
    input_ids, sequence_ids = _as_tensor(input_ids), _as_tensor(sequence_ids).long()
    B, T = sequence_ids.shape
    flat_ids = sequence_ids.reshape(-1)  # (B*T,)
    indices = torch.nonzero(flat_ids >= 0, as_tuple=False).flatten()  # (N,)
    row = indices // T  # (N,)
    seq = flat_ids[indices]  # (N,)
    new_doc = torch.ones_like(seq, dtype=torch.bool)  # (N,)
    if seq.numel() > 1:
        new_doc[1:] = (seq[1:] != seq[:-1]) | (row[1:] != row[:-1])
    starts = torch.nonzero(new_doc, as_tuple=False).flatten()  # (D,)
    total = torch.tensor([seq.numel()], device=seq.device)
    cu_seqlens = torch.cat([starts, total]).to(torch.int32)  # (D + 1,)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]  # (D,)
    return UnpaddedBatch(
        input_ids=input_ids.reshape(-1)[indices].long(),
        position_ids=position_ids_from_cu_seqlens(cu_seqlens),
        cu_seqlens=cu_seqlens,
        max_seqlen=int(lengths.max()) if lengths.numel() else 0,
        indices=indices,
        batch_size=B,
        seq_length=T,
    )


def pad(values: torch.Tensor, indices: torch.Tensor, batch_size: int, seq_length: int) -> torch.Tensor:
    """Scatter unpadded per-token values (N, ...) back to (B, T, ...), zeros at the padding positions."""
    out = values.new_zeros((batch_size * seq_length, *values.shape[1:]))  # (B*T, ...)
    out[indices] = values
    return out.view(batch_size, seq_length, *values.shape[1:])  # (B, T, ...)


def sequence_ids_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """int64 (N,): the document number 0..D-1 of each token of an unpadded batch."""
    cu_seqlens = _as_tensor(cu_seqlens).long()
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]  # (D,)
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=cu_seqlens.device), lengths)


def position_ids_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """int64 (N,): each token's position within its document in an unpadded batch."""
    cu_seqlens = _as_tensor(cu_seqlens).long()
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]  # (D,)
    N = int(cu_seqlens[-1]) if cu_seqlens.numel() else 0
    return torch.arange(N, device=cu_seqlens.device) - torch.repeat_interleave(cu_seqlens[:-1], lengths)


__all__ = [
    "PADDING_SEQUENCE_ID",
    "TokenBudgetPacker",
    "UnpaddedBatch",
    "block_diagonal_mask",
    "cu_seqlens_from_sequence_ids",
    "pack_documents",
    "pad",
    "position_ids_from_cu_seqlens",
    "position_ids_from_sequence_ids",
    "segment_starts",
    "sequence_ids_from_attention_mask",
    "sequence_ids_from_cu_seqlens",
    "sequence_starts_from_sequence_ids",
    "sliding_window_band",
    "unpad",
]
