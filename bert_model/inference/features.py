"""Frozen BERT activations as features (BERT paper, section 5.3; google-research/bert ``extract_features.py``).

``extract_features`` reads text lines (``text`` or ``text_a ||| text_b``, as the original), runs the encoder
without gradients and writes the hidden states of the chosen layers for every word piece, with the pieces'
text and character offsets, to one Arrow IPC file, batch by batch: memory stays flat however long the input
is (only ``batch_size`` lines and their activations are held at a time), and the file is written under a
temporary name and renamed when complete.

Layers are numbered as Hugging Face's ``output_hidden_states``: 0 is the embedding output, 1..L the encoder
layers, negative numbers count from the last (-1 = layer L, the original's default ``-1,-2,-3,-4``).

Output, one row per non-empty input line (an Arrow IPC *file*: ``pyarrow.ipc.open_file(path)`` reads any
batch without loading the others; ``pyarrow.ipc.open_file(path).read_all()`` or ``read_features`` for all):

========================  ==============================================  ========================================
column                    type                                            meaning
========================  ==============================================  ========================================
``line``                  int64                                           0-based line number in the input
``tokens``                list<string> [T]                                word pieces, ``[CLS]``/``[SEP]`` included
``token_type_ids``        list<int8> [T]                                  0 = segment A, 1 = segment B
``offsets``               list<fixed_size_list<int32, 2>> [T]             ``(start, end)`` characters in the
                                                                          piece's segment text; (-1, -1) for
                                                                          ``[CLS]``/``[SEP]``
``words``                 list<string> [W]                                the words (BERT pre-tokenizer) of A
                                                                          then B (only for word pooling)
``word_offsets``          list<fixed_size_list<int32, 2>> [W]             their character spans
``word_type_ids``         list<int8> [W]                                  their segments
``layer_<i>``             pooling ``none``: list<fixed_size_list<dtype,    one column per requested layer ``i``
                          H>> [T]; ``first-piece`` / ``mean-word``:        (as given, e.g. ``layer_-1``)
                          list<fixed_size_list<dtype, H>> [W];
                          ``cls`` / ``mean-sentence``:
                          fixed_size_list<dtype, H>
========================  ==============================================  ========================================

T = pieces of the line (at most ``max_seq_length``), W = its words that kept at least one piece, H = hidden size,
dtype float32 (default) or float16. The schema metadata (``bertprep``) records the model, layers, pooling,
hidden size and casing.

Pooling (applied per layer): ``first-piece`` takes each word's first piece (the paper's NER input),
``mean-word`` the mean of a word's pieces, ``cls`` the ``[CLS]`` vector, ``mean-sentence`` the mean over every
piece of the sequence, ``[CLS]`` and ``[SEP]`` included (the attention-mask mean of sentence-transformers).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from bertprep.bert_model.collate import truncate_seq_pair
from bertprep.bert_model.hf.interop import load_model_source, max_sequence_length, resolve_do_lower_case
from bertprep.bert_model.inference.config import FeatureConfig
from bertprep.bert_model.models.bert import BertConfig, BertModel
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertModel
from bertprep.bert_model.runtime import resolve_device
from bertprep.core import strict_json
from bertprep.core.atomic import atomic_file
from bertprep.core.normalization import resolve_strip_accents_setting
from bertprep.core.pretrained_tokenizer import PretrainedTokenizer
from bertprep.core.vocab_files import WordPieceTokenizer

logger = logging.getLogger(__name__)

PAIR_SEPARATOR = " ||| "


# ------------------------------------------------------------------------------------------ the encoder


def encoder_hidden_states(
    encoder: BertModel | ModernBertModel,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Every hidden state of the encoder, as ``transformers`` ``output_hidden_states=True`` returns them.

    Args:
        encoder: a ``BertModel`` or ``ModernBertModel``.
        input_ids, token_type_ids, attention_mask: int [batch_size, seq_length] (see ``BertModel.forward``;
            ModernBERT has no segment embeddings and ignores ``token_type_ids``).
    Returns:
        L + 1 float tensors of shape [batch_size, seq_length, hidden_size]: the embedding output, then the
        output of each of the L layers (the last equals the encoder's ``last_hidden_state``: for ModernBERT the
        output after the final LayerNorm, what its MLM and classification heads read).
    """
    out = encoder(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask, output_hidden_states=True)
    return [*out.hidden_states[:-1], out.last_hidden_state]


