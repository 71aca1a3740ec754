"""Train a BERT WordPiece vocabulary with Hugging Face ``tokenizers`` (``bertprep build-vocab``).

The tokenizer is the BERT one, composed from library parts as huggingface/tokenizers
``implementations/bert_wordpiece.py`` does: ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece`` trained
with ``WordPieceTrainer``. Two deliberate differences from that ready-made class:

* ``WordPiece(max_input_chars_per_word=200)``, the limit of Google's original ``WordpieceTokenizer``
  (google-research/bert ``tokenization.py``), not the library's 100;
* only ``[PAD] [UNK] [CLS] [SEP] [MASK]`` are registered as special (added) tokens. The ``[unusedN]``
  slots are plain vocabulary entries, as in Google's ``vocab.txt``.

Vocabulary layout (ids): ``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]`` (0..4), then
``[unused0]`` .. ``[unused{num_unused-1}]``, then the learned alphabet (single characters, sorted by code
point), their ``##`` continuation forms and the merged word pieces. ``vocab_size`` counts all of it. With
``pad_to_multiple_of`` N, ``[unused{num_unused}]``.. follow, up to the next multiple of N (``vocab_models``
pads a BPE or Unigram the same way, with special added tokens).
Code that needs a special id looks it up (``Tokenizer.token_to_id``); nothing here relies on the numbers.

The input is read once, as a stream: its words are counted (memory grows with the number of distinct words,
not with the corpus size) and the trainer is fed the counts. The result is **deterministic**: the
``tokenizers`` trainer would give the ``##`` characters their ids in hash-map order, random per process, and
those ids break ties between pairs of equal count (huggingface/tokenizers#1794: measured on 16 MB of
Gutenberg + Wikipedia text, 16k vocab, 3,652 of 16,000 ids moved between two runs); ``trainer_determinism``
fixes them before the first merge, so the same texts and settings give byte-identical files in every run.

``--model bpe`` and ``--model unigram`` (byte-level BPE as RoBERTa and ModernBERT, Unigram as XLM-R) are
``vocab_models``'; :func:`train_vocab` picks the trainer, :func:`save_vocab` writes either's files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertprep.core.atomic import remove_stale_staging, repair_replace, write_directory
from bertprep.core.normalization import (
    AccentStats,
    accent_stripping_stats,
    accent_stripping_warning,
    resolve_strip_accents,
)
from bertprep.core.paths import check_writes_apart

# The tokenizer and its files are vocab_files.py's (one builder for make-shards, build-vocab and export).
# SPECIAL_TOKENS ([PAD], [UNK], [CLS], [SEP], [MASK]) is also the id order of a trained vocab ([PAD] first, as
# Hugging Face expects).
from bertprep.core.vocab_files import (  # noqa: F401  (file names and tokenizer_config re-exported)
    CONTINUING_SUBWORD_PREFIX,
    MODEL_MAX_LENGTH,
    SPECIAL_TOKENS,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    build_tokenizer,
    hf_tokenizer,
    special_tokens_map,
    tokenizer_config,
    tokenizer_files,
)
from bertprep.pipeline import interrupts
from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.errors import InputError
from bertprep.pipeline.readers.segmentation import DEFAULT_SEGMENTER
from bertprep.pipeline.text import vocab_models
from bertprep.pipeline.text.trainer_determinism import count_words, fixed_alphabet, texts_of_counts

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from bertprep.pipeline.readers import ReaderStats

#: ``build-vocab --model``: BERT's WordPiece, byte-level BPE (RoBERTa, ModernBERT), Unigram (XLM-R, DeBERTa-v3).
MODELS = ("wordpiece", "bpe", "unigram")
DEFAULT_VOCAB_SIZE = 30522  # bert-base-uncased
DEFAULT_NUM_UNUSED = 100  # bert-base-cased has 100 ([unused1]..[unused99], [unused100], [unused101] aside)
DEFAULT_MIN_FREQUENCY = 2  # as tokenizers' BertWordPieceTokenizer.train
DEFAULT_LIMIT_ALPHABET = 1000  # as tokenizers' BertWordPieceTokenizer.train
#: Files whose presence means "a vocab is already here" (refused without ``overwrite``).
OUTPUT_FILES = (VOCAB_FILE, TOKENIZER_FILE)
#: Every file :func:`save_vocab` writes (and replaces); the user's other files in the directory stay.
WRITTEN_FILES = (VOCAB_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)


def unused_tokens(num_unused: int) -> list[str]:
    """``["[unused0]", ..., "[unused{num_unused-1}]"]``: the spare slots of Google's vocab."""
    return [f"[unused{i}]" for i in range(num_unused)]


