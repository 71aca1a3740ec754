"""Speed and quality of the sentence segmenters offered by ``bertprep.pipeline.readers.segmentation``.

Speed: segments about ``--mb`` MB of real prose paragraphs from the shared data (Gutenberg books with
their hard-wrapped lines joined, and WikiExtractor Wikipedia paragraphs, half each) with each segmenter,
``--repeats`` times, and prints the median throughput in MB of UTF-8 text per second (one process, one
core). Quality: runs both on a hand-made list of hard cases (abbreviations, initials, decimals, quoted
exclamations, ellipses, ...) with the expected split, and prints each segmenter's errors and the number
of cases on which the two disagree.

Run::

    python benchmarks/bench_segmenters.py [--data /work/shared/data] [--mb 4] [--repeats 3]

Measured on the development machine (2 shared cores), ``python benchmarks/bench_segmenters.py``:
see the module docstring of ``pipeline/readers/segmentation.py`` for the figures and the choice they support.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

from bertprep.pipeline.readers.segmentation import SEGMENTERS, get_segmenter

# (paragraph, expected sentences). Written for this benchmark; the expected split is what a careful
# human reader would mark.
HARD_CASES: list[tuple[str, list[str]]] = [
    ("Mr. Smith went to Washington. He arrived late.", ["Mr. Smith went to Washington.", "He arrived late."]),
    ("Dr. Watson was there. Mrs. Hudson was not.", ["Dr. Watson was there.", "Mrs. Hudson was not."]),
    ("We met at St. Paul's Cathedral. It was cold.", ["We met at St. Paul's Cathedral.", "It was cold."]),
    (
        "Bring fruit, e.g. apples or pears. Do not bring nuts.",
        ["Bring fruit, e.g. apples or pears.", "Do not bring nuts."],
    ),
    (
        "Use a solvent, i.e. water, for the test. Then dry it.",
        ["Use a solvent, i.e. water, for the test.", "Then dry it."],
    ),
    (
        "The U.S. Army was founded in 1775. It is the oldest branch.",
        ["The U.S. Army was founded in 1775.", "It is the oldest branch."],
    ),
    ("She moved to the U.K. in 2001. Then she returned.", ["She moved to the U.K. in 2001.", "Then she returned."]),
    (
        "The price rose to 3.75 dollars. Sales fell by 2.5 percent.",
        ["The price rose to 3.75 dollars.", "Sales fell by 2.5 percent."],
    ),
    ('"Stop!" he said. Nobody moved.', ['"Stop!" he said.', "Nobody moved."]),
    (
        '"Where are you going?" she asked. He did not answer.',
        ['"Where are you going?" she asked.', "He did not answer."],
    ),
    ("He hesitated... Then he spoke.", ["He hesitated...", "Then he spoke."]),
    ("Wait for it... the door opened slowly.", ["Wait for it... the door opened slowly."]),
    (
        "J. R. R. Tolkien wrote The Hobbit. It appeared in 1937.",
        ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."],
    ),
    (
        "The letter was signed by T. S. Eliot himself. Nobody believed it.",
        ["The letter was signed by T. S. Eliot himself.", "Nobody believed it."],
    ),
    ("See Fig. 3 for details. The results are clear.", ["See Fig. 3 for details.", "The results are clear."]),
    ("He lives at No. 5 Baker Street. It is small.", ["He lives at No. 5 Baker Street.", "It is small."]),
    ("The meeting is at 5 p.m. on Friday. Please come.", ["The meeting is at 5 p.m. on Friday.", "Please come."]),
    ("Apple Inc. reported record sales. Its shares rose.", ["Apple Inc. reported record sales.", "Its shares rose."]),
    ("Is it true? Yes! It is.", ["Is it true?", "Yes!", "It is."]),
    ('He said "Go home." Then he left.', ['He said "Go home."', "Then he left."]),
    ("The ship (built in 1912) sank. Many died.", ["The ship (built in 1912) sank.", "Many died."]),
    (
        "Version 2.0 was released in Jan. 2020. It was popular.",
        ["Version 2.0 was released in Jan. 2020.", "It was popular."],
    ),
    ("It costs $1.5 million. That is a lot.", ["It costs $1.5 million.", "That is a lot."]),
    ("He read vol. 2 of the series. It was long.", ["He read vol. 2 of the series.", "It was long."]),
    ("He grew up in the U.S. Then he moved to Paris.", ["He grew up in the U.S.", "Then he moved to Paris."]),
    ("Prof. Higgins smiled. Col. Pickering did not.", ["Prof. Higgins smiled.", "Col. Pickering did not."]),
    ('"Really?" asked Tom. "Yes."', ['"Really?" asked Tom.', '"Yes."']),
    ("The company is Acme Inc. It makes anvils.", ["The company is Acme Inc.", "It makes anvils."]),
    ("See section 3.2. It explains the rest.", ["See section 3.2.", "It explains the rest."]),
    ('Who said "To be, or not to be"? Hamlet did.', ['Who said "To be, or not to be"?', "Hamlet did."]),
]


def _normalize(sentences: list[str]) -> list[str]:
    # blingfire collapses internal whitespace; compare modulo whitespace runs.
    return [" ".join(s.split()) for s in sentences]


def load_paragraphs(data: str, target_bytes: int) -> list[str]:
    """About ``target_bytes`` of prose paragraphs: half Gutenberg (wrapped lines joined), half Wikipedia."""
    half = target_bytes // 2
    books: list[str] = []
    size = 0
    for path in sorted(glob.glob(os.path.join(data, "gutenberg", "*.txt"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().replace("\r\n", "\n")
        for block in text.split("\n\n"):
            paragraph = " ".join(line.strip() for line in block.split("\n") if line.strip())
            if paragraph:
                books.append(paragraph)
                size += len(paragraph.encode("utf-8"))
                if size >= half:
                    break
        if size >= half:
            break
    wiki: list[str] = []
    size = 0
    for path in sorted(glob.glob(os.path.join(data, "wikipedia", "wikiextractor-featured", "AA", "wiki_*"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("<") and len(line) > 80:  # paragraphs, not tags or titles
                    wiki.append(line)
                    size += len(line.encode("utf-8"))
                    if size >= half:
                        break
        if size >= half:
            break
    return books + wiki


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", "/work/shared/data"))
    parser.add_argument("--mb", type=float, default=4.0, help="MB of prose to segment per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    print("command:", " ".join(["python"] + sys.argv))
    paragraphs = load_paragraphs(args.data, int(args.mb * 1e6))
    total = sum(len(p.encode("utf-8")) for p in paragraphs)
    print(f"prose: {len(paragraphs):,} paragraphs, {total / 1e6:.2f} MB (Gutenberg + Wikipedia)")

    outputs: dict[str, list[list[str]]] = {}
    corpus_outputs: dict[str, list[list[str]]] = {}
    for name in SEGMENTERS:
        split = get_segmenter(name)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = [split(p) for p in paragraphs]
            times.append(time.perf_counter() - start)
        n_sentences = sum(map(len, result))
        corpus_outputs[name] = [_normalize(r) for r in result]
        median = statistics.median(times)
        print(
            f"{name:10s} median of {args.repeats}: {median:6.2f} s  {total / 1e6 / median:6.2f} MB/s  "
            f"{n_sentences:,} sentences"
        )
        outputs[name] = [_normalize(split(text)) for text, _ in HARD_CASES]

    print(f"hard cases: {len(HARD_CASES)}")
    for name in SEGMENTERS:
        errors = [(text, got) for (text, want), got in zip(HARD_CASES, outputs[name], strict=True) if got != want]
        print(f"{name:10s} correct {len(HARD_CASES) - len(errors)}/{len(HARD_CASES)}")
        for text, got in errors:
            print(f"    wrong: {text!r} -> {got}")
    a, b = SEGMENTERS[:2]
    disagreements = sum(x != y for x, y in zip(outputs[a], outputs[b], strict=True))
    print(f"disagreements {a} vs {b}: {disagreements}/{len(HARD_CASES)} hard cases")
    differ = [i for i, (x, y) in enumerate(zip(corpus_outputs[a], corpus_outputs[b], strict=True)) if x != y]
    print(
        f"disagreements {a} vs {b} on the prose: {len(differ):,}/{len(paragraphs):,} paragraphs "
        f"({100 * len(differ) / max(1, len(paragraphs)):.1f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
