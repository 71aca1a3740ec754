"""The two vocabs ``build-vocab --model bpe|unigram`` trains beside BERT's WordPiece (``vocab.py``), composed from
Hugging Face ``tokenizers`` parts as the published models have them:

* **bpe**: byte-level BPE as RoBERTa and ModernBERT (GPT-2's): no normaliser (``--lowercase``: ``Lowercase``),
  the ``ByteLevel`` pre-tokenizer (GPT-2's split, each byte a symbol, ``Ġ`` for the space; no prefix space)
  and decoder, ``BpeTrainer`` over the 256 byte symbols, RoBERTa's post-processor (``<s> A </s>``,
  ``<s> A </s></s> B </s>``). Every text encodes: there is no unknown byte.
* **unigram**: a SentencePiece Unigram as XLM-R and DeBERTa-v3: ``NFKC`` then runs of spaces collapsed
  (``--lowercase``: then ``Lowercase``), the ``Metaspace`` pre-tokenizer and decoder (``▁`` before every
  word), ``UnigramTrainer``, the same layouts by ``TemplateProcessing``.

Both have XLM-R's and RoBERTa's special tokens ``<s>`` ``<pad>`` ``</s>`` ``<unk>`` ``<mask>`` (ids 0-4;
``<mask>`` absorbs the space before it, as RoBERTa's does), written to ``tokenizer.json``,
``tokenizer_config.json`` (``RobertaTokenizer`` / ``PreTrainedTokenizerFast``, which ``transformers.AutoTokenizer``
builds from ``tokenizer.json``) and ``special_tokens_map.json``; there is no ``vocab.txt`` (a BPE needs its
merges). ``pretrained_tokenizer.PretrainedTokenizer`` reads the directory back.

With ``special_tokens="bert"`` (``build-vocab --special-tokens bert``) either keeps BERT's tokens and template
instead, as ModernBERT's tokenizer does: ``[PAD]`` ``[UNK]`` ``[CLS]`` ``[SEP]`` ``[MASK]`` (ids 0-4, ``[MASK]``
absorbing the space before it as ModernBERT's does), the post-processor ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``
with ``token_type_ids`` 0 for A and 1 for B (a ``TemplateProcessing``, as BERT's ``tokenizer.json``), and
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast`` (ModernBERT's class), so that one ``tokenizer.json``
serves bertprep's trainer, transformers' and the trainers that load it through ``tokenizers``.

:func:`pad_with_unused` appends ``[unusedK]`` tokens (special added tokens, never produced from text) up to a
multiple of a size, as ModernBERT's vocab ends with ``[unused0]`` .. ``[unused82]`` at 50,368 = 787 x 64.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertprep.core import strict_json
from bertprep.core.vocab_files import (
    MODEL_MAX_LENGTH,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
)
from bertprep.core.vocab_files import SPECIAL_TOKENS as BERT_SPECIAL_TOKENS
from bertprep.pipeline.text.trainer_determinism import canonical_unigram_vocab

#: The special tokens of both, in id order (RoBERTa's 0-3, then the mask).
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
#: ``transformers``' names for them.
SPECIAL_TOKENS_MAP = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "sep_token": "</s>",
    "pad_token": "<pad>",
    "cls_token": "<s>",
    "mask_token": "<mask>",
}
#: ``build-vocab --special-tokens``: RoBERTa's (the default of bpe and unigram) or BERT's (ModernBERT's choice).
SPECIAL_TOKEN_STYLES = ("roberta", "bert")
#: Each style's special tokens in id order: BERT's as bertprep's WordPiece numbers them (``vocab_files``).
STYLE_TOKENS = {"roberta": SPECIAL_TOKENS, "bert": BERT_SPECIAL_TOKENS}
#: Each style's ``transformers`` names (BERT's: ModernBERT's ``special_tokens_map.json``).
STYLE_TOKENS_MAP = {
    "roberta": SPECIAL_TOKENS_MAP,
    "bert": {
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
    },
}
#: What a ``transformers`` tokenizer of the ``bert`` style returns (``tokenizer_config.json``), as BertTokenizer's.
BERT_MODEL_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")
#: ``transformers``' class for each (XLM-R's own rebuilds the pipeline from a sentencepiece model; the generic
#: fast tokenizer takes ``tokenizer.json`` as it is, ModernBERT's BERT-style BPE included).
TOKENIZER_CLASS = {"bpe": "RobertaTokenizer", "unigram": "PreTrainedTokenizerFast"}
#: The 256 byte symbols plus the special tokens: the smallest byte-level BPE.
MIN_BPE_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


def special_added_tokens(style: str = "roberta") -> list[AddedToken]:
    """The special tokens as the trainers take them (the mask strips the space on its left, as RoBERTa's and
    ModernBERT's do)."""
    return [AddedToken(t, special=True, lstrip=t in ("<mask>", "[MASK]")) for t in STYLE_TOKENS[style]]


def unk_token(style: str) -> str:
    return "[UNK]" if style == "bert" else "<unk>"


def bpe_tokenizer(lowercase: bool) -> Tokenizer:
    """An untrained byte-level BPE with RoBERTa's pipeline (see the module docstring)."""
    tokenizer = Tokenizer(models.BPE())
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def unigram_tokenizer(lowercase: bool) -> Tokenizer:
    """An untrained Unigram with XLM-R's pipeline (see the module docstring)."""
    tokenizer = Tokenizer(models.Unigram())
    steps = [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps + ([normalizers.Lowercase()] if lowercase else []))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    return tokenizer


def add_post_processor(tokenizer: Tokenizer, model: str, style: str = "roberta") -> None:
    """RoBERTa's layouts: ``<s> A </s>`` and ``<s> A </s></s> B </s>``, one token type; ``style`` ``bert``: BERT's
    ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, ``token_type_ids`` 1 for ``B [SEP]``."""
    if style == "bert":
        cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        return
    cls_id, sep_id = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    assert cls_id is not None and sep_id is not None, "trained with <s> and </s> (special_added_tokens)"
    if model == "bpe":
        tokenizer.post_processor = processors.RobertaProcessing(
            ("</s>", sep_id), ("<s>", cls_id), trim_offsets=True, add_prefix_space=False
        )
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", cls_id), ("</s>", sep_id)]
        )