class VocabSizeError(ValueError):
    """``vocab_size`` cannot hold the special tokens, the ``[unusedN]`` slots and the corpus alphabet.

    Attributes:
        minimum: the smallest ``vocab_size`` that works (for this corpus when known after reading it).
    """

    def __init__(self, message: str, minimum: int):
        super().__init__(message)
        self.minimum = minimum


@dataclass
class VocabConfig:
    """Settings of a vocabulary training run (WordPiece, or ``vocab_models``' byte-level BPE / Unigram)."""

    vocab_size: int = DEFAULT_VOCAB_SIZE
    """Entries in the vocab, counting the 5 special tokens, the [unusedN] slots, the alphabet and the learned
    word pieces (bert-base-uncased: 30522). Fewer only if the corpus runs out of pairs occurring min_frequency
    times."""
    do_lower_case: bool = True
    """Lower-case and (unless ``strip_accents`` says otherwise) strip accents, as the original ``do_lower_case``."""
    strip_accents: bool | None = None
    """Strip accents (NFD, drop combining marks ``Mn``). ``None``: the same as ``do_lower_case`` (the
    original). ``False`` keeps Hangul syllables and other scripts' marks whole (see ``normalization``)."""
    min_frequency: int = DEFAULT_MIN_FREQUENCY
    """Merge a pair of pieces only if it occurs at least this often in the corpus."""
    limit_alphabet: int | None = DEFAULT_LIMIT_ALPHABET
    """Keep at most this many distinct characters (the most frequent); words with a dropped character become
    [UNK]. ``None`` (0 on the command line): keep every character (raise it for CJK-heavy text)."""
    num_unused: int = DEFAULT_NUM_UNUSED
    """[unused0].. slots after the special tokens, as in Google's vocab: entries you can repurpose for new
    tokens when fine-tuning, without resizing the embedding matrix."""
    show_progress: bool = True
    """Show the ``tokenizers`` trainer's own progress bars (on stderr)."""
    model: str = "wordpiece"
    """``wordpiece``: BERT's (vocab.txt too). ``bpe``: byte-level BPE as RoBERTa and ModernBERT (cased unless
    lower-casing is asked for, a ``Lowercase`` normaliser; <s> <pad> </s> <unk> <mask>). ``unigram``:
    SentencePiece Unigram as XLM-R and DeBERTa-v3 (the same special tokens). ``bpe`` and ``unigram`` write
    tokenizer.json, tokenizer_config.json and special_tokens_map.json, which make-shards --vocab DIR and
    transformers' AutoTokenizer read; they have no [unusedN] slots, accent stripping or alphabet limit
    (num_unused 0, strip_accents None)."""
    special_tokens: str | None = None
    """``bert``: [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4) and BERT's template [CLS] A [SEP] B [SEP] (token_type_ids
    0, then 1 for B [SEP]), also for a bpe or unigram vocab, as ModernBERT's tokenizer has them; transformers loads
    it as PreTrainedTokenizerFast. ``roberta``: <s> <pad> </s> <unk> <mask> and <s> A </s></s> B </s> (bpe and
    unigram only). Default: bert for wordpiece, roberta for bpe and unigram."""
    pad_to_multiple_of: int = 1
    """Append [unusedK] tokens after the learned ones up to the next multiple of this (64: the embedding and
    output matrices fit GPU tiles; ModernBERT's vocab, 50,368 = 787 x 64, ends with 83 of them). WordPiece
    numbers them after its --num-unused slots, in vocab.txt; bpe and unigram add them as special added tokens,
    never produced from text. 1: no padding."""

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        styles = vocab_models.SPECIAL_TOKEN_STYLES
        if self.special_tokens is not None and self.special_tokens not in styles:
            raise ValueError(f"special_tokens must be one of {', '.join(styles)}, got {self.special_tokens!r}")
        if self.model == "wordpiece" and self.special_tokens == "roberta":
            raise ValueError(
                "a wordpiece vocab has BERT's special tokens; special_tokens roberta is for bpe or unigram"
            )
        if isinstance(self.pad_to_multiple_of, bool) or self.pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1 (1: no padding), got {self.pad_to_multiple_of}")
        if self.model != "wordpiece" and (self.num_unused or self.strip_accents is not None):
            raise ValueError(f"the {self.model} model has no [unusedN] slots or accent stripping (num_unused=0)")
        if self.num_unused < 0:
            raise ValueError(f"num_unused must be >= 0, got {self.num_unused}")
        if self.min_frequency < 0:
            raise ValueError(f"min_frequency must be >= 0, got {self.min_frequency}")
        if self.strip_accents is not None and not isinstance(self.strip_accents, bool):
            raise ValueError(f"strip_accents must be True, False or None, got {self.strip_accents!r}")
        if self.limit_alphabet is not None and self.limit_alphabet < 1:
            raise ValueError(f"limit_alphabet must be >= 1 (or None for no limit), got {self.limit_alphabet}")
        minimum = self.min_vocab_size
        if self.vocab_size < minimum and self.model == "bpe":
            raise VocabSizeError(
                f"vocab_size {self.vocab_size} cannot hold the {len(self.reserved_tokens)} special tokens and the "
                f"256 byte symbols of a byte-level BPE: the minimum is {minimum}",
                minimum,
            )
        if self.vocab_size < minimum and self.model == "unigram":
            raise VocabSizeError(
                f"vocab_size {self.vocab_size} cannot hold the {len(self.reserved_tokens)} special tokens of a "
                f"Unigram model and any piece: the minimum is {minimum} (more in practice: every distinct character "
                "kept takes an entry)",
                minimum,
            )
        if self.vocab_size < minimum:
            raise VocabSizeError(
                f"vocab_size {self.vocab_size} cannot hold the {len(self.reserved_tokens) - self.num_unused} special "
                f"tokens, {self.num_unused} [unusedN] slots and an alphabet: the minimum is {minimum} "
                "(more in practice: every distinct character kept takes two entries, c and ##c)",
                minimum,
            )

    @property
    def effective_strip_accents(self) -> bool:
        """The accent stripping applied: ``strip_accents``, or ``do_lower_case`` when that is ``None``."""
        return resolve_strip_accents(self.strip_accents, self.do_lower_case)

    @property
    def token_style(self) -> str:
        """The special tokens' style: ``special_tokens``, or the model's own (wordpiece: bert, else roberta)."""
        if self.special_tokens is not None:
            return self.special_tokens
        return "bert" if self.model == "wordpiece" else "roberta"

    @property
    def reserved_tokens(self) -> list[str]:
        """The special tokens then the ``[unusedN]`` slots: ids ``0 .. len-1`` of the trained vocab."""
        if self.model != "wordpiece":
            return list(vocab_models.STYLE_TOKENS[self.token_style])
        return list(SPECIAL_TOKENS) + unused_tokens(self.num_unused)

    @property
    def min_vocab_size(self) -> int:
        """Lower bound on ``vocab_size`` known before reading the corpus: reserved tokens + 2 (a, ##a); a
        byte-level BPE needs its 256 byte symbols."""
        if self.model == "bpe":
            return vocab_models.MIN_BPE_VOCAB_SIZE
        return len(self.reserved_tokens) + 2