def default_layers(num_hidden_layers: int) -> tuple[int, ...]:
    """The layers written when none are given: the last ``min(4, num_hidden_layers)`` (``-1, -2, ...``)."""
    return tuple(-i for i in range(1, min(4, num_hidden_layers) + 1))


def resolve_layers(layers: Sequence[int], num_hidden_layers: int) -> list[int]:
    """Requested layer numbers -> indices into ``encoder_hidden_states`` (0..L).

    Raises ``ValueError`` for a layer outside ``-(L+1)..L`` or a repeated layer.
    """
    out = []
    for layer in layers:
        if not -(num_hidden_layers + 1) <= layer <= num_hidden_layers:
            raise ValueError(
                f"layer {layer} does not exist: the model has {num_hidden_layers} layers, so layers are "
                f"0 (embeddings) .. {num_hidden_layers}, or -1 (last) .. -{num_hidden_layers + 1}"
            )
        out.append(layer % (num_hidden_layers + 1))
    if len(set(out)) != len(out):
        raise ValueError(f"layers {list(layers)} name the same layer twice")
    return out


def load_encoder(
    model_dir: str, *, do_lower_case: bool | None = None
) -> tuple[BertModel | ModernBertModel, WordPieceTokenizer | PretrainedTokenizer, BertConfig | ModernBertConfig]:
    """The bare encoder (weights of any bertprep checkpoint, fine-tuned head or Hugging Face BERT directory)
    and its tokenizer, in eval mode.

    Raises ``FileNotFoundError`` / ``ValueError`` when the directory holds no BERT weights or no vocab.
    """
    source = load_model_source(model_dir)
    if source.vocab_tokens is None:
        raise ValueError(f"{model_dir} has no vocab.txt or tokenizer.json beside its weights")
    bert: BertModel | ModernBertModel
    if isinstance(source.config, ModernBertConfig):
        bert = ModernBertModel(source.config)
        weights = {k[len("model.") :]: v for k, v in source.state_dict.items() if k.startswith("model.")}
        try:
            bert.load_state_dict(weights, strict=True)
        except RuntimeError as err:
            raise ValueError(f"{model_dir}: the weights do not fit a ModernBERT encoder ({err})") from None
    else:
        bert = _load_bert_encoder(source, model_dir)
    if source.tokenizer is not None:  # a BPE / Unigram tokenizer (RoBERTa's, ModernBERT's) normalises text itself
        return bert.eval(), source.tokenizer, source.config
    lower = resolve_do_lower_case(do_lower_case, source.do_lower_case, source.vocab_tokens)
    # accent stripping as recorded with the model (a Korean model built with --no-strip-accents keeps it)
    strip = resolve_strip_accents_setting(None, source.strip_accents, source.do_lower_case, lower)
    tokenizer = WordPieceTokenizer.from_tokens(source.vocab_tokens, lower, strip)
    return bert.eval(), tokenizer, source.config


def _load_bert_encoder(source, model_dir: str) -> BertModel:
    """The ``BertModel`` of a BERT source (any head's ``bert.*`` weights; the pooler is not used)."""
    bert = BertModel(source.config, add_pooling_layer=False)
    own = bert.state_dict()
    weights = {k[len("bert.") :]: v for k, v in source.state_dict.items() if k.startswith("bert.")}
    missing = [k for k in own if k not in weights]
    if missing:
        raise ValueError(f"{model_dir}: the weights lack encoder parameters {missing[:3]}; is it a BERT model?")
    bert.load_state_dict({k: v for k, v in weights.items() if k in own}, strict=False)
    return bert


# ----------------------------------------------------- the result (the settings: config.FeatureConfig)


@dataclass
class FeatureResult:
    output_file: str
    lines: int
    """Rows written (non-empty input lines)."""
    pieces: int
    """Word pieces encoded, [CLS]/[SEP] included."""
    truncated: int
    """Lines cut to ``max_seq_length``."""


# -------------------------------------------------------------------------------------------- reading


def read_lines(path: str) -> Iterator[tuple[int, str, str | None]]:
    """``(line number, text_a, text_b or None)`` of every non-empty line, lazily (``A ||| B`` is a pair)."""
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            if "|||" in line:
                text_a, text_b = line.split("|||", 1)
                yield number, text_a.strip(), text_b.strip()
            else:
                yield number, line.strip(), None


