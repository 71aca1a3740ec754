"""The vocab and tokenizer contract, written once and Beam-free: vocab files, special ids, the tokenizers.

Beside ``schema.py`` (the shard contract), this is what ``pipeline/`` and ``bert_model/`` agree on about the
vocabulary. It imports ``tokenizers`` and the standard library only (no Beam, no torch), so ``make-shards``,
``build-vocab``, training, fine-tuning and export all build their tokenizer here:

* **vocab.txt** (:func:`parse_vocab_txt`, :func:`read_vocab_file`): one token per line, line number = id,
  each line ``str.strip()``-ed as the original ``tokenization.load_vocab`` does; a token listed twice is an
  error (the original silently gives it its last line's id, which moves ids).
* **tokenizer.json** as input (:func:`parse_tokenizer_json`): the WordPiece vocab and the normalizer's
  ``lowercase`` / ``strip_accents``.
* **the strict tokenizer** (:func:`build_tokenizer`): google-research/bert ``tokenization.FullTokenizer``
  (``BasicTokenizer`` + greedy longest-match-first ``WordpieceTokenizer``) as ``BertNormalizer`` +
  ``BertPreTokenizer`` + ``WordPiece(max_input_chars_per_word=200)`` with **no special tokens recognised
  inside text**: a literal ``[SEP]`` is split into ``[``, ``sep``, ``]`` as the original does, and a word of
  101-200 characters becomes word pieces, not ``[UNK]`` (the ready-made ``BertWordPieceTokenizer`` gets both
  wrong). :class:`WordPieceTokenizer` wraps it with the special ids for fine-tuning.
* **the Hugging Face tokenizer files** (:func:`hf_tokenizer`, :func:`tokenizer_files`): the same pipeline plus
  the special tokens as added tokens, the ``[CLS] $A [SEP] $B:1 [SEP]:1`` template and the ``##`` decoder,
  as huggingface/tokenizers ``implementations/bert_wordpiece.py`` composes them; ``tokenizer_config.json``
  names one class (``BertTokenizerFast``) and writes ``strip_accents`` resolved, never ``null``.
  ``build-vocab`` and ``export`` write these same files.
* **one word's pieces in Python** (:func:`wordpiece_split`, :func:`is_unused_slot`): the greedy split of a
  normalised word under any set of entries, for ranking new pieces (``build-vocab --extend``) and for
  starting their embeddings from the old pieces (``train --model`` onto an extended vocab).

Normalization (lower-casing, accent stripping) is ``normalization.py``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from tokenizers import AddedToken, Encoding, Tokenizer, decoders, models, pre_tokenizers, processors

from bertprep.core import strict_json
from bertprep.core.errors import VocabError  # (raised here; defined apart, without tokenizers)
from bertprep.core.normalization import bert_normalizer, normalizer_settings, resolve_strip_accents

#: The special entries of a BERT vocab, in the id order of a trained vocab ([PAD] first, as Hugging Face
#: expects). Looked up by name: a trained vocab has [PAD]=0..[MASK]=4, Google's has [CLS]=101.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: What the pre-training data needs ([PAD] only matters to the model).
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: The original ``WordpieceTokenizer``'s limit (Hugging Face's default is 100).
MAX_INPUT_CHARS_PER_WORD = 200
CONTINUING_SUBWORD_PREFIX = "##"
#: BERT's ``max_position_embeddings``: the ``model_max_length`` written when none is given.
MODEL_MAX_LENGTH = 512

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"


# ------------------------------------------------------------------------------------------------ reading


def parse_vocab_txt(text: str, source: str) -> list[str]:
    """The tokens of a ``vocab.txt``'s text, as the original ``tokenization.load_vocab`` reads them (each
    line ``str.strip()``-ed, ids counted by line; the newline ending the last line is not a line).

    Raises:
        VocabError: the text is empty, or lists a token twice (``source:line`` of both in the message).
    """
    if not text.strip():
        raise VocabError(f"{source}: the vocab file is empty")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    tokens = [line.strip() for line in lines]
    first_line: dict[str, int] = {}
    for index, token in enumerate(tokens):
        first = first_line.setdefault(token, index)
        if first != index:
            raise VocabError(
                f"{source}:{index + 1}: the token {token!r} is already on line {first + 1}; a vocab.txt lists each "
                "token once (line number - 1 = id). Remove one of the two lines (the model's ids must match the "
                "vocab the shards were made with)"
            )
    return tokens


def not_utf8(path: str, err: UnicodeDecodeError) -> VocabError:
    """The error for a vocab file that is not UTF-8 text: a ``tokenizer.json`` is told it is damaged, a
    ``vocab.txt`` what it should hold."""
    if path.endswith(".json"):
        return VocabError(
            f"{path}: not UTF-8 text ({err}), so not a tokenizer.json (Hugging Face tokenizers writes UTF-8 JSON); "
            "the file is damaged: copy it again from the model it came with"
        )
    return VocabError(f"{path}: not UTF-8 text ({err}); a vocab.txt has one UTF-8 token per line")


def read_vocab_file(path: str) -> list[str]:
    """The tokens of a local ``vocab.txt`` (:func:`parse_vocab_txt`), which must hold every one of
    :data:`SPECIAL_TOKENS` (what the model side needs; ``tokenization.load_vocab`` reads ``gs://`` too).

    Raises:
        FileNotFoundError: no such file.
        VocabError (a ``ValueError``): the file is empty, not UTF-8, lists a token twice, or lacks a special
            token (the message names the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from None
    tokens = parse_vocab_txt(text, path)
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise VocabError(
            f"{path}: missing special token(s) {', '.join(missing)}; a BERT vocab needs "
            f"{', '.join(SPECIAL_TOKENS)} (one per line)"
        )
    return tokens


def parse_tokenizer_json(text: str, source: str) -> tuple[list[str], bool | None, bool | None]:
    """``(tokens in id order, lowercase, strip_accents)`` of a Hugging Face ``tokenizer.json``'s text; the
    two settings are ``None`` when its normalizer does not say (``strip_accents`` effective: ``null`` follows
    ``lowercase``).

    Raises:
        VocabError: not JSON, not a WordPiece model, or ids not contiguous from 0.
    """
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise VocabError(f"{source}: not valid JSON ({err}); pass a vocab.txt or a tokenizer.json") from err
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise VocabError(
            f"{source}: not a WordPiece tokenizer.json (model type {model.get('type')!r}); BERT needs WordPiece"
        )
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise VocabError(f"{source}: WordPiece vocab ids are not contiguous from 0")
    do_lower_case, strip_accents = normalizer_settings(spec.get("normalizer"))
    return [t for t, _ in by_id], do_lower_case, strip_accents


def settings_of_tokenizer_json_beside(tokens: Sequence[str], text: str, source: str) -> tuple[bool | None, bool | None]:
    """``(lowercase, strip_accents)`` recorded by the ``tokenizer.json`` (text ``text``, path ``source``) that
    lies beside a ``vocab.txt`` of ``tokens``: ``build-vocab`` and ``export`` write both, and only the
    tokenizer.json says how the vocab was normalised (e.g. ``--no-strip-accents`` for Korean).

    Raises:
        VocabError: the tokenizer.json cannot be read as a WordPiece tokenizer, or its vocab is not the
            vocab.txt's (the two files do not belong together; the message says to pass one of them).
    """
    other, lowercase, strip_accents = parse_tokenizer_json(text, source)
    if list(other) != list(tokens):
        raise VocabError(
            f"{source}: its vocab ({len(other):,} entries) is not the vocab.txt beside it ({len(tokens):,} "
            "entries), so it cannot say how that vocab was normalised; pass the tokenizer.json itself as --vocab, "
            "or move the tokenizer.json that does not belong there away"
        )
    return lowercase, strip_accents


def do_lower_case_of_tokenizer_json(text: str) -> bool | None:
    """``lowercase`` of a ``tokenizer.json``'s ``BertNormalizer`` (None when it has none)."""
    spec = json.loads(text)
    normalizer = spec.get("normalizer") or {}
    stack = [normalizer]
    while stack:
        item = stack.pop()
        if item.get("type") == "BertNormalizer":
            return bool(item.get("lowercase", True))
        if item.get("type") == "Lowercase":
            return True
        stack.extend(item.get("normalizers", []))
    return None


def strip_accents_of_tokenizer_json(text: str) -> bool | None:
    """Effective ``strip_accents`` of a ``tokenizer.json``'s normalizer (``null`` follows its ``lowercase``);
    None when it does not say."""
    return normalizer_settings(json.loads(text).get("normalizer"))[1]


#: A spare ``[unusedK]`` entry (Google's vocabs, build-vocab's ``--num-unused``).
_UNUSED_SLOT = re.compile(r"^\[unused\d+\]$")


def is_unused_slot(token: str) -> bool:
    """Whether ``token`` is a spare ``[unusedK]`` entry of a vocab."""
    return bool(_UNUSED_SLOT.match(token))


def wordpiece_split(word: str, vocab: Container[str], *, continuation: bool = False) -> list[str] | None:
    """The pieces of one normalised, pre-tokenised ``word`` under ``vocab`` (greedy longest-match-first, as
    google-research/bert ``WordpieceTokenizer`` and ``tokenizers``' ``WordPiece``), or None for ``[UNK]`` (a
    position no entry matches, or a word over ``MAX_INPUT_CHARS_PER_WORD`` characters).

    ``continuation``: split ``word`` as the rest of a word (its first piece gets ``##`` too), e.g. the text
    of a ``##`` entry."""
    if len(word) > MAX_INPUT_CHARS_PER_WORD:
        return None
    pieces: list[str] = []
    start = 0
    while start < len(word):
        prefix = CONTINUING_SUBWORD_PREFIX if (start > 0 or continuation) else ""
        end = len(word)
        while end > start:
            piece = prefix + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return None
        pieces.append(piece)
        start = end
    return pieces


def special_token_ids(token_to_id: Mapping[str, int]) -> dict[str, int]:
    """``{special token: id}`` for those of :data:`SPECIAL_TOKENS` the vocab has."""
    return {t: token_to_id[t] for t in SPECIAL_TOKENS if t in token_to_id}


# --------------------------------------------------------------------------------------------- tokenizers


def _token_to_id(vocab: Sequence[str] | Mapping[str, int]) -> dict[str, int]:
    if isinstance(vocab, Mapping):
        return dict(vocab)
    token_to_id: dict[str, int] = {}
    for index, token in enumerate(vocab):
        token_to_id[token] = index  # a duplicate maps to its last id, as the original OrderedDict does
    return token_to_id


def build_tokenizer(
    vocab: Sequence[str] | Mapping[str, int], do_lower_case: bool, strip_accents: bool | None = None
) -> Tokenizer:
    """The original ``FullTokenizer`` as a Hugging Face ``Tokenizer``: no special tokens added or recognised.

    Args:
        vocab: tokens in id order, or token -> id.
        strip_accents: ``None`` strips accents when ``do_lower_case`` (the original); ``False`` lower-cases
            without NFD (keeps Hangul syllables and other scripts' marks whole), ``True`` strips without
            lower-casing.
    """
    tokenizer = Tokenizer(
        models.WordPiece(
            vocab=_token_to_id(vocab),
            unk_token="[UNK]",
            continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tokenizer.normalizer = bert_normalizer(do_lower_case, strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def hf_tokenizer(
    vocab: Sequence[str] | Mapping[str, int], do_lower_case: bool, strip_accents: bool | None = None
) -> Tokenizer:
    """:func:`build_tokenizer` plus what ``tokenizer.json`` needs, as Hugging Face BERT tokenizers have it.

    * ``[PAD] [UNK] [CLS] [SEP] [MASK]`` as special added tokens (the literal text ``[SEP]`` encodes to the
      [SEP] id, unlike the original, and ``decode(skip_special_tokens=True)`` drops them);
    * ``TemplateProcessing``: ``[CLS] $A [SEP]`` and ``[CLS] $A [SEP] $B:1 [SEP]:1`` (token_type_ids 0/1);
    * the ``WordPiece`` decoder (joins ``##`` pieces).
    ``strip_accents`` is written resolved (``None`` -> ``do_lower_case``).

    Raises:
        VocabError: the vocab lacks one of :data:`SPECIAL_TOKENS`.
    """
    token_to_id = _token_to_id(vocab)
    missing = [t for t in SPECIAL_TOKENS if t not in token_to_id]
    if missing:
        raise VocabError(f"the vocab lacks the special token(s) {', '.join(missing)}")
    tokenizer = build_tokenizer(token_to_id, do_lower_case, strip_accents)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS])
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUING_SUBWORD_PREFIX)
    return tokenizer


def hf_tokenizer_json(
    tokens: Sequence[str],
    do_lower_case: bool,
    model_max_length: int = MODEL_MAX_LENGTH,
    *,
    strip_accents: bool | None = None,
) -> str:
    """The ``tokenizer.json`` text of :func:`hf_tokenizer`. ``model_max_length`` is not part of this file
    (it is in :func:`tokenizer_config`); it is accepted for symmetry."""
    del model_max_length
    return hf_tokenizer(tokens, do_lower_case, strip_accents).to_str(pretty=True)


def tokenizer_config(
    do_lower_case: bool, model_max_length: int = MODEL_MAX_LENGTH, *, strip_accents: bool | None = None
) -> dict:
    """``tokenizer_config.json`` for ``transformers`` (``AutoTokenizer`` -> ``BertTokenizerFast`` on the
    tokenizer.json beside it).

    ``strip_accents`` is written resolved, never ``null``: ``BertTokenizerFast`` rebuilds the tokenizer.json's
    normalizer from these settings when they disagree, and its ``null`` means "as ``do_lower_case``", which
    would strip the accents (and split the Hangul syllables) of a tokenizer built without stripping."""
    return {
        "tokenizer_class": "BertTokenizerFast",
        "do_lower_case": do_lower_case,
        "strip_accents": resolve_strip_accents(strip_accents, do_lower_case),
        "tokenize_chinese_chars": True,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": True,
        **special_tokens_map(),
    }


def special_tokens_map() -> dict:
    """``special_tokens_map.json`` contents."""
    return {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }


def tokenizer_files(
    tokens: Sequence[str],
    do_lower_case: bool,
    *,
    strip_accents: bool | None = None,
    model_max_length: int = MODEL_MAX_LENGTH,
) -> dict[str, str]:
    """Name -> text of the four files of a Hugging Face BERT tokenizer directory, ``vocab.txt`` last (writers
    that commit file by file rename it last: its presence marks a complete directory).

    ``tokenizer_config.json``, ``special_tokens_map.json``, ``tokenizer.json`` (:func:`hf_tokenizer`) and
    ``vocab.txt`` (one token per line, UTF-8, LF, line number = id). ``AutoTokenizer.from_pretrained`` on
    the directory gives the ids of :func:`build_tokenizer` for text without special tokens.
    """
    return {
        TOKENIZER_CONFIG_FILE: strict_json.dumps(
            tokenizer_config(do_lower_case, model_max_length, strip_accents=strip_accents), indent=2
        )
        + "\n",
        SPECIAL_TOKENS_MAP_FILE: strict_json.dumps(special_tokens_map(), indent=2) + "\n",
        TOKENIZER_FILE: hf_tokenizer_json(tokens, do_lower_case, strip_accents=strip_accents),
        VOCAB_FILE: "".join(f"{t}\n" for t in tokens),
    }


class SpecialTokenIds:
    """``cls_token_id``, ``sep_token_id``, ``pad_token_id`` and ``mask_token_id`` (the ``transformers`` names)
    from ``role_id``, the id of a tokenizer's token of a BERT role (``"[CLS]"``...): one implementation for
    :class:`WordPieceTokenizer` and ``pretrained_tokenizer.PretrainedTokenizer``."""

    def role_id(self, role: str) -> int:
        """Id of the special token of ``role``; ``KeyError`` if the tokenizer has none."""
        raise NotImplementedError

    @property
    def cls_token_id(self) -> int:
        return self.role_id("[CLS]")

    @property
    def sep_token_id(self) -> int:
        return self.role_id("[SEP]")

    @property
    def pad_token_id(self) -> int:
        return self.role_id("[PAD]")

    @property
    def mask_token_id(self) -> int:
        return self.role_id("[MASK]")


@dataclass
class WordPieceTokenizer(SpecialTokenIds):
    """A vocab's strict WordPiece tokenizer (:func:`build_tokenizer`) and its special ids; ``encode*`` add no
    special tokens. Encodings carry character offsets into the *original* text (``tokenizers`` tracks them
    through normalisation), which SQuAD uses to cut answers out of the context and NER uses to find each
    word's first piece.

    Build it with ``WordPieceTokenizer.from_tokens(tokens, do_lower_case, strip_accents=None)`` or
    ``from_vocab_file``.
    """

    tokens: list[str]
    """Vocab entries in id order."""
    do_lower_case: bool
    """Lower-case and strip accents before splitting (uncased vocabs)."""
    tokenizer: Tokenizer
    """The ``tokenizers`` pipeline (normalizer, pre-tokenizer, WordPiece model)."""
    strip_accents: bool | None = None
    """Strip accents (NFD, combining marks dropped); ``None`` at construction resolves to ``do_lower_case``."""

    def __post_init__(self) -> None:
        self.strip_accents = resolve_strip_accents(self.strip_accents, self.do_lower_case)

    @classmethod
    def from_tokens(
        cls, tokens: Sequence[str], do_lower_case: bool, strip_accents: bool | None = None
    ) -> WordPieceTokenizer:
        return cls(list(tokens), do_lower_case, build_tokenizer(tokens, do_lower_case, strip_accents), strip_accents)

    @classmethod
    def from_vocab_file(cls, path: str, do_lower_case: bool, strip_accents: bool | None = None) -> WordPieceTokenizer:
        return cls.from_tokens(read_vocab_file(path), do_lower_case, strip_accents)

    def token_id(self, token: str) -> int:
        """Id of ``token`` (the last line holding it); ``KeyError`` if absent."""
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise KeyError(token)
        return found

    def role_id(self, role: str) -> int:
        """Id of the special token of ``role`` (the roles are BERT's tokens themselves); ``KeyError`` if absent."""
        return self.token_id(role)

    #: The text of the mask token, as written in fill-mask input (``pretrained_tokenizer``'s may be ``<mask>``).
    mask_token = "[MASK]"

    def special_token_ids(self) -> dict[str, int]:
        """Role -> id (the roles are BERT's tokens themselves)."""
        return special_token_ids(
            {t: self.token_id(t) for t in SPECIAL_TOKENS if self.tokenizer.token_to_id(t) is not None}
        )

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """``[CLS] A [SEP]``: 2; ``[CLS] A [SEP] B [SEP]``: 3 (the ``transformers`` name)."""
        return 3 if pair else 2

    def build_inputs_with_special_tokens(self, ids_a: Sequence[int], ids_b: Sequence[int] | None = None) -> list[int]:
        """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``."""
        out = [self.cls_token_id, *ids_a, self.sep_token_id]
        return out if ids_b is None else out + [*ids_b, self.sep_token_id]

    def create_token_type_ids_from_sequences(
        self, ids_a: Sequence[int], ids_b: Sequence[int] | None = None
    ) -> list[int]:
        """0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``."""
        return [0] * (len(ids_a) + 2) + ([] if ids_b is None else [1] * (len(ids_b) + 1))

    def encode_batch(self, texts: Sequence[str]) -> list[Encoding]:
        """Encodings (``ids``, ``tokens``, ``offsets`` into each original text) of plain strings."""
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=False) if texts else []

    def encode_words_batch(self, sentences: Sequence[Sequence[str]]) -> list[Encoding]:
        """Encodings of pre-split sentences (lists of words); ``word_ids`` maps each piece to its word index."""
        if not sentences:
            return []
        return self.tokenizer.encode_batch([list(s) for s in sentences], is_pretokenized=True, add_special_tokens=False)


__all__ = [
    "CONTINUING_SUBWORD_PREFIX",
    "MAX_INPUT_CHARS_PER_WORD",
    "MODEL_MAX_LENGTH",
    "REQUIRED_TOKENS",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKENS_MAP_FILE",
    "TOKENIZER_CONFIG_FILE",
    "TOKENIZER_FILE",
    "VOCAB_FILE",
    "SpecialTokenIds",
    "VocabError",
    "WordPieceTokenizer",
    "build_tokenizer",
    "do_lower_case_of_tokenizer_json",
    "hf_tokenizer",
    "hf_tokenizer_json",
    "is_unused_slot",
    "parse_tokenizer_json",
    "parse_vocab_txt",
    "read_vocab_file",
    "special_token_ids",
    "special_tokens_map",
    "strip_accents_of_tokenizer_json",
    "tokenizer_config",
    "tokenizer_files",
    "wordpiece_split",
]