@dataclass
class CorpusStats:
    """What the trainer was fed. ``sentences``: non-empty strings; ``characters``: their total length
    (Unicode code points, before normalization); ``char_counts``: occurrences of each character (for
    :meth:`accent_stats`)."""

    sentences: int = 0
    characters: int = 0
    char_counts: Counter = field(default_factory=Counter, repr=False, compare=False)

    def accent_stats(self) -> AccentStats:
        """What accent stripping does to the letters read (``normalization.accent_stripping_stats``)."""
        return accent_stripping_stats(self.char_counts)


@dataclass
class TrainedVocab:
    """Result of :func:`train_wordpiece`.

    Attributes:
        tokenizer: the complete BERT tokenizer (normalizer, pre-tokenizer, WordPiece, [CLS]/[SEP]
            post-processor, decoder), ready to ``save`` as ``tokenizer.json``.
        tokens: the vocab in id order (``tokens[i]`` has id ``i``): the lines of ``vocab.txt``.
        config: the settings used.
        stats: what was read.
        seconds: wall time of the training call (reading included).
    """

    tokenizer: Tokenizer
    tokens: list[str]
    config: VocabConfig
    stats: CorpusStats = field(default_factory=CorpusStats)
    seconds: float = 0.0
    padding: list[str] = field(default_factory=list)
    """The ``[unusedK]`` tokens appended for ``config.pad_to_multiple_of`` (the last entries of ``tokens``)."""

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def learned_tokens(self) -> list[str]:
        """Entries after the specials and ``[unusedN]`` slots and before the padding: the alphabet and learned
        pieces."""
        return self.tokens[len(self.config.reserved_tokens) : len(self.tokens) - len(self.padding)]

    @property
    def continuation_share(self) -> float:
        """Share of :attr:`learned_tokens` that continue a word (0..1): WordPiece's ``##`` pieces; for a
        byte-level BPE / Unigram those without the ``Ġ`` / ``▁`` of a word's first piece."""
        learned = self.learned_tokens
        if not learned:
            return 0.0
        if self.config.model == "wordpiece":
            return sum(t.startswith(CONTINUING_SUBWORD_PREFIX) for t in learned) / len(learned)
        mark = "\u0120" if self.config.model == "bpe" else "\u2581"
        return sum(not t.startswith(mark) for t in learned) / len(learned)

    def files(self) -> dict[str, str]:
        """Name -> text of the files :func:`save_vocab` writes: WordPiece's ``vocab_files.tokenizer_files``
        (``vocab.txt`` among them), else ``vocab_models.model_files``."""
        if self.config.model == "wordpiece":
            return tokenizer_files(self.tokens, self.config.do_lower_case, strip_accents=self.config.strip_accents)
        return vocab_models.model_files(self.tokenizer, self.config.model, style=self.config.token_style)

    def accent_warning(self, cased_flag: str = "--cased") -> str | None:
        """The warning for a corpus that accent stripping damages (a share of its letters of
        ``normalization.WARN_SHARE`` or more: Korean, Greek, Vietnamese, Hindi...) when this vocab was
        built with stripping; ``None`` otherwise."""
        if not self.config.effective_strip_accents:
            return None
        return accent_stripping_warning(self.stats.accent_stats(), cased_flag=cased_flag)

    def summary(self) -> str:
        """Human-readable one-paragraph summary (vocab size, input read, ``##`` share, time)."""
        pieces = "## pieces" if self.config.model == "wordpiece" else "pieces continuing a word"
        lines = [
            f"{self.config.model} vocab size: {self.vocab_size:,} ({len(self.config.reserved_tokens)} special/unused, "
            f"{len(self.learned_tokens):,} learned, {self.continuation_share:.1%} of them {pieces}"
            + (
                f", {len(self.padding)} [unusedK] padding to a multiple of {self.config.pad_to_multiple_of})"
                if self.padding
                else ")"
            ),
            f"read: {self.stats.sentences:,} sentences, {self.stats.characters:,} characters",
            f"time: {self.seconds:.1f} s",
        ]
        if self.vocab_size < self.config.vocab_size and self.config.model != "unigram":
            lines.append(
                f"note: {self.config.vocab_size:,} entries were asked for, but the corpus has no more pairs "
                f"occurring at least {self.config.min_frequency} times; use more text or a lower --min-frequency"
            )
        return "\n".join(lines)


