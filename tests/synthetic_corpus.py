"""A synthetic vocab and corpus of word-piece ids for the instance-algorithm tests (no Beam, no files):
``w<i>`` words and ``##p<i>`` continuation pieces after the five special tokens, and documents of random
sentences drawn from them with ``random.Random(seed)``."""

from __future__ import annotations

import random

from bertprep.pipeline.text.tokenization import Vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def synthetic_vocab(n_words: int = 500) -> Vocab:
    """The specials, then ``n_words`` entries: half whole words, half ``##`` pieces."""
    words = [f"w{i}" for i in range(n_words // 2)] + [f"##p{i}" for i in range(n_words - n_words // 2)]
    return Vocab.from_tokens(SPECIALS + words, source="synthetic")


def synthetic_corpus(vocab: Vocab, n_docs: int, seed: int = 0) -> list[list[list[int]]]:
    """``n_docs`` documents of 1-30 sentences of 3-40 non-special ids each (deterministic in ``seed``)."""
    rng = random.Random(seed)
    ids = list(range(len(SPECIALS), vocab.size))
    return [
        [[rng.choice(ids) for _ in range(rng.randint(3, 40))] for _ in range(rng.randint(1, 30))] for _ in range(n_docs)
    ]
