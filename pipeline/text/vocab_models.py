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
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertprep.core import strict_json
from bertprep.core.vocab_files import (
    MODEL_MAX_LENGTH,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
)
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
#: ``transformers``' class for each (XLM-R's own rebuilds the pipeline from a sentencepiece model; the generic
#: fast tokenizer takes ``tokenizer.json`` as it is).
TOKENIZER_CLASS = {"bpe": "RobertaTokenizer", "unigram": "PreTrainedTokenizerFast"}
#: The 256 byte symbols plus the special tokens: the smallest byte-level BPE.
MIN_BPE_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


def special_added_tokens() -> list[AddedToken]:
    """The special tokens as the trainers take them (``<mask>`` strips the space on its left, as RoBERTa's)."""
    return [AddedToken(t, special=True, lstrip=t == "<mask>") for t in SPECIAL_TOKENS]


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


def add_post_processor(tokenizer: Tokenizer, model: str) -> None:
    """RoBERTa's layouts: ``<s> A </s>`` and ``<s> A </s></s> B </s>``, one token type."""
    cls_id, sep_id = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    if model == "bpe":
        tokenizer.post_processor = processors.RobertaProcessing(
            ("</s>", sep_id), ("<s>", cls_id), trim_offsets=True, add_prefix_space=False
        )
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", cls_id), ("</s>", sep_id)]
        )


def train_model(
    texts: Iterable[str], model: str, vocab_size: int, lowercase: bool, min_frequency: int, show_progress: bool
) -> Tokenizer:
    """Train a ``bpe`` or ``unigram`` tokenizer on ``texts`` (consumed once); the result has its post-processor.

    Raises:
        ValueError: the trainer refused ``vocab_size`` (Unigram: smaller than the corpus's characters).
    """
    if model == "bpe":
        tokenizer = bpe_tokenizer(lowercase)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            show_progress=show_progress,
            special_tokens=special_added_tokens(),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tokenizer = unigram_tokenizer(lowercase)
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, show_progress=show_progress, special_tokens=special_added_tokens(), unk_token="<unk>"
        )
    try:
        tokenizer.train_from_iterator(texts, trainer=trainer)
    except Exception as err:  # the Rust trainer's errors arrive as a plain Exception
        if "vocabulary" in str(err).lower() or "too small" in str(err).lower():
            raise ValueError(f"--vocab-size {vocab_size:,} is too small for this corpus ({err})") from None
        raise
    if model == "unigram":
        tokenizer = _canonical_unigram(tokenizer)
    add_post_processor(tokenizer, model)
    return tokenizer


def _canonical_unigram(tokenizer: Tokenizer) -> Tokenizer:
    """The trained Unigram with its vocab made independent of the trainer's hash order
    (``trainer_determinism.canonical_unigram_vocab``)."""
    spec = json.loads(tokenizer.to_str())
    vocab = [(piece, score) for piece, score in spec["model"]["vocab"]]
    spec["model"]["vocab"] = [list(item) for item in canonical_unigram_vocab(vocab, len(SPECIAL_TOKENS))]
    spec["model"]["unk_id"] = SPECIAL_TOKENS.index("<unk>")
    return Tokenizer.from_str(strict_json.dumps(spec))


def model_files(tokenizer: Tokenizer, model: str, model_max_length: int = MODEL_MAX_LENGTH) -> dict[str, str]:
    """Name -> text of the directory ``build-vocab --model bpe|unigram`` writes (``tokenizer.json``,
    ``tokenizer_config.json``, ``special_tokens_map.json``)."""
    config = {
        "tokenizer_class": TOKENIZER_CLASS[model],
        "model_max_length": model_max_length,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        **SPECIAL_TOKENS_MAP,
    }
    return {
        TOKENIZER_CONFIG_FILE: strict_json.dumps(config, indent=2) + "\n",
        SPECIAL_TOKENS_MAP_FILE: strict_json.dumps(SPECIAL_TOKENS_MAP, indent=2) + "\n",
        TOKENIZER_FILE: tokenizer.to_str(pretty=True),
    }


__all__ = [
    "MIN_BPE_VOCAB_SIZE",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKENS_MAP",
    "TOKENIZER_CLASS",
    "add_post_processor",
    "bpe_tokenizer",
    "model_files",
    "special_added_tokens",
    "train_model",
    "unigram_tokenizer",
]