def _counted(texts: Iterable[str], stats: CorpusStats) -> Iterator[str]:
    """Pass ``texts`` through lazily, skipping blank strings and counting the rest into ``stats``; stop early
    when SIGINT / SIGTERM arrived (``interrupts.received``: the run then ends as soon as the trainer returns)."""
    for text in texts:
        if interrupts.received():
            return
        if not text or text.isspace():
            continue
        stats.sentences += 1
        stats.characters += len(text)
        stats.char_counts.update(text)  # C-speed (~30 ns/character): the accent-stripping check's counts
        yield text


def train_wordpiece(texts: Iterable[str], config: VocabConfig, *, length: int | None = None) -> TrainedVocab:
    """Train a WordPiece vocab on ``texts`` (any iterable of strings, e.g. one sentence each), deterministically.

    ``texts`` is consumed once, lazily: its words are counted (memory: one count per distinct word), then the
    trainer is fed the counted words with its alphabet and ``##`` forms fixed in code-point order
    (``trainer_determinism``: the workaround for huggingface/tokenizers#1794), so the same texts and settings
    give the same vocab in every run and process. ``length``, if known, is the number of strings (unused since
    the words are counted first; kept for callers).

    Returns:
        a :class:`TrainedVocab`; its vocab has exactly ``config.vocab_size`` entries unless the corpus
        runs out of pairs occurring ``config.min_frequency`` times (then fewer; see ``summary()``).

    Raises:
        ValueError: ``texts`` held no non-blank string.
        VocabSizeError: ``config.vocab_size`` is smaller than the reserved tokens plus this corpus's
            alphabet (each kept character ``c`` and its continuation ``##c``); ``.minimum`` says how many
            entries this corpus needs at least.
    """
    del length
    # The words counted with the normalizer and pre-tokenizer that the saved tokenizer uses: the trainer sees the
    # words exactly as they will be tokenized.
    bert = build_tokenizer({}, config.do_lower_case, config.strip_accents)
    stats = CorpusStats()
    start = time.perf_counter()
    interrupts.listen()  # the trainer pulls the words from its own thread: Ctrl-C must stop the feeding
    try:
        words = count_words(
            _counted(texts, stats),
            bert.normalizer,
            bert.pre_tokenizer,
            bert_ascii_lowercase=config.do_lower_case,
        )
        if stats.sentences == 0:
            raise ValueError("no text to train on: the input held no non-blank sentence")
        training = _train_on_words(words, config)
    finally:
        interrupts.stop_listening()
    seconds = time.perf_counter() - start
    tokens = _learned_tokens(training, config)
    # [unusedK] padding after the learned pieces, numbered on from the --num-unused slots (plain entries as theirs)
    padding = vocab_models.unused_names(
        vocab_models.padding_size(len(tokens), config.pad_to_multiple_of), set(tokens), first=config.num_unused
    )
    tokens += padding
    tokenizer = hf_tokenizer(tokens, config.do_lower_case, config.strip_accents)
    return TrainedVocab(tokenizer, tokens, config, stats, seconds, padding)


