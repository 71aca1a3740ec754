"""Deterministic vocab training with Hugging Face ``tokenizers``: the workarounds, in one place.

**WordPiece** (huggingface/tokenizers#1794, fix proposed in PR #2066, open). ``WordPieceTrainer`` is
``BpeTrainer`` with the ``##`` prefix. The trainer gives every ``##`` form (``##a``) its id while it walks its
word-count hash map, in that map's order, which is seeded anew in every process; two pairs of equal count are
merged in the order of their ids, so the ids decide which of them is merged first and, at the ``vocab_size``
cut-off, which one makes it into the vocab. The trainer also cuts the alphabet to ``limit_alphabet`` with an
unstable sort, so characters of equal count at the limit are kept or dropped at random. The workaround fixes
every id before the first merge: the words are counted here (:func:`count_words`, with the normaliser and
pre-tokenizer the vocab uses), the kept alphabet and its ``##`` forms are handed to the trainer as special
tokens in code-point order (:func:`fixed_alphabet`: special tokens get their ids first, in the order given),
and the trainer is fed the counted words (:func:`texts_of_counts`). The layout is the one a fixed trainer
gives: the reserved tokens, the alphabet, its ``##`` forms, then the pieces in the order they were merged.
When upstream fixes the trainer, ``vocab.train_wordpiece`` can go back to feeding it the text.

**Unigram** (``UnigramTrainer``): it keeps its words in a hash map too, so its EM sums run in a different order
in every process (scores differ in the last bits, up to 4e-11 measured) and the characters it must keep but
pruned get their scores, ``min_score + k * 1e-4``, in hash order. :func:`canonical_unigram_vocab` gives those
characters the lowest score alike and rounds every score to :data:`UNIGRAM_SCORE_DECIMALS` decimals, then
orders the pieces by score (then text), so that the jitter does not reach the file.

**BPE** (byte-level, as RoBERTa and ModernBERT) needs nothing: its alphabet is the 256 byte symbols in
code-point order and it creates no ``##`` forms, so every id is fixed before the first merge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

#: Texts handed to the Rust normaliser and pre-tokenizer at once when counting words (pure-ASCII ones are
#: counted in Python, see :func:`count_words`).
_BATCH = 512
#: Decimals kept of a Unigram score (a log probability): far above the EM's jitter, far below any difference
#: that changes a segmentation.
UNIGRAM_SCORE_DECIMALS = 6
#: ``UnigramTrainer.finalize``'s step between the scores of required characters the EM pruned.
_UNIGRAM_PENALTY_STEP = 1e-4


def count_words(texts: Iterable[str], normalizer, pre_tokenizer, *, bert_ascii_lowercase: bool | None) -> Counter:
    """The words of ``texts`` and how often each occurs, as the trainer would count them: each text normalised
    by ``normalizer`` and split by ``pre_tokenizer`` (``tokenizers`` objects).

    ``bert_ascii_lowercase``: for BERT's ``BertNormalizer`` + ``BertPreTokenizer`` pass its ``lowercase``:
    pure-ASCII texts are then counted in Python with the shortcut make-shards' ``SentenceEncoder`` uses (the
    same words, tested; ten times faster than a call into ``tokenizers`` per text). None: every text goes
    through ``normalizer`` and ``pre_tokenizer``.
    """
    from bertprep.pipeline.text.tokenization import _ASCII_CLEAN, _ASCII_PRE_TOKENS

    counts: Counter = Counter()
    ascii_batch: list[str] = []
    other: list[str] = []

    def flush_ascii() -> None:
        text = " ".join(ascii_batch).translate(_ASCII_CLEAN)
        counts.update(_ASCII_PRE_TOKENS.findall(text.lower() if bert_ascii_lowercase else text))
        ascii_batch.clear()

    def flush_other() -> None:
        for text in other:  # (one call per text: a text is a sentence, and the splits must not cross texts)
            counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
        other.clear()

    for text in texts:
        if bert_ascii_lowercase is not None and text.isascii():
            ascii_batch.append(text)
            if len(ascii_batch) >= _BATCH:
                flush_ascii()
        else:
            other.append(text)
            if len(other) >= _BATCH:
                flush_other()
    if ascii_batch:
        flush_ascii()
    flush_other()
    return counts


def fixed_alphabet(
    word_counts: Counter, limit_alphabet: int | None, prefix: str
) -> tuple[list[str], list[str], list[str]]:
    """The trainer's alphabet and ``##`` forms, fixed: ``(alphabet, continuations, special_tokens)``.

    * ``alphabet``: every character of the words, or the ``limit_alphabet`` most frequent (ties: the lower code
      point), in code-point order (the trainer's own order);
    * ``continuations``: ``prefix + c`` for each kept ``c`` that follows another character in some word (the
      trainer makes exactly these), in code-point order of ``c``;
    * ``special_tokens``: the two, to append to the trainer's special tokens.
    """
    frequency: Counter = Counter()
    inside: set[str] = set()
    for word, count in word_counts.items():
        for c in word:
            frequency[c] += count
        inside.update(word[1:])
    chars = sorted(frequency, key=lambda c: (-frequency[c], c))
    if limit_alphabet is not None:
        chars = chars[:limit_alphabet]
    alphabet = sorted(chars)
    continuations = [prefix + c for c in alphabet if c in inside]
    return alphabet, continuations, alphabet + continuations


def texts_of_counts(word_counts: Counter) -> Iterator[str]:
    """The counted words as texts for the trainer (pre-tokenizer ``WhitespaceSplit``, no normaliser): each word
    once per occurrence, separated by spaces, in sorted order (a word never holds whitespace once
    pre-tokenized)."""
    for word in sorted(word_counts):
        count = word_counts[word]
        while count:
            n = min(count, 1 << 16)
            yield (word + " ") * n
            count -= n


def canonical_unigram_vocab(pieces: Sequence[tuple[str, float]], num_special: int) -> list[tuple[str, float]]:
    """A trained Unigram vocab (``(piece, score)`` in id order, special tokens first) made independent of the
    trainer's hash order (see the module docstring).

    The characters on ``UnigramTrainer.finalize``'s ladder (single characters scored ``m + k * 1e-4``, ``k`` =
    0, 1, 2... without a gap, above the lowest score ``m``: the pruned characters, in hash order, and those the
    model itself scores ``m``) all get ``m``; every score is rounded to :data:`UNIGRAM_SCORE_DECIMALS` decimals;
    the pieces after the special tokens are ordered by score, highest first, then by text.
    """
    special, rest = list(pieces[:num_special]), list(pieces[num_special:])
    if not rest:
        return special
    lowest = min(score for _, score in rest)
    steps: dict[int, list[int]] = {}
    for index, (piece, score) in enumerate(rest):
        k = (score - lowest) / _UNIGRAM_PENALTY_STEP
        if len(piece) == 1 and abs(k - round(k)) < 1e-3:
            steps.setdefault(round(k), []).append(index)
    k = 0
    while k in steps:
        for index in steps[k]:
            rest[index] = (rest[index][0], lowest)
        k += 1
    rounded = [(piece, round(score, UNIGRAM_SCORE_DECIMALS)) for piece, score in rest]
    rounded.sort(key=lambda item: (-item[1], item[0]))
    return special + rounded


__all__ = ["UNIGRAM_SCORE_DECIMALS", "canonical_unigram_vocab", "count_words", "fixed_alphabet", "texts_of_counts"]