def _batches(items: Iterator, size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# -------------------------------------------------------------------------------------------- writing


def _vectors(values: np.ndarray, hidden: int, dtype: pa.DataType) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), type=dtype), hidden)


def _lists(values: pa.Array, lengths: Sequence[int]) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _pairs(values: Sequence[Sequence[int]] | np.ndarray) -> pa.FixedSizeListArray:
    flat = np.asarray(values, dtype=np.int32).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.int32()), 2)


def feature_schema(config: FeatureConfig, hidden_size: int, metadata: dict[str, str] | None = None) -> pa.Schema:
    """The output schema (see the module docstring) of a config whose ``layers`` are resolved (not None)."""
    assert config.layers is not None, "extract_features resolves the default layers first"
    value = pa.float16() if config.dtype == "float16" else pa.float32()
    vector = pa.list_(value, hidden_size)
    pair = pa.list_(pa.int32(), 2)
    fields = [
        pa.field("line", pa.int64()),
        pa.field("tokens", pa.list_(pa.string())),
        pa.field("token_type_ids", pa.list_(pa.int8())),
        pa.field("offsets", pa.list_(pair)),
    ]
    if config.pooling in ("first-piece", "mean-word"):
        fields += [
            pa.field("words", pa.list_(pa.string())),
            pa.field("word_offsets", pa.list_(pair)),
            pa.field("word_type_ids", pa.list_(pa.int8())),
        ]
    layer_type = vector if config.pooling in ("cls", "mean-sentence") else pa.list_(vector)
    fields += [pa.field(f"layer_{layer}", layer_type) for layer in config.layers]
    return pa.schema(fields, metadata=metadata)


class _Row(NamedTuple):
    """One input line, encoded: its pieces (``[CLS]`` A ``[SEP]`` [B ``[SEP]``]) and its words."""

    line: int
    ids: list[int]
    types: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    word_of: list[int]
    """Index in ``words`` of each piece's word; -1 for ``[CLS]`` / ``[SEP]``."""
    words: list[str]
    word_offsets: list[list[int]]
    word_types: list[int]


def extract_features(config: FeatureConfig) -> FeatureResult:
    """Write the activations of ``config.layers`` for every line of ``config.input_file`` (module docstring).

    Raises:
        FileNotFoundError: the input or model does not exist.
        FileExistsError: the output exists and ``overwrite`` is False.
        ValueError: a layer the model does not have, or a model without vocab.
    """
    _check_paths(config)
    device = resolve_device(config.device)
    bert, tokenizer, bert_config = load_encoder(config.model, do_lower_case=config.do_lower_case)
    max_seq_length = config.max_seq_length
    if max_seq_length is None:
        max_seq_length = min(128, max_sequence_length(bert_config))
        config = dataclasses.replace(config, max_seq_length=max_seq_length)
    if max_seq_length > max_sequence_length(bert_config):
        raise ValueError(
            f"max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
            f"{max_sequence_length(bert_config)}"
        )
    layers = config.layers
    if layers is None:
        layers = default_layers(bert_config.num_hidden_layers)
        config = dataclasses.replace(config, layers=layers)
    indices = resolve_layers(layers, bert_config.num_hidden_layers)
    bert.to(device)
    settings = {
        **{k: v for k, v in asdict(config).items() if k not in ("overwrite", "progress", "device")},
        "layer_indices": indices,
        "hidden_size": bert_config.hidden_size,
        "do_lower_case": tokenizer.do_lower_case,
        "model": os.path.abspath(config.model),
    }
    schema = feature_schema(config, bert_config.hidden_size, {"bertprep": strict_json.dumps(settings)})
    os.makedirs(os.path.dirname(os.path.abspath(config.output_file)), exist_ok=True)
    lines = pieces = truncated = 0
    bar = tqdm(disable=not config.progress, unit="line", desc="extract-features")
    try:
        with (
            atomic_file(config.output_file) as tmp,
            pa.OSFile(tmp, "wb") as sink,
            pa.ipc.new_file(sink, schema) as writer,
        ):
            for batch in _batches(read_lines(config.input_file), config.batch_size):
                rows, cut = _encode_batch(tokenizer, batch, max_seq_length)
                chosen = _layer_activations(bert, rows, indices, tokenizer.pad_token_id, device)
                writer.write_batch(_record_batch(rows, chosen, config, schema, bert_config.hidden_size))
                lines += len(rows)
                pieces += sum(len(r.ids) for r in rows)
                truncated += cut
                bar.update(len(rows))
            if lines == 0:
                raise ValueError(f"{config.input_file}: no non-empty lines")
    finally:
        bar.close()
    if truncated:
        logger.info("%d of %d lines were cut to max_seq_length=%d", truncated, lines, max_seq_length)
    return FeatureResult(config.output_file, lines, pieces, truncated)