def _train_on_words(words: Counter, config: VocabConfig) -> Tokenizer:
    """A WordPiece ``Tokenizer`` trained by ``WordPieceTrainer`` on the counted ``words`` (normalised already), the
    alphabet and ``##`` forms fixed in code-point order after ``config.reserved_tokens`` (``fixed_alphabet``, for
    huggingface/tokenizers#1794): the same words give the same vocab in every run and process."""
    alphabet, _, fixed = fixed_alphabet(words, config.limit_alphabet, CONTINUING_SUBWORD_PREFIX)
    trainer = trainers.WordPieceTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        show_progress=config.show_progress,
        special_tokens=config.reserved_tokens + fixed,
        continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
        initial_alphabet=alphabet,  # (with limit_alphabet = its size: exactly these characters are kept)
        limit_alphabet=len(alphabet),
    )
    training = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX))
    training.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # (the words are normalised already)
    training.train_from_iterator(texts_of_counts(words), trainer=trainer, length=len(words))
    return training


def _learned_tokens(training: Tokenizer, config: VocabConfig) -> list[str]:
    """The trained vocab's entries in id order (reserved tokens first). Raises :class:`VocabSizeError` when they are
    more than ``config.vocab_size`` (the reserved tokens and this corpus's alphabet do not fit)."""
    reserved = config.reserved_tokens
    vocab = training.get_vocab(with_added_tokens=False)
    tokens = sorted(vocab, key=vocab.__getitem__)
    # Internal invariants of WordPieceTrainer: contiguous ids, reserved tokens first in the given order.
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "trainer produced non-contiguous ids"
    assert tokens[: len(reserved)] == reserved, "trainer did not put the special tokens first"
    if len(tokens) > config.vocab_size:
        # The trainer always keeps the reserved tokens and the whole (limited) alphabet, then merges
        # while the vocab is smaller than vocab_size: a larger result means no merge happened and the
        # result is exactly the minimum for this corpus.
        raise VocabSizeError(
            f"vocab_size {config.vocab_size:,} is too small for this corpus: the {len(reserved)} special and "
            f"[unusedN] tokens plus the alphabet ({len(tokens) - len(reserved):,} entries: each kept "
            f"character and its ## form) need {len(tokens):,}; the minimum is {len(tokens):,} "
            "(or lower --limit-alphabet / --num-unused)",
            len(tokens),
        )
    return tokens


