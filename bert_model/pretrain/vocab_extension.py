"""``train --model`` a model whose vocab the shards' vocab extends (``build-vocab --extend``).

What comes in: the model a run starts from (a bertprep checkpoint or a Hugging Face directory, read as a
``hf.interop.ModelSource``) and the shards' ``vocab.txt``. What goes out: the same source with its
vocab-sized weights grown to the shards' vocab, or the source unchanged when the two vocabs are equal.

The shards' vocab *extends* the model's when every id of the model's vocab holds the same token, except
``[unusedK]`` slots that took a new piece, and any further entries are appended after the model's last id.
Anything else is refused (:func:`check_extension`), since the shards' ids index the model's rows.

Grown weights: the word embeddings and the MLM decoder tied to them, and the MLM output bias (BERT:
``bert.embeddings.word_embeddings``, ``cls.predictions.decoder``, ``cls.predictions.bias``; ModernBERT:
``model.embeddings.tok_embeddings``, the tied ``decoder.weight`` and ``decoder.bias``). A new
token's row starts as the mean of the old rows of the pieces its text splits into under the *old* vocab
(``psilocybin`` -> mean of ``psi ##lo ##cy ##bin``; a ``##`` entry splits as a word's continuation), the
usual practice (e.g. Hewitt 2021, "Initializing new word embeddings for pretrained language models"; what
``transformers`` users do after ``resize_token_embeddings``). Text the old vocab cannot split gets the
``[UNK]`` row. Repurposed ``[unusedK]`` rows are re-initialised the same way: their old values were never
trained.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from bertprep.bert_model.hf.interop import ModelSource
from bertprep.core.vocab_files import CONTINUING_SUBWORD_PREFIX, is_unused_slot, wordpiece_split

logger = logging.getLogger("bertprep.train")

#: The weights indexed by vocab id (first dimension), under Hugging Face names (tied aliases included): BERT's
#: (``BertForPreTraining`` / ``BertForMaskedLM``), then ModernBERT's (``ModernBertForMaskedLM``, whose
#: ``decoder.weight`` is ``modernbert.TIED_WEIGHTS_KEYS``' alias of the token embeddings). The two sets share no
#: name; a state dict holds those of its own architecture.
VOCAB_SIZED_WEIGHTS = (
    "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.weight",
    "cls.predictions.bias",
    "cls.predictions.decoder.bias",
    "model.embeddings.tok_embeddings.weight",
    "decoder.weight",
    "decoder.bias",
)


def extension_ids(model_tokens: list[str], shard_tokens: list[str]) -> list[int] | None:
    """The ids of ``shard_tokens`` that are new pieces when it extends ``model_tokens`` (module docstring);
    ``[]`` when the two are equal; None when it is not an extension."""
    if len(shard_tokens) < len(model_tokens):
        return None
    old = set(model_tokens)
    new_ids = []
    # the shards' vocab may be longer (appended pieces, counted below)
    for i, (before, after) in enumerate(zip(model_tokens, shard_tokens, strict=False)):
        if before == after:
            continue
        if is_unused_slot(before) and after not in old:
            new_ids.append(i)
            continue
        return None
    return new_ids + list(range(len(model_tokens), len(shard_tokens)))


def check_extension(model_tokens: list[str], shard_tokens: list[str], *, shards: str, model: str) -> list[int]:
    """:func:`extension_ids`, or a ``ValueError`` naming the first id where the shards' vocab breaks the model's."""
    new_ids = extension_ids(model_tokens, shard_tokens)
    if new_ids is not None:
        return new_ids
    old = set(model_tokens)
    # either list may be longer; i is read after the loop's break
    for i, (before, after) in enumerate(zip(model_tokens, shard_tokens, strict=False)):  # noqa: B007
        if before != after and not (is_unused_slot(before) and after not in old):
            what = "an entry the model's vocab already has elsewhere" if after in old else "a different token"
            break
    else:
        i, before, after, what = len(shard_tokens), model_tokens[len(shard_tokens)], None, "the shards' vocab ends"
    raise ValueError(
        f"the vocab of shards {shards} ({len(shard_tokens):,} entries) does not extend the vocab of {model} "
        f"({len(model_tokens):,}): at id {i} the model has {before!r} and the shards {after!r} ({what}). An "
        "extended vocab keeps every id of the model's vocab, replacing only [unusedK] slots and appending the "
        f"rest: make it with bertprep build-vocab --extend {model}/vocab.txt, then make the shards with it"
    )


def _split_with_old_vocab(token: str, old: set[str]) -> list[str] | None:
    if token.startswith(CONTINUING_SUBWORD_PREFIX) and len(token) > len(CONTINUING_SUBWORD_PREFIX):
        return wordpiece_split(token[len(CONTINUING_SUBWORD_PREFIX) :], old, continuation=True)
    return wordpiece_split(token, old)


def grow_vocab_weights(
    state_dict: dict[str, torch.Tensor], model_tokens: list[str], shard_tokens: list[str], new_ids: list[int]
) -> tuple[dict[str, torch.Tensor], dict[str, list[str]]]:
    """``state_dict`` with each of :data:`VOCAB_SIZED_WEIGHTS` it holds grown to ``len(shard_tokens)`` rows
    and the rows of ``new_ids`` set to the mean of their pieces' old rows (module docstring).

    Returns:
        ``(state dict, pieces)``: the new weights (other tensors shared, not copied) and, for each new
        token, the old entries its row is the mean of.
    Raises:
        ValueError: a vocab-sized weight whose rows are not the model's vocab size.
    """
    old = {t for t in model_tokens if not is_unused_slot(t)}
    old_id = {t: i for i, t in enumerate(model_tokens)}
    pieces: dict[str, list[str]] = {}
    for i in new_ids:
        token = shard_tokens[i]
        pieces[token] = _split_with_old_vocab(token, old) or ["[UNK]"]
    rows = {token: torch.tensor([old_id[p] for p in split]) for token, split in pieces.items()}
    grown = dict(state_dict)
    for name in VOCAB_SIZED_WEIGHTS:
        if name not in state_dict:
            continue
        weight = state_dict[name]
        if weight.shape[0] != len(model_tokens):
            raise ValueError(
                f"{name} has {weight.shape[0]:,} rows but the model's vocab.txt {len(model_tokens):,} entries; "
                "cannot grow it to the shards' vocab"
            )
        new = torch.empty((len(shard_tokens), *weight.shape[1:]), dtype=weight.dtype)
        new[: len(model_tokens)] = weight
        for i in new_ids:
            new[i] = weight[rows[shard_tokens[i]]].float().mean(0).to(weight.dtype)
        grown[name] = new
    return grown, pieces


def extend_source_vocab(source: ModelSource, shard_tokens: list[str], *, shards: str) -> ModelSource:
    """``source`` with its vocab grown to ``shard_tokens`` when that extends it (logged: how many tokens, a
    few examples and the pieces their rows come from); ``source`` itself when the vocabs are equal, the
    model has no vocab.txt or the shards' vocab is not larger and not an extension (the usual vocab checks
    then say what is wrong).

    Raises:
        ValueError: the shards' vocab is larger than the model's but does not extend it (:func:`check_extension`).
    """
    model_tokens = source.vocab_tokens
    if model_tokens is None or model_tokens == shard_tokens:
        return source
    new_ids: list[int] | None
    if len(shard_tokens) > len(model_tokens):
        new_ids = check_extension(model_tokens, shard_tokens, shards=shards, model=source.path)
    else:
        new_ids = extension_ids(model_tokens, shard_tokens)
    if new_ids is None:
        return source
    state_dict, pieces = grow_vocab_weights(source.state_dict, model_tokens, shard_tokens, new_ids)
    in_slots = sum(i < len(model_tokens) for i in new_ids)
    examples = "; ".join(f"{t!r} = mean({' '.join(p)})" for t, p in list(pieces.items())[:5])
    logger.info(
        "the vocab of shards %s extends %s's: %d new tokens (%d in [unusedK] slots, %d appended; vocab %d -> %d); "
        "their embedding and MLM bias rows start as the mean of their pieces under the old vocab, e.g. %s",
        shards,
        source.path,
        len(new_ids),
        in_slots,
        len(new_ids) - in_slots,
        len(model_tokens),
        len(shard_tokens),
        examples,
    )
    return dataclasses.replace(
        source,
        config=dataclasses.replace(source.config, vocab_size=len(shard_tokens)),
        state_dict=state_dict,
        vocab_tokens=list(shard_tokens),
    )
