"""Any Hugging Face ``tokenizer.json`` (WordPiece, BPE, Unigram) with its special tokens: what ``make-shards``,
``train``, ``fill-mask``, ``finetune``, ``predict``, ``extract-features`` and ``export`` read from the tokenizer
of a published model (RoBERTa's and ModernBERT's byte-level BPE, XLM-R's and DeBERTa-v3's SentencePiece
Unigram) or of ``build-vocab --model bpe|unigram``.

Beam- and torch-free, beside ``vocab_files.py`` (BERT's WordPiece, whose strict original tokenizer and
byte-identical shards stay there): a vocab given as a WordPiece ``tokenizer.json`` or ``vocab.txt`` still goes
that way; this module takes every other ``tokenizer.json``.

* **Special tokens by role** (:data:`ROLES`, spelled as BERT's tokens: ``[CLS]`` is the role of RoBERTa's
  ``<s>``, ``[SEP]`` of ``</s>``, ``[MASK]`` of ``<mask>``), never assumed: ``tokenizer_config.json``'s
  ``cls_token`` / ``sep_token`` / ``mask_token`` / ``pad_token`` / ``unk_token`` (``bos_token`` / ``eos_token``
  for ``[CLS]`` / ``[SEP]``), then ``special_tokens_map.json``'s, then the ``tokenizer.json`` itself: its
  post-processor's first and last special token for ``[CLS]`` / ``[SEP]``, its model's ``unk_token``, and for
  ``[MASK]`` / ``[PAD]`` a special added token spelled ``[MASK]``/``<mask>``, ``[PAD]``/``<pad>``.
* **Word boundaries** (:meth:`PretrainedTokenizer.is_continuation`) for whole-word and span masking, per id
  from the pieces' own marks: a piece continues a word when it lacks the byte-level ``Ġ`` (RoBERTa,
  ModernBERT) or SentencePiece ``▁`` (Unigram) that marks a word's first piece, or carries the ``##`` of
  WordPiece-style BPE; added tokens start a word. (As fairseq's whole-word masking for RoBERTa does:
  ``"Hello."`` is one word.) A tokenizer with none of these marks has no per-id boundaries (None).
* **Pre-training text** (:meth:`PretrainedTokenizer.encode_sentences`): each sentence is encoded as it reads
  inside running text, after a space, where the pre-tokenizer marks words by the space before them
  (byte-level BPE without ``add_prefix_space``): the first word of every sentence then carries ``Ġ`` like any
  other word, and a sentence never continues the word before it. Special tokens written in the text are not
  recognised (as the original BERT tokenizer does not): ``</s>`` in a sentence is its characters.
* **Model inputs** (the ``transformers`` names ``num_special_tokens_to_add``,
  ``build_inputs_with_special_tokens``, ``create_token_type_ids_from_sequences``): the tokenizer's own
  template (``RobertaProcessing``: ``<s> A </s></s> B </s>``, one token type; ``TemplateProcessing`` /
  ``BertProcessing`` as written).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Encoding, Tokenizer

from bertprep.core import storage, strict_json
from bertprep.core.vocab_files import (
    SPECIAL_TOKENS,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    SpecialTokenIds,
    VocabError,
    parse_tokenizer_json,
    read_vocab_file,
)

#: The roles of special tokens, named as BERT spells its tokens (``vocab_files.SPECIAL_TOKENS``); a shard
#: manifest's ``special_token_ids`` is keyed by them whatever the tokens are.
ROLES = SPECIAL_TOKENS
#: The roles pre-training data needs (a byte-level BPE has no [UNK] it would ever produce).
REQUIRED_ROLES = ("[CLS]", "[SEP]", "[MASK]", "[PAD]")
#: ``tokenizer_config.json`` / ``special_tokens_map.json`` keys of each role, in the order they are tried.
CONFIG_KEYS = {
    "[PAD]": ("pad_token",),
    "[UNK]": ("unk_token",),
    "[CLS]": ("cls_token", "bos_token"),
    "[SEP]": ("sep_token", "eos_token"),
    "[MASK]": ("mask_token",),
}
#: Added-token spellings taken for a role that no file names (the usual BERT and RoBERTa ones).
_USUAL_SPELLINGS = {"[MASK]": ("[MASK]", "<mask>"), "[PAD]": ("[PAD]", "<pad>")}
MODEL_TYPES = ("WordPiece", "BPE", "Unigram")
#: The byte-level BPE mark of a word's first piece (GPT-2's byte for the space, U+0120).
BYTE_LEVEL_SPACE = "\u0120"


def _token_text(value: Any) -> str | None:
    """A special token as ``transformers`` writes it: a string or an ``AddedToken`` dict (``content``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _components(item: Any) -> list[dict]:
    """A normaliser / pre-tokenizer / post-processor and, for a ``Sequence``, the ones inside it."""
    if not isinstance(item, dict):
        return []
    inner = item.get("normalizers") or item.get("pretokenizers") or item.get("processors") or []
    return [item] + [c for sub in inner for c in _components(sub)]


def _template_specials(processor: Any) -> tuple[str | None, str | None]:
    """``(first, last)`` special token of a post-processor's single-sequence layout (``[CLS]``, ``[SEP]``)."""
    for item in _components(processor):
        kind = item.get("type")
        if kind in ("RobertaProcessing", "BertProcessing"):
            return item["cls"][0], item["sep"][0]
        if kind == "TemplateProcessing":
            names = [piece["SpecialToken"]["id"] for piece in item.get("single", []) if "SpecialToken" in piece]
            tokens = item.get("special_tokens", {})
            first = tokens.get(names[0], {}).get("tokens", [None])[0] if names else None
            last = tokens.get(names[-1], {}).get("tokens", [None])[-1] if names else None
            return first, last
    return None, None


def _model_unk(model: dict) -> str | None:
    if model.get("type") == "Unigram":
        unk_id = model.get("unk_id")
        return model["vocab"][unk_id][0] if isinstance(unk_id, int) else None
    return _token_text(model.get("unk_token"))


def resolve_special_tokens(spec: dict, config: Mapping, special_map: Mapping, source: str) -> dict[str, str]:
    """Role -> token text (see the module docstring for the order of the sources); a role none of them names is
    left out.

    Raises:
        VocabError: a required role (:data:`REQUIRED_ROLES`) is named nowhere, or a named token is not in the
            vocab (the message says which file to add it to).
    """
    vocab_tokens = {t["content"] for t in spec.get("added_tokens") or []}
    model = spec.get("model") or {}
    vocab = model.get("vocab")
    vocab_tokens.update(t for t, _ in vocab) if isinstance(vocab, list) else vocab_tokens.update(vocab or {})
    cls_, sep_ = _template_specials(spec.get("post_processor"))
    added = {t["content"] for t in spec.get("added_tokens") or [] if t.get("special")}
    found: dict[str, str] = {}
    for role in ROLES:
        candidates = [_token_text(src.get(key)) for src in (config, special_map) for key in CONFIG_KEYS[role]]
        candidates += {"[CLS]": [cls_], "[SEP]": [sep_], "[UNK]": [_model_unk(model)]}.get(role, [])
        candidates += [t for t in _USUAL_SPELLINGS.get(role, ()) if t in added]
        token = next((t for t in candidates if t), None)
        if token is None:
            continue
        if token not in vocab_tokens:
            raise VocabError(f"{source}: its {role} token {token!r} is not in the vocab")
        found[role] = token
    missing = [r for r in REQUIRED_ROLES if r not in found]
    if missing:
        keys = ", ".join(CONFIG_KEYS[r][0] for r in missing)
        raise VocabError(
            f"{source}: no {', '.join(missing)} token named (pre-training needs {', '.join(REQUIRED_ROLES)}); "
            f"add {keys} to the {TOKENIZER_CONFIG_FILE} beside it"
        )
    return found


def _ids_in_order(tokenizer: Tokenizer, source: str) -> list[str]:
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise VocabError(f"{source}: the token ids are not contiguous from 0; bertprep needs one token per id")
    return tokens


def _word_marks(spec: dict) -> tuple[str, str] | None:
    """How the pieces mark word boundaries: ``("prefix", "##")`` (a continuing piece carries it),
    ``("start", mark)`` (a word's first piece starts with ``mark``), or None."""
    model = spec.get("model") or {}
    prefix = model.get("continuing_subword_prefix")
    if model.get("type") == "WordPiece":
        return "prefix", prefix or "##"
    if prefix:
        return "prefix", prefix
    for item in _components(spec.get("pre_tokenizer")) + _components(spec.get("normalizer")):
        kind = item.get("type")
        if kind == "ByteLevel":
            return "start", BYTE_LEVEL_SPACE
        if kind == "Metaspace":
            return "start", item.get("replacement", "\u2581")
        if kind == "Prepend":
            return "start", item.get("prepend", "\u2581")
    return None


def _needs_leading_space(spec: dict) -> bool:
    """Whether a sentence must be encoded after a space for its first word to carry the word mark: a
    byte-level pre-tokenizer without ``add_prefix_space`` (a Metaspace prepends its mark itself)."""
    return any(
        item.get("type") == "ByteLevel" and not item.get("add_prefix_space", False)
        for item in _components(spec.get("pre_tokenizer"))
    )


def _layouts(cls_: list[int], sep_: list[int], pair_sep: list[int], pair_type: int) -> dict[str, list]:
    """``[CLS] A [SEP]`` and ``[CLS] A <pair_sep> B [SEP]`` (B and its [SEP] of type ``pair_type``)."""
    single = [(cls_, 0), ("A", 0), (sep_, 0)]
    return {"single": single, "pair": [(cls_, 0), ("A", 0), (pair_sep, 0), ("B", pair_type), (sep_, pair_type)]}


def _template(spec: dict, specials: Mapping[str, str], token_to_id: Mapping[str, int]) -> dict[str, list]:
    """The post-processor's layouts as ``{"single": [...], "pair": [...]}``, each item ``(ids, type_id)`` for
    special tokens or ``("A" | "B", type_id)``; BERT's ``[CLS] A [SEP] B [SEP]`` when there is no template."""
    for item in _components(spec.get("post_processor")):
        kind = item.get("type")
        if kind in ("RobertaProcessing", "BertProcessing"):
            cls_, sep_ = [token_to_id[item["cls"][0]]], [token_to_id[item["sep"][0]]]
            if kind == "RobertaProcessing":  # <s> A </s></s> B </s>, one token type
                return _layouts(cls_, sep_, sep_ + sep_, 0)
            return _layouts(cls_, sep_, sep_, 1)
        if kind == "TemplateProcessing":
            tokens = item.get("special_tokens", {})

            def layout(pieces: list) -> list:
                out = []
                for piece in pieces:
                    if "SpecialToken" in piece:
                        special = piece["SpecialToken"]
                        out.append((list(tokens[special["id"]]["ids"]), special["type_id"]))  # noqa: B023 (layout() is called before the loop moves on)
                    else:
                        out.append((piece["Sequence"]["id"], piece["Sequence"]["type_id"]))
                return out

            return {"single": layout(item["single"]), "pair": layout(item["pair"])}
    cls_, sep_ = [token_to_id[specials["[CLS]"]]], [token_to_id[specials["[SEP]"]]]
    return _layouts(cls_, sep_, sep_, 1)


#: Put before a Unigram model's special pieces in the encoder, so that no text is segmented into them
#: (SentencePiece's control symbols are never produced from text either): a Unicode noncharacter, which text
#: does not hold (a low score would not do: the Unigram lattice scores unknown characters below the lowest).
_UNREACHABLE = "\uffff"


def _without_special_added_tokens(spec: dict) -> Tokenizer:
    """The tokenizer with its special added tokens taken out, so that text naming one (``</s>``) is encoded as
    its characters; normal added tokens (ModernBERT's runs of spaces) stay. A Unigram model, which holds the
    special tokens as pieces too, gets them renamed out of reach (:data:`_UNREACHABLE`, same ids)."""
    special = {t["content"] for t in spec.get("added_tokens") or [] if t.get("special")}
    stripped = dict(spec, added_tokens=[t for t in spec.get("added_tokens") or [] if not t.get("special")])
    model = spec.get("model") or {}
    if model.get("type") == "Unigram":
        vocab = [[_UNREACHABLE + piece if piece in special else piece, score] for piece, score in model["vocab"]]
        stripped["model"] = dict(model, vocab=vocab)
    return _unbounded(Tokenizer.from_str(strict_json.dumps(stripped)))


def _unbounded(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` without the padding and truncation a ``tokenizer.json`` may carry (transformers and
    sentence-transformers save theirs with the settings of their last call): bertprep cuts and pads every
    sequence itself, and a batch the tokenizer padded would hold its pad pieces as text."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@dataclass
class PretrainedTokenizer(SpecialTokenIds):
    """A ``tokenizer.json`` of any model type, its special tokens by role and the files it came in.

    Build it with :meth:`from_texts` (file contents) or :func:`load_pretrained_tokenizer` (a local file or
    directory). Encodings carry character offsets into the original text, as ``WordPieceTokenizer``'s do.
    """

    tokens: list[str]
    """Every entry in id order (added tokens included)."""
    special_tokens: dict[str, str]
    """Role (:data:`ROLES`) -> token text, for the roles the tokenizer has."""
    model_type: str
    """``WordPiece``, ``BPE`` or ``Unigram`` (the ``tokenizer.json`` model)."""
    full: Tokenizer
    """The ``tokenizer.json`` as written (less any padding and truncation): special tokens recognised in text, its
    post-processor."""
    tokenizer: Tokenizer
    """The same without its special added tokens: the encoder of pre-training and task text."""
    files: dict[str, str]
    """File name -> text: ``tokenizer.json`` and the ``tokenizer_config.json`` / ``special_tokens_map.json``
    that came with it, copied with the shards, checkpoints and exports."""
    source: str = ""
    leading_space: bool = False
    """Sentences are encoded after a space (see the module docstring)."""
    word_marks: tuple[str, str] | None = None
    template: dict[str, list] = field(default_factory=dict, repr=False)
    do_lower_case: bool | None = None
    """Always None: the ``tokenizer.json``'s normaliser decides (``WordPieceTokenizer`` has the setting)."""
    strip_accents: bool | None = None
    """Always None, as ``do_lower_case``."""

    @classmethod
    def from_texts(cls, files: Mapping[str, str], source: str = "") -> PretrainedTokenizer:
        """From the texts of a tokenizer directory's files (name -> text): ``tokenizer.json`` and, when there,
        ``tokenizer_config.json`` and ``special_tokens_map.json`` (kept as they are, to be copied on).

        Raises:
            VocabError: a file is not JSON, the ``tokenizer.json`` is not one ``tokenizers`` reads, its ids are
                not contiguous, or a required special token is named nowhere (:func:`resolve_special_tokens`).
        """
        try:
            spec = json.loads(files[TOKENIZER_FILE])
            full = _unbounded(Tokenizer.from_str(files[TOKENIZER_FILE]))
        except Exception as err:  # json.JSONDecodeError, or the Rust parser's Exception
            raise VocabError(f"{source}: not a tokenizer.json that tokenizers reads ({err})") from None
        model_type = (spec.get("model") or {}).get("type")
        if model_type not in MODEL_TYPES:
            raise VocabError(f"{source}: tokenizer model {model_type!r}; bertprep reads {', '.join(MODEL_TYPES)}")
        config, special_map = (
            _parse_json(files, name, source) for name in (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)
        )
        tokens = _ids_in_order(full, source)
        specials = resolve_special_tokens(spec, config, special_map, source)
        kept = (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)
        return cls(
            tokens=tokens,
            special_tokens=specials,
            model_type=model_type,
            full=full,
            tokenizer=_without_special_added_tokens(spec),
            files={name: text for name, text in files.items() if name in kept},
            source=source,
            leading_space=_needs_leading_space(spec),
            word_marks=_word_marks(spec),
            template=_template(spec, specials, {t: i for i, t in enumerate(tokens)}),
        )

    # ------------------------------------------------------------------------------------------- ids

    def token_id(self, token: str) -> int:
        """Id of ``token`` (an entry's text); ``KeyError`` if absent."""
        found = self.full.token_to_id(token)
        if found is None:
            raise KeyError(token)
        return found

    def role_id(self, role: str) -> int:
        """Id of the special token of ``role`` (``"[MASK]"``...); ``KeyError`` if the tokenizer has none."""
        return self.token_id(self.special_tokens[role])

    def special_token_ids(self) -> dict[str, int]:
        """Role -> id, for the roles the tokenizer has (a shard manifest's ``special_token_ids``)."""
        return {role: self.token_id(token) for role, token in self.special_tokens.items()}

    @property
    def mask_token(self) -> str:
        """The text of the mask token (``<mask>``, ``[MASK]``), as written in fill-mask input."""
        return self.special_tokens["[MASK]"]

    @property
    def unk_token_id(self) -> int | None:
        return self.role_id("[UNK]") if "[UNK]" in self.special_tokens else None

    def is_continuation(self) -> list[bool] | None:
        """Per id, whether the piece continues the word of the piece before it (see the module docstring);
        None when the pieces carry no word marks. Added tokens (special or not) never continue a word."""
        if self.word_marks is None:
            return None
        kind, mark = self.word_marks
        added = set(self.full.get_added_tokens_decoder())
        if kind == "prefix":
            return [t.startswith(mark) and i not in added for i, t in enumerate(self.tokens)]
        return [not t.startswith(mark) and i not in added for i, t in enumerate(self.tokens)]

    # ------------------------------------------------------------------------------------------- encoding

    def _text(self, text: str) -> str:
        return " " + text if self.leading_space and text and not text[0].isspace() else text

    def encode_sentences(self, sentences: Sequence[str]) -> list[list[int]]:
        """The ids of each sentence for pre-training data (no special tokens; see the module docstring)."""
        if not sentences:
            return []
        texts = [self._text(s) for s in sentences]
        return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_batch(self, texts: Sequence[str]) -> list[Encoding]:
        """Encodings (``ids``, ``tokens``, ``offsets`` into each original text) of plain strings, no special
        tokens, as ``transformers`` encodes them (a text's first word without the leading-space mark)."""
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=False) if texts else []

    def encode_words_batch(self, sentences: Sequence[Sequence[str]]) -> list[Encoding]:
        """Encodings of pre-split sentences (lists of words); ``word_ids`` maps each piece to its word. Each word
        is encoded as it reads after a space where the tokenizer marks words so (RoBERTa's
        ``add_prefix_space=True``, what ``transformers`` needs for pre-split words)."""
        if not sentences:
            return []
        words = [[self._text(w) for w in s] for s in sentences]
        return self.tokenizer.encode_batch(words, is_pretokenized=True, add_special_tokens=False)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens :meth:`build_inputs_with_special_tokens` adds (RoBERTa: 2, pairs 4)."""
        return sum(len(ids) for ids, _ in self.template["pair" if pair else "single"] if not isinstance(ids, str))

    def build_inputs_with_special_tokens(self, ids_a: Sequence[int], ids_b: Sequence[int] | None = None) -> list[int]:
        """``ids_a`` (and ``ids_b``) with the template's special tokens (``<s> A </s></s> B </s>``)."""
        out: list[int] = []
        for ids, _ in self.template["single" if ids_b is None else "pair"]:
            out.extend(ids_a if ids == "A" else (ids_b or []) if ids == "B" else ids)
        return out

    def create_token_type_ids_from_sequences(
        self, ids_a: Sequence[int], ids_b: Sequence[int] | None = None
    ) -> list[int]:
        """The ``token_type_ids`` of :meth:`build_inputs_with_special_tokens` (RoBERTa: all 0)."""
        out: list[int] = []
        for ids, type_id in self.template["single" if ids_b is None else "pair"]:
            n = len(ids_a) if ids == "A" else len(ids_b or []) if ids == "B" else len(ids)
            out.extend([type_id] * n)
        return out


def _parse_json(files: Mapping[str, str], name: str, source: str) -> dict:
    """The parsed file ``name`` of ``files`` ({} when absent)."""
    if name not in files:
        return {}
    try:
        value = json.loads(files[name])
    except ValueError as err:
        raise VocabError(f"{name} beside {source}: not valid JSON ({err})") from None
    return value if isinstance(value, dict) else {}


def model_type_of(text: str) -> str | None:
    """The model type (``WordPiece``, ``BPE``, ``Unigram``...) of a ``tokenizer.json``'s text; None when it is not
    JSON or names none (``vocab_files.parse_tokenizer_json`` then says what is wrong). The one sniffer of both
    halls (:func:`tokenizer_json_model_type`, ``text.tokenization.load_vocab``)."""
    try:
        return (json.loads(text).get("model") or {}).get("type")
    except (ValueError, AttributeError):
        return None


def tokenizer_json_model_type(path: str) -> str | None:
    """The model type (:func:`model_type_of`) of a local ``tokenizer.json``, or of the one in a directory; None
    when there is none or it is not JSON."""
    if os.path.isdir(path):
        path = os.path.join(path, TOKENIZER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return model_type_of(f.read())
    except (OSError, UnicodeDecodeError):
        return None


def beside(path: str, name: str) -> str:
    """The path of the file ``name`` in the directory of ``path`` (a local path or a URL such as ``gs://``)."""
    if storage.is_remote(path):
        return path.rsplit("/", 1)[0] + "/" + name
    return os.path.join(os.path.dirname(path), name)


def _read_local(path: str) -> str | None:
    """The text of the local file ``path``, None when there is none."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as err:
        raise VocabError(f"{path}: not UTF-8 text ({err})") from None


def load_pretrained_tokenizer(path: str, read_text: Callable[[str], str | None] = _read_local) -> PretrainedTokenizer:
    """The tokenizer of a ``tokenizer.json``, or of a local directory holding one, with the
    ``tokenizer_config.json`` and ``special_tokens_map.json`` beside it: the one loader of both halls.

    ``read_text(path)``: a file's text, or None when it does not exist; by default local files
    (``text.tokenization.load_vocab`` hands in one over Beam's file systems, for ``gs://``).

    Raises:
        FileNotFoundError: no such file, or the directory has no ``tokenizer.json``.
        VocabError: a file is not UTF-8; as :meth:`PretrainedTokenizer.from_texts`.
    """
    file = os.path.join(path, TOKENIZER_FILE) if not storage.is_remote(path) and os.path.isdir(path) else path
    files = {}
    for name, where in ((TOKENIZER_FILE, file), *((n, beside(file, n)) for n in _CONFIG_FILES)):
        text = read_text(where)
        if text is not None:
            files[name] = text
    if TOKENIZER_FILE not in files:
        raise FileNotFoundError(f"{path}: no {TOKENIZER_FILE}")
    return PretrainedTokenizer.from_texts(files, source=file)


def read_vocab_tokens(path: str) -> list[str]:
    """The tokens in id order of a local vocab file: a ``vocab.txt`` (``vocab_files.read_vocab_file``), a
    WordPiece ``tokenizer.json`` (its vocab) or a BPE / Unigram one (every id, added tokens included).

    Raises:
        FileNotFoundError, VocabError: as the readers named.
    """
    if not path.endswith(".json"):
        return read_vocab_file(path)
    if tokenizer_json_model_type(path) == "WordPiece":
        with open(path, encoding="utf-8") as f:
            return parse_tokenizer_json(f.read(), path)[0]
    return load_pretrained_tokenizer(path).tokens


#: The files read beside a ``tokenizer.json``.
_CONFIG_FILES = (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)


__all__ = [
    "BYTE_LEVEL_SPACE",
    "CONFIG_KEYS",
    "MODEL_TYPES",
    "REQUIRED_ROLES",
    "ROLES",
    "PretrainedTokenizer",
    "beside",
    "load_pretrained_tokenizer",
    "model_type_of",
    "read_vocab_tokens",
    "resolve_special_tokens",
    "tokenizer_json_model_type",
]