def train_model(
    texts: Iterable[str],
    model: str,
    vocab_size: int,
    lowercase: bool,
    min_frequency: int,
    show_progress: bool,
    style: str = "roberta",
) -> Tokenizer:
    """Train a ``bpe`` or ``unigram`` tokenizer on ``texts`` (consumed once), with the special tokens and template
    of ``style`` (:data:`SPECIAL_TOKEN_STYLES`); the result has its post-processor.

    Raises:
        ValueError: the trainer refused ``vocab_size`` (Unigram: smaller than the corpus's characters).
    """
    trainer: trainers.Trainer
    if model == "bpe":
        tokenizer = bpe_tokenizer(lowercase)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            show_progress=show_progress,
            special_tokens=special_added_tokens(style),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tokenizer = unigram_tokenizer(lowercase)
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            show_progress=show_progress,
            special_tokens=special_added_tokens(style),
            unk_token=unk_token(style),
        )
    try:
        tokenizer.train_from_iterator(texts, trainer=trainer)
    except Exception as err:  # the Rust trainer's errors arrive as a plain Exception
        if "vocabulary" in str(err).lower() or "too small" in str(err).lower():
            raise ValueError(f"--vocab-size {vocab_size:,} is too small for this corpus ({err})") from None
        raise
    if model == "unigram":
        tokenizer = _canonical_unigram(tokenizer, style)
    add_post_processor(tokenizer, model, style)
    return tokenizer


def _canonical_unigram(tokenizer: Tokenizer, style: str = "roberta") -> Tokenizer:
    """The trained Unigram with its vocab made independent of the trainer's hash order
    (``trainer_determinism.canonical_unigram_vocab``)."""
    spec = json.loads(tokenizer.to_str())
    vocab = [(piece, score) for piece, score in spec["model"]["vocab"]]
    specials = STYLE_TOKENS[style]
    spec["model"]["vocab"] = [list(item) for item in canonical_unigram_vocab(vocab, len(specials))]
    spec["model"]["unk_id"] = specials.index(unk_token(style))
    return Tokenizer.from_str(strict_json.dumps(spec))


def unused_names(count: int, taken: Collection[str], first: int = 0) -> list[str]:
    """``count`` names ``[unusedK]`` (K from ``first`` on, as BERT's and ModernBERT's vocabs name their spare
    entries), passing over any name already in ``taken``."""
    names: list[str] = []
    k = first
    while len(names) < count:
        name = f"[unused{k}]"
        if name not in taken:
            names.append(name)
        k += 1
    return names


def padding_size(size: int, multiple_of: int) -> int:
    """How many entries take a vocab of ``size`` to the next multiple of ``multiple_of`` (0 when it is one)."""
    return -size % multiple_of


def pad_with_unused(tokenizer: Tokenizer, multiple_of: int) -> list[str]:
    """Append ``[unused0]``.. as special added tokens to ``tokenizer`` (in place) until its vocab size (added
    tokens included) is a multiple of ``multiple_of``, as ModernBERT's vocab is padded to 50,368 = 787 x 64.
    Special, so they are never produced from text (bertprep's encoder leaves special added tokens out; a
    ``transformers`` decode with ``skip_special_tokens`` drops them). Returns the tokens added, in id order."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    names = unused_names(padding_size(len(vocab), multiple_of), vocab)
    if names:
        tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in names])
    return names


def model_files(
    tokenizer: Tokenizer, model: str, model_max_length: int = MODEL_MAX_LENGTH, style: str = "roberta"
) -> dict[str, str]:
    """Name -> text of the directory ``build-vocab --model bpe|unigram`` writes (``tokenizer.json``,
    ``tokenizer_config.json``, ``special_tokens_map.json``), for the special tokens of ``style``."""
    special_map = STYLE_TOKENS_MAP[style]
    config = {
        "tokenizer_class": TOKENIZER_CLASS[model] if style == "roberta" else "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        **special_map,
    }
    if style == "bert":  # (the generic fast tokenizer's default leaves token_type_ids out; BERT's template sets them)
        config["model_input_names"] = list(BERT_MODEL_INPUT_NAMES)
    return {
        TOKENIZER_CONFIG_FILE: strict_json.dumps(config, indent=2) + "\n",
        SPECIAL_TOKENS_MAP_FILE: strict_json.dumps(special_map, indent=2) + "\n",
        TOKENIZER_FILE: tokenizer.to_str(pretty=True),
    }


__all__ = [
    "MIN_BPE_VOCAB_SIZE",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKENS_MAP",
    "SPECIAL_TOKEN_STYLES",
    "STYLE_TOKENS",
    "STYLE_TOKENS_MAP",
    "TOKENIZER_CLASS",
    "add_post_processor",
    "bpe_tokenizer",
    "model_files",
    "pad_with_unused",
    "padding_size",
    "special_added_tokens",
    "train_model",
    "unigram_tokenizer",
    "unk_token",
    "unused_names",
]
