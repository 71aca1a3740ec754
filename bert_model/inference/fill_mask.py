"""Fill-mask: the word pieces a pre-trained model puts at each ``[MASK]`` of a sentence.

The quickest look at what masked-LM pre-training taught a model (the paper's MLM task, section 3.1, Task
#1, applied at inference): ``"the capital of france is [MASK] ."`` should give ``paris`` near the top, while
a model on the unigram plateau answers ``the , . of``. The scores are the model's own MLM head (transform +
decoder tied to the word embeddings) softmaxed over the vocab at each masked position, as ``transformers``'
``fill-mask`` pipeline computes them.

A literal ``[MASK]`` in the text is the mask token; the rest is tokenized as everywhere in bertprep (the
original's rules: a ``[SEP]`` or other bracketed text inside a sentence is split like any other word). A model
with a BPE / Unigram tokenizer (RoBERTa's ``<mask>``, ModernBERT's ``[MASK]``) gets its text encoded whole by that
tokenizer, special tokens and template included, as ``transformers``' ``fill-mask`` pipeline encodes it; there
``[MASK]`` also stands for the tokenizer's own mask token (``<mask>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from bertprep.bert_model.hf.interop import (
    MODERNBERT_MLM_ARCHITECTURE,
    PRETRAINING_ARCHITECTURE,
    ROBERTA_MLM_ARCHITECTURES,
    build_model,
    load_model_source,
    load_pretraining_weights,
    max_sequence_length,
    resolve_do_lower_case,
)
from bertprep.bert_model.inference.config import FillMaskConfig
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.modernbert import ModernBertForMaskedLM
from bertprep.bert_model.runtime import resolve_device
from bertprep.core.normalization import resolve_strip_accents_setting
from bertprep.core.pretrained_tokenizer import PretrainedTokenizer
from bertprep.core.vocab_files import WordPieceTokenizer

MASK_TOKEN = "[MASK]"

#: The models with a trained MLM head that fill-mask runs (``load_mlm_model``).
MlmModel = BertForPreTraining | ModernBertForMaskedLM

#: Source architectures that carry a trained MLM head.
MLM_ARCHITECTURES = (
    PRETRAINING_ARCHITECTURE,
    "BertForMaskedLM",
    MODERNBERT_MLM_ARCHITECTURE,
    *ROBERTA_MLM_ARCHITECTURES,
)


@dataclass
class MaskPrediction:
    """The candidates for one ``[MASK]``."""

    position: int
    """Index of the ``[MASK]`` in ``FillMaskResult.pieces`` (0 is ``[CLS]``)."""
    candidates: list[tuple[str, float]]
    """``(piece, probability)`` pairs, most probable first; probabilities are in [0, 1] over the vocab."""


@dataclass
class FillMaskResult:
    """One input sentence, its pieces and the predictions at its masks (in order)."""

    text: str
    pieces: list[str]
    """``[CLS]``, the text's word pieces with ``[MASK]`` kept, ``[SEP]``."""
    masks: list[MaskPrediction] = field(default_factory=list)

    def filled(self) -> str:
        """The text with each ``[MASK]`` replaced by its best candidate (pieces joined as WordPiece does)."""
        pieces = list(self.pieces[1:-1])
        for mask in self.masks:
            pieces[mask.position - 1] = mask.candidates[0][0]
        return " ".join(pieces).replace(" ##", "")


def load_mlm_model(
    path: str, *, do_lower_case: bool | None = None
) -> tuple[MlmModel, WordPieceTokenizer | PretrainedTokenizer]:
    """A model with a trained MLM head and its tokenizer, from a bertprep checkpoint or run directory (BERT or
    ModernBERT), or a Hugging Face ``BertForPreTraining`` / ``BertForMaskedLM`` / ``ModernBertForMaskedLM``
    directory (``bertprep export`` writes one).

    Raises:
        FileNotFoundError: ``path`` is neither (see ``hf.interop.load_model_source``).
        ValueError: the source has no MLM head (e.g. a bare ``BertModel`` or a fine-tuned classifier: its
            predictions would come from random weights) or no ``vocab.txt``.
    """
    source = load_model_source(path)
    if source.architecture not in MLM_ARCHITECTURES:
        raise ValueError(
            f"{source.path} is a {source.architecture}, which has no masked-LM head, so fill-mask "
            f"would show random weights; give a {' or '.join(MLM_ARCHITECTURES)} (e.g. a bertprep "
            "pre-training checkpoint: continue pre-training it with bertprep train --model)"
        )
    if source.vocab_tokens is None:
        raise ValueError(f"{source.path} has no vocab.txt or tokenizer.json beside its weights")
    model: MlmModel
    if source.architecture == MODERNBERT_MLM_ARCHITECTURE:
        built = build_model(source)  # weights loaded strictly
        assert isinstance(built, ModernBertForMaskedLM), "build_model builds this architecture's class"
        model = built
    else:
        assert isinstance(source.config, BertConfig)  # (BERT's or RoBERTa's, as load_model_source reads it)
        model = BertForPreTraining(source.config)
        initialised, _ = load_pretraining_weights(model, source.state_dict)
        head = [k for k in initialised if k.startswith("cls.predictions.")]
        if head:
            raise ValueError(f"{source.path} lacks the masked-LM head weights {head}")
    if source.tokenizer is not None:  # a BPE / Unigram tokenizer normalises text itself
        return model.eval(), source.tokenizer
    lower = resolve_do_lower_case(do_lower_case, source.do_lower_case, source.vocab_tokens)
    # accent stripping as recorded with the model (a Korean model built with --no-strip-accents keeps it)
    strip = resolve_strip_accents_setting(None, source.strip_accents, source.do_lower_case, lower)
    return model.eval(), WordPieceTokenizer.from_tokens(source.vocab_tokens, lower, strip)