def _check_paths(config: FeatureConfig) -> None:
    """Raise FileExistsError / FileNotFoundError / ValueError for an output that exists (without
    ``overwrite``), a missing input, or an output that is the input."""
    if os.path.exists(config.output_file) and not config.overwrite:
        raise FileExistsError(f"{config.output_file} exists; choose another --output or pass --overwrite")
    if not os.path.isfile(config.input_file):
        raise FileNotFoundError(f"no such input file: {config.input_file}")
    if os.path.abspath(config.output_file) == os.path.abspath(config.input_file):
        raise ValueError(f"--output {config.output_file} is the input file; choose another name")


def _encode_batch(
    tokenizer: WordPieceTokenizer | PretrainedTokenizer, batch: list[tuple[int, str, str | None]], max_seq_length: int
) -> tuple[list[_Row], int]:
    """Encode a batch of ``read_lines`` items, pairs truncated as the original (``truncate_seq_pair``); returns
    the rows and how many lines were cut to ``max_seq_length``. Segment B gets the tokenizer's second token type
    (0 for RoBERTa, which has one)."""
    pair_type = tokenizer.create_token_type_ids_from_sequences([], [0])[-1]
    cls_token, sep_token = tokenizer.tokens[tokenizer.cls_token_id], tokenizer.tokens[tokenizer.sep_token_id]
    enc_a = tokenizer.encode_batch([a for _, a, _ in batch])
    enc_b = tokenizer.encode_batch([b or "" for _, _, b in batch])
    rows, truncated = [], 0
    for (number, text_a, text_b), a, b in zip(batch, enc_a, enc_b, strict=True):
        n_a, n_b = len(a.ids), len(b.ids) if text_b is not None else 0
        if text_b is None:
            keep_a, keep_b = min(n_a, max_seq_length - 2), 0
        else:
            ids_a, ids_b = list(range(n_a)), list(range(n_b))
            truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
            keep_a, keep_b = len(ids_a), len(ids_b)
        truncated += (keep_a < n_a) or (keep_b < n_b)
        row = _Row(number, [tokenizer.cls_token_id], [0], [cls_token], [(-1, -1)], [-1], [], [], [])
        _append_segment(row, a, keep_a, 0, text_a, tokenizer.sep_token_id, sep_token)
        if text_b is not None:
            _append_segment(row, b, keep_b, pair_type, text_b, tokenizer.sep_token_id, sep_token)
        rows.append(row)
    return rows, truncated


def _append_segment(row: _Row, enc: Any, keep: int, seg: int, text: str, sep_id: int, sep_token: str = "[SEP]") -> None:
    """Append the first ``keep`` pieces of the encoding ``enc`` of ``text`` (segment ``seg``), then ``[SEP]``,
    to ``row``; a word's span runs from its first kept piece to its last."""
    first_word = len(row.words)
    word_index: dict[int, int] = {}
    for j in range(keep):
        w = enc.word_ids[j]
        if w is not None and w not in word_index:
            word_index[w] = len(row.words)
            row.words.append("")
            row.word_offsets.append([enc.offsets[j][0], enc.offsets[j][1]])
            row.word_types.append(seg)
        k = word_index.get(w, -1) if w is not None else -1
        if k >= 0:
            row.word_offsets[k][1] = enc.offsets[j][1]
        row.ids.append(enc.ids[j])
        row.types.append(seg)
        row.tokens.append(enc.tokens[j])
        row.offsets.append(tuple(enc.offsets[j]))
        row.word_of.append(k)
    for k in range(first_word, len(row.words)):
        row.words[k] = text[row.word_offsets[k][0] : row.word_offsets[k][1]]
    row.ids.append(sep_id)
    row.types.append(seg)
    row.tokens.append(sep_token)
    row.offsets.append((-1, -1))
    row.word_of.append(-1)