def train_vocab(texts: Iterable[str], config: VocabConfig) -> TrainedVocab:
    """Train the vocab ``config.model`` names on ``texts`` (consumed once): :func:`train_wordpiece`, or
    ``vocab_models.train_model`` for ``bpe`` / ``unigram`` (deterministic too: ``trainer_determinism``).

    Raises:
        ValueError: ``texts`` held no non-blank string; VocabSizeError: ``vocab_size`` too small.
    """
    if config.model == "wordpiece":
        return train_wordpiece(texts, config)
    stats = CorpusStats()
    start = time.perf_counter()
    interrupts.listen()  # the trainer pulls the texts from its own thread: Ctrl-C must stop the feeding
    try:
        tokenizer = vocab_models.train_model(
            _counted(texts, stats),
            config.model,
            config.vocab_size,
            config.do_lower_case,
            config.min_frequency,
            config.show_progress,
            config.token_style,
        )
    except InputError:
        raise  # an input the reader refused (binary, UTF-16, a truncated .gz): not the vocab size's fault
    except ValueError as err:
        raise VocabSizeError(str(err), config.min_vocab_size) from None
    finally:
        interrupts.stop_listening()
    if stats.sentences == 0:
        raise ValueError("no text to train on: the input held no non-blank sentence")
    padding = vocab_models.pad_with_unused(tokenizer, config.pad_to_multiple_of)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "trainer produced non-contiguous ids"
    assert tokens[: len(config.reserved_tokens)] == config.reserved_tokens, "special tokens not first"
    assert tokens[len(tokens) - len(padding) :] == padding, "padding not last"
    return TrainedVocab(tokenizer, tokens, config, stats, time.perf_counter() - start, padding)


def existing_outputs(output_dir: str) -> list[str]:
    """The files of :data:`OUTPUT_FILES` already in ``output_dir`` (paths)."""
    return [p for p in (os.path.join(output_dir, n) for n in OUTPUT_FILES) if os.path.exists(p)]


