"""A small sentence-classification task from the bundled demo books: which book does a sentence come from?

Writes ``train.tsv`` and ``dev.tsv`` in the GLUE single-sentence layout (a header line ``sentence<TAB>label``,
as SST-2's), read by ``bertprep finetune --task glue --text-a-column sentence --label-column label --header``.
The labels are the books' file names without ``.txt`` (``blake-poems``, ``chesterton-thursday``,
``shakespeare-macbeth``). The same seed and options give the same files.

    python demo/make_book_task.py -o task/ [--corpus DIR] [--sentences-per-book 1000] [--seed 0]

Sentences are cut from paragraphs (blank-line separated) at ``.``, ``!`` or ``?``, with speaker tags of the
play ("Macb.", "2.") taken off; sentences of fewer than 5 or more than 40 words, and repeats, are left out. Each
book gives at most ``--sentences-per-book`` (a random sample), so the classes are closer to balanced than
the books' sizes are; a fifth of each book's sentences goes to dev.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_SPEAKER = re.compile(r"^(?:\d\.|[A-Z][A-Za-z]{1,12}\.)\s+")
MIN_WORDS, MAX_WORDS = 5, 40


def book_sentences(text: str) -> list[str]:
    """The sentences of one book, in order, whitespace collapsed, without speaker tags and repeats."""
    seen: set[str] = set()
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        for sentence in _SENTENCE_END.split(paragraph):
            sentence = _SPEAKER.sub("", sentence).strip()
            if MIN_WORDS <= len(sentence.split()) <= MAX_WORDS and sentence not in seen:
                seen.add(sentence)
                sentences.append(sentence)
    return sentences


def make_task(
    corpus: Path, *, sentences_per_book: int, dev_fraction: float, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(sentence, label) rows for train and dev, each shuffled with ``seed``."""
    rng = random.Random(seed)
    train, dev = [], []
    for path in sorted(corpus.glob("*.txt")):
        sentences = book_sentences(path.read_text(encoding="utf-8"))
        rng.shuffle(sentences)
        sentences = sentences[:sentences_per_book]
        n_dev = round(len(sentences) * dev_fraction)
        dev += [(s, path.stem) for s in sentences[:n_dev]]
        train += [(s, path.stem) for s in sentences[n_dev:]]
    rng.shuffle(train)
    rng.shuffle(dev)
    return train, dev


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for sentence, label in rows:
            f.write(f"{sentence.replace(chr(9), ' ')}\t{label}\n")


def read_tsv(path: Path) -> list[tuple[str, str]]:
    """The (sentence, label) rows of a file written by :func:`write_tsv`."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [tuple(line.split("\t")) for line in lines]  # type: ignore[misc]


def majority_baseline(train: list[tuple[str, str]], dev: list[tuple[str, str]]) -> tuple[str, float]:
    """The commonest training label and the dev accuracy of always predicting it."""
    label = Counter(lab for _, lab in train).most_common(1)[0][0]
    return label, sum(lab == label for _, lab in dev) / len(dev)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output-dir", type=Path, required=True, help="Where train.tsv and dev.tsv go.")
    parser.add_argument("--corpus", type=Path, default=None, help="Folder of *.txt books (default: the demo corpus).")
    parser.add_argument("--sentences-per-book", type=int, default=1000, help="At most this many per book.")
    parser.add_argument("--dev-fraction", type=float, default=0.2, help="Share of each book's sentences in dev.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sample and the shuffles.")
    args = parser.parse_args(argv)
    if args.corpus is None:
        from bertprep.pipeline import demo_corpus_dir

        args.corpus = Path(demo_corpus_dir())
    train, dev = make_task(
        args.corpus, sentences_per_book=args.sentences_per_book, dev_fraction=args.dev_fraction, seed=args.seed
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_tsv(args.output_dir / "train.tsv", train)
    write_tsv(args.output_dir / "dev.tsv", dev)
    label, accuracy = majority_baseline(train, dev)
    counts = ", ".join(f"{lab} {n}" for lab, n in sorted(Counter(lab for _, lab in train + dev).items()))
    print(
        f"{len(train)} train / {len(dev)} dev sentences ({counts}); "
        f"majority baseline ({label}) dev accuracy {accuracy:.3f}"
    )


if __name__ == "__main__":
    main()