def _layer_activations(
    bert: BertModel | ModernBertModel, rows: list[_Row], indices: list[int], pad_id: int, device: torch.device
) -> list[np.ndarray]:
    """Run the encoder on the padded batch of ``rows``; the float32 hidden states of the layers ``indices``,
    each a (B, T, H) array (T = the longest row)."""
    T = max(len(r.ids) for r in rows)
    input_ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), T), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r.ids)] = torch.tensor(r.ids)
        token_type_ids[i, : len(r.types)] = torch.tensor(r.types)
        attention_mask[i, : len(r.ids)] = 1
    with torch.no_grad():
        states = encoder_hidden_states(bert, input_ids.to(device), token_type_ids.to(device), attention_mask.to(device))
        chosen = [states[i].float().cpu().numpy() for i in indices]  # each (B, T, H)
    del states
    return chosen


def _record_batch(
    rows: list[_Row], chosen: list[np.ndarray], config: FeatureConfig, schema: pa.Schema, hidden_size: int
) -> pa.RecordBatch:
    """The output rows of a batch (see the module docstring): pieces, words (word pooling) and each chosen
    layer's activations, pooled and cast to ``config.dtype``."""
    assert config.layers is not None, "extract_features resolves the default layers first"
    np_dtype = np.float16 if config.dtype == "float16" else np.float32
    pa_dtype = pa.float16() if config.dtype == "float16" else pa.float32()
    lengths = [len(r.ids) for r in rows]
    columns = {
        "line": pa.array([r.line for r in rows], type=pa.int64()),
        "tokens": _lists(pa.array([t for r in rows for t in r.tokens], type=pa.string()), lengths),
        "token_type_ids": _lists(pa.array(np.concatenate([r.types for r in rows]).astype(np.int8)), lengths),
        "offsets": _lists(_pairs([o for r in rows for o in r.offsets]), lengths),
    }
    word_counts = [len(r.words) for r in rows]
    if config.pooling in ("first-piece", "mean-word"):
        columns["words"] = _lists(pa.array([w for r in rows for w in r.words], type=pa.string()), word_counts)
        columns["word_offsets"] = _lists(
            _pairs([tuple(o) for r in rows for o in r.word_offsets] or np.zeros((0, 2))), word_counts
        )
        columns["word_type_ids"] = _lists(
            pa.array(np.asarray([t for r in rows for t in r.word_types], dtype=np.int8)), word_counts
        )
    for layer, values in zip(config.layers, chosen, strict=True):
        pooled = _pool(values, rows, config.pooling)
        if config.pooling in ("cls", "mean-sentence"):
            columns[f"layer_{layer}"] = _vectors(pooled.astype(np_dtype), hidden_size, pa_dtype)
        else:
            counts = lengths if config.pooling == "none" else word_counts
            columns[f"layer_{layer}"] = _lists(_vectors(pooled.astype(np_dtype), hidden_size, pa_dtype), counts)
    return pa.record_batch([columns[f.name] for f in schema], schema=schema)


def _pool(values: np.ndarray, rows: list[_Row], pooling: str) -> np.ndarray:
    """Activations of one layer (B, T, H) -> the rows of the output column, concatenated over the batch:
    (sum of T_i, H) for ``none``, (sum of W_i, H) for word pooling, (B, H) for ``cls`` / ``mean-sentence``."""
    if pooling == "cls":
        return values[:, 0]
    if pooling == "mean-sentence":
        return np.stack([values[i, : len(r.ids)].mean(axis=0) for i, r in enumerate(rows)])
    if pooling == "none":
        return np.concatenate([values[i, : len(r.ids)] for i, r in enumerate(rows)])
    out = []
    for i, r in enumerate(rows):
        word_of = np.asarray(r.word_of)
        for k in range(len(r.words)):
            positions = np.flatnonzero(word_of == k)
            out.append(values[i, positions[0]] if pooling == "first-piece" else values[i, positions].mean(axis=0))
    return np.stack(out) if out else np.zeros((0, values.shape[-1]), dtype=values.dtype)


def read_features(path: str) -> pa.Table:
    """The whole output file as a table (memory-mapped: columns are read when touched)."""
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def feature_settings(path: str) -> dict:
    """The settings recorded in an output file's schema metadata (model, layers, pooling, hidden size...)."""
    with pa.memory_map(path) as source:
        metadata = pa.ipc.open_file(source).schema.metadata or {}
    return json.loads(metadata.get(b"bertprep", b"{}"))