def check_output_dir(output_dir: str, inputs: Iterable[str] = ()) -> None:
    """Fail before any work (not after training) when ``output_dir`` cannot take the vocab files.

    Raises:
        ValueError: ``output_dir`` (or the nearest part of it that exists) is a file, or is not a writable
            directory; or one of ``inputs`` is a file :func:`save_vocab` would replace there (vocab.txt,
            tokenizer.json, tokenizer_config.json, special_tokens_map.json): reading it while replacing
            it would lose the input.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"--output-dir {output_dir} is a file, not a directory; choose another --output-dir")
    existing = os.path.abspath(output_dir)
    missing = []
    while not os.path.exists(existing):
        missing.append(existing)
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(
            f"--output-dir {output_dir} cannot be created: {existing} is a file; choose another --output-dir"
        )
    # A real write (permissions, read-only file systems, root squash...), leaving nothing behind.
    made = []
    try:
        for folder in reversed(missing):
            os.mkdir(folder)
            made.append(folder)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".bertprep-write-test-"):
            pass
    except OSError as err:
        raise ValueError(
            f"--output-dir {output_dir} is not writable ({err.strerror or err}); choose a writable --output-dir"
        ) from err
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
    parent = os.path.dirname(os.path.abspath(output_dir))
    try:  # the new vocab is staged beside --output-dir, then swapped in (save_vocab)
        if parent not in missing:  # (a missing parent was just created and written into above)
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".bertprep-write-test-"):
                pass
    except OSError as err:
        raise ValueError(
            f"--output-dir {output_dir}: its parent {parent} is not writable ({err.strerror or err}), and "
            "build-vocab writes the new vocab there before swapping it in; choose a --output-dir in a writable folder"
        ) from err
    check_writes_apart(
        [("--output-dir", os.path.join(output_dir, name)) for name in WRITTEN_FILES],
        [("INPUTS", path) for path in inputs],
        command="build-vocab",
    )


def save_vocab(trained: TrainedVocab, output_dir: str, *, overwrite: bool = False) -> dict[str, str]:
    """Write ``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``,
    published in one step.

    ``output_dir`` then works as a Hugging Face tokenizer directory (``BertTokenizerFast.from_pretrained``).
    ``vocab.txt`` has one token per line, UTF-8, LF, line number = id. The four files are written into a
    staging directory beside ``output_dir`` (``atomic.staging_name``: ``.bertprep-vocab-<host>-<pid>-<8 hex>``, same
    file system), which then takes
    ``output_dir``'s place by renames (:func:`_publish`): ``output_dir`` holds the old complete set or the new
    one, never a mix, and the user's other files in it are kept. A run killed in the middle of the swap is
    repaired by the next one (:func:`repair_interrupted_publish`).

    Returns:
        file name -> path written.

    Raises:
        FileExistsError: ``vocab.txt`` or ``tokenizer.json`` exists and ``overwrite`` is false.
    """
    output_dir = output_dir.rstrip(os.sep) or output_dir
    repair_interrupted_publish(output_dir)
    found = existing_outputs(output_dir)
    if found and not overwrite:
        raise FileExistsError(f"{', '.join(found)} already exist(s); pass overwrite=True (--overwrite) to replace")
    # WordPiece: vocab_files.tokenizer_files, whose tokenizer.json (hf_tokenizer(trained.tokens)) is trained.tokenizer's
    contents = trained.files()
    _publish(contents, output_dir)
    return {name: os.path.join(output_dir, name) for name in contents}


#: The kind of a run's staging directory beside ``output_dir`` (``atomic.staging_name``); and where the old
#: directory waits during the swap (``{}`` = its name: found from the output directory's name by a repair).
_STAGING_KIND = "vocab"
_OLD = ".{}.old"


def _publish(contents: dict[str, str], output_dir: str) -> None:
    """Write ``contents`` into a staging directory and put it in ``output_dir``'s place
    (:func:`~bertprep.core.atomic.write_directory`). Steps, each a rename: 1. the old ``output_dir``
    moves aside to ``.<name>.old``; 2. the staging directory becomes ``output_dir``; 3. the user's other entries
    move back from ``.old``; 4. ``.old`` (now the old vocab files alone) is deleted. Killed after 1,
    :func:`repair_interrupted_publish` puts the old directory back; after 2, it finishes 3 and 4."""
    write_directory(contents, output_dir, _STAGING_KIND, aside=_old_path(output_dir), keep=_not_written)


def _old_path(output_dir: str) -> str:
    parent, base = os.path.split(os.path.abspath(output_dir))
    return os.path.join(parent, _OLD.format(base))


def _not_written(name: str) -> bool:
    """An entry of the output directory that build-vocab does not write (the user's: kept)."""
    return name not in WRITTEN_FILES


def repair_interrupted_publish(output_dir: str) -> str | None:
    """Finish or roll back a :func:`save_vocab` killed while swapping directories, and remove the staging
    directories of dead runs. Returns what was done (None: nothing to repair)."""
    parent = os.path.dirname(os.path.abspath(output_dir))
    if not os.path.isdir(parent):
        return None
    done = repair_replace(_old_path(output_dir), output_dir, keep=_not_written)
    if done is not None:
        done = (
            f"finished replacing the vocab in {output_dir}"
            if done == "finished"
            else f"restored the previous vocab in {output_dir}"
        ) + " (a build-vocab run was killed while replacing it)"
        log.warning(done)
    remove_stale_staging(parent, _STAGING_KIND)
    return done
    return True


# ------------------------------------------------------------------------------------ files -> vocab files


#: Seconds between two progress lines while reading.
_PROGRESS_INTERVAL_S = 5.0


@dataclass
class VocabBuild:
    """What :func:`build_vocab` returns."""

    trained: TrainedVocab
    written: dict[str, str]
    """File name -> path written (see :func:`save_vocab`)."""
    reader_stats: ReaderStats
    """What the readers read (files, documents, bytes...)."""


def build_vocab(
    inputs: list[str],
    output_dir: str,
    config: VocabConfig,
    *,
    input_format: str = ReadOptions.input_format,
    text_field: str = ReadOptions.text_field,
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = ReadOptions.encoding,
    max_line_chars: int | None = None,
    overwrite: bool = False,
) -> VocabBuild:
    """Train a vocab on the sentences of ``inputs`` (files, globs or directories, as make-shards reads them)
    and write it to ``output_dir`` (:func:`save_vocab`): what ``bertprep build-vocab`` does.

    Every check that can fail before training runs first (existing outputs, reader options, inputs, the
    output directory). With ``config.show_progress``, reading progress is printed on stderr as whole lines
    (see ``_sentences_with_progress``).

    Args:
        input_format, text_field, segmenter, encoding, max_line_chars: how to read ``inputs``
            (``pipeline.readers``; ``max_line_chars`` None: the readers' default). The readers' warning about
            an over-long line names ``--max-line-chars``, which build-vocab has as make-shards does.

    Raises:
        FileExistsError: vocab files already exist in ``output_dir`` and ``overwrite`` is false.
        readers.InputError (a ValueError): a bad reader option or input (with the file).
        VocabSizeError (a ValueError): ``vocab_size`` is too small for what the corpus needs.
        ValueError: ``output_dir`` cannot take the files (:func:`check_output_dir`), or no text.
        OSError: writing the files failed (nothing partial is left).
    """
    from bertprep.pipeline.readers import ReaderStats, check_options, expand_inputs

    repair_interrupted_publish(output_dir)  # a run killed while swapping the vocab in (logged)
    found = existing_outputs(output_dir)
    if found and not overwrite:
        raise FileExistsError(f"{', '.join(found)} already exist(s); pass --overwrite to replace")
    line_limit = {} if max_line_chars is None else {"max_line_chars": max_line_chars}
    check_options(input_format, segmenter=segmenter, encoding=encoding, **line_limit)
    files = expand_inputs(inputs)
    check_output_dir(output_dir, files)
    stats = ReaderStats()
    read_options = dict(
        input_format=input_format, text_field=text_field, segmenter=segmenter, encoding=encoding, **line_limit
    )
    trained = train_vocab(_sentences_with_progress(files, read_options, stats, config.show_progress), config)
    written = save_vocab(trained, output_dir, overwrite=overwrite)
    return VocabBuild(trained, written, stats)


def _sentences_with_progress(files: list[str], read_options: dict, stats: ReaderStats, show: bool) -> Iterator[str]:
    """Every sentence of ``files`` (through the readers), reporting progress over files and bytes on stderr.

    The trainer's own bar (indicatif, in Rust) redraws the current terminal line while it consumes this
    iterator, so a second live bar would fight it for the line. Progress is therefore printed as whole
    lines (tqdm's meter format) above the trainer's bar: at most one every ``_PROGRESS_INTERVAL_S``
    seconds, and one when the last file is done.
    """
    from tqdm import tqdm

    from bertprep.pipeline.readers import read_documents

    start = last = time.monotonic()
    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""

    def report(done: int) -> None:
        line = tqdm.format_meter(
            done,
            len(files),
            time.monotonic() - start,
            prefix="Reading",
            unit="file",
            postfix=f"{stats.bytes / 1e6:,.1f} MB, {stats.sentences:,} sentences",
        )
        sys.stderr.write(f"{clear}{line}\n")
        sys.stderr.flush()

    for done, path in enumerate(files):
        for document in read_documents(path, stats=stats, **read_options):
            yield from document.sentences
            if show and time.monotonic() - last >= _PROGRESS_INTERVAL_S:
                report(done)
                last = time.monotonic()
    if show:
        report(len(files))