def encode_with_masks(tokenizer: WordPieceTokenizer | PretrainedTokenizer, text: str) -> tuple[list[int], list[str]]:
    """``[CLS] text [SEP]`` as ids and pieces, each literal ``[MASK]`` in ``text`` one mask token; a BPE / Unigram
    tokenizer encodes ``text`` whole with its own template (``<s> text </s>``), its mask token written as it
    spells it (``<mask>``) or as ``[MASK]``.

    Raises ``ValueError`` when ``text`` holds no mask token.
    """
    if isinstance(tokenizer, PretrainedTokenizer):
        mask = tokenizer.mask_token
        if mask not in text:
            text = text.replace(MASK_TOKEN, mask)
        encoding = tokenizer.full.encode(text)
        if tokenizer.mask_token_id not in encoding.ids:
            raise ValueError(f"no {mask} in {text!r}; write {mask} where the model should fill in a piece")
        return list(encoding.ids), list(encoding.tokens)
    parts = text.split(MASK_TOKEN)
    if len(parts) < 2:
        raise ValueError(f"no {MASK_TOKEN} in {text!r}; write {MASK_TOKEN} where the model should fill in a piece")
    mask_id = tokenizer.token_id(MASK_TOKEN)
    ids, pieces = [tokenizer.cls_token_id], ["[CLS]"]
    for i, encoding in enumerate(tokenizer.encode_batch(parts)):
        if i:
            ids.append(mask_id)
            pieces.append(MASK_TOKEN)
        ids.extend(encoding.ids)
        pieces.extend(encoding.tokens)
    ids.append(tokenizer.sep_token_id)
    pieces.append("[SEP]")
    return ids, pieces


def fill_mask_texts(config: FillMaskConfig, texts: Sequence[str]) -> list[FillMaskResult]:
    """``bertprep fill-mask``: the model of ``config.model_dir`` on ``config.device``, then :func:`fill_mask`.

    Raises:
        ValueError, FileNotFoundError: as :func:`load_mlm_model` and :func:`fill_mask`; a CUDA device where
            there is none (``runtime.resolve_device``).
    """
    device = resolve_device(config.device)
    model, tokenizer = load_mlm_model(config.model_dir, do_lower_case=config.do_lower_case)
    model.to(device)
    return fill_mask(model, tokenizer, texts, top_k=config.top_k, batch_size=config.batch_size, device=device)


@torch.no_grad()
def fill_mask(
    model: MlmModel,
    tokenizer: WordPieceTokenizer | PretrainedTokenizer,
    texts: Sequence[str],
    *,
    top_k: int = FillMaskConfig.top_k,
    batch_size: int = FillMaskConfig.batch_size,
    device: torch.device | str = "cpu",
) -> list[FillMaskResult]:
    """Top-``top_k`` pieces at every ``[MASK]`` of each text.

    Args:
        model: a ``BertForPreTraining`` or ``ModernBertForMaskedLM`` with a trained MLM head (``load_mlm_model``),
            on ``device``.
        tokenizer: its vocab's tokenizer.
        texts: sentences with one or more literal ``[MASK]``; each is encoded as one segment
            (``token_type_ids`` all 0), at most ``max_position_embeddings`` pieces with ``[CLS]``/``[SEP]``.
        top_k: candidates per mask (1..vocab size).
    Returns:
        One ``FillMaskResult`` per text, in order.
    Raises:
        ValueError: a text without ``[MASK]``, too long for the model, or a bad ``top_k``.
    """
    vocab_size = model.config.vocab_size
    if not 1 <= top_k <= vocab_size:
        raise ValueError(f"top_k must be between 1 and the vocab size {vocab_size}, got {top_k}")
    mask_id = tokenizer.mask_token_id
    encoded = [encode_with_masks(tokenizer, t) for t in texts]
    limit = max_sequence_length(model.config)
    for text, (ids, _) in zip(texts, encoded, strict=True):
        if len(ids) > limit:
            raise ValueError(f"{text[:60]!r}... is {len(ids)} pieces with [CLS]/[SEP]; the model takes at most {limit}")
    results: list[FillMaskResult] = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        input_ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)  # (B, T)
        for row, (ids, _) in enumerate(chunk):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        where = (input_ids == mask_id).nonzero().tolist()  # [(b, t), ...]
        rows = torch.tensor([b for b, _ in where], dtype=torch.long, device=input_ids.device)
        cols = torch.tensor([t for _, t in where], dtype=torch.long, device=input_ids.device)
        logits = _mlm_logits(model, input_ids, attention_mask, rows, cols).float()  # (M, V)
        probs, top = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)  # (M, k)
        by_row: dict[int, list[MaskPrediction]] = {}
        for (b, t), p, k in zip(where, probs.tolist(), top.tolist(), strict=True):
            by_row.setdefault(b, []).append(
                MaskPrediction(t, [(tokenizer.tokens[i], float(q)) for i, q in zip(k, p, strict=True)])
            )
        for row, (_, pieces) in enumerate(chunk):
            results.append(FillMaskResult(texts[start + row], pieces, by_row.get(row, [])))
    return results


def _mlm_logits(
    model: MlmModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
) -> torch.Tensor:
    """MLM scores (M, V) at positions ``(rows, cols)`` of a padded batch, for BERT or ModernBERT."""
    hidden_states = model.base_model(input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
    return model.masked_lm_logits(hidden_states[rows, cols])  # (M, V)


__all__ = ["MLM_ARCHITECTURES", "FillMaskResult", "MaskPrediction", "encode_with_masks", "fill_mask", "load_mlm_model"]
