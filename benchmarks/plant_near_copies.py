"""Plant near-copies of real Wikipedia articles into a corpus, for ``--dedup minhash`` (bench_dedup.py).

The shared featured articles (WikiExtractor output) are written in the BERT format (one paragraph per
line, a blank line between documents) together with edited copies of some of them: per word, a drop, an
insertion (a word of the same paragraph) or an adjacent swap at about ``rate`` in all (``RATES``: 1%, 3%,
5% and 10%, as many copies of each); documents in a seeded shuffled order. ``truth.json`` lists
``[kind, article, rate]`` per document in file order ("orig" with rate 0, or "copy"): the later of an
article's two documents is the one a deduplicator should drop.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import re
from pathlib import Path

DATA = str(Path(__file__).resolve().parent.parent.parent / "shared/data/wikipedia/wikiextractor-featured/AA/wiki_*")
RATES = (0.01, 0.03, 0.05, 0.10)


def articles(pattern: str = DATA) -> list[list[str]]:
    docs = []
    for path in sorted(glob.glob(pattern)):
        for m in re.finditer(r"<doc[^>]*>\n(.*?)</doc>", Path(path).read_text(encoding="utf-8"), re.S):
            docs.append([line for line in m.group(1).split("\n") if line.strip()])
    return docs


def edit(paragraphs: list[str], rate: float, rng: random.Random) -> list[str]:
    """Drops, insertions and adjacent swaps, each at ``rate / 3`` per word."""
    out = []
    for paragraph in paragraphs:
        words, edited = paragraph.split(), []
        for word in words:
            r = rng.random()
            if r < rate / 3:
                continue
            edited.append(word)
            if r > 1 - rate / 3:
                edited.append(rng.choice(words))
        for _ in range(int(len(edited) * rate / 3)):
            if len(edited) > 1:
                i = rng.randrange(len(edited) - 1)
                edited[i], edited[i + 1] = edited[i + 1], edited[i]
        if edited:
            out.append(" ".join(edited))
    return out


def plant(out_dir: Path, copies: int = 80, seed: int = 1, rates: tuple[float, ...] = RATES) -> tuple[Path, Path]:
    rng = random.Random(seed)
    docs = articles()
    items = [("orig", i, 0.0, d) for i, d in enumerate(docs)]
    for j, i in enumerate(rng.sample(range(len(docs)), copies)):
        rate = rates[j % len(rates)]
        items.append(("copy", i, rate, edit(docs[i], rate, rng)))
    rng.shuffle(items)
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus, truth = out_dir / "near.txt", out_dir / "truth.json"
    corpus.write_text("\n\n".join("\n".join(d) for _, _, _, d in items) + "\n", encoding="utf-8")
    truth.write_text(json.dumps([[k, i, rate] for k, i, rate, _ in items]))
    return corpus, truth


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--copies", type=int, default=80)
    args = parser.parse_args()
    print(*plant(args.out_dir, args.copies))
