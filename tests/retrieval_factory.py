"""Tiny retrieval data for the retrieval tests: a BEIR folder and a SQuAD file, in the fixture vocab's words.

beir = write_beir(tmp_path / "beir")          # 8 documents, 8 queries; train q0-q3, test q4-q7
squad = squad_file(tmp_path / "s.json", articles=6)
"""

from __future__ import annotations

import json
from pathlib import Path

from finetune_factory import FILLER

TITLES = ["river", "city", "year", "one", "two", "three", "he", "she"]


def write_beir(folder: Path, documents: int = 8) -> Path:
    """A BEIR folder: document ``d<i>`` titled ``TITLES[i]``, query ``q<i>`` relevant to it (score 1); queries
    0-3 in ``qrels/train.tsv``, the others in ``qrels/test.tsv``. Returns ``folder``."""
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as f:
        for i in range(documents):
            text = " ".join(FILLER[(i * 3 + k) % len(FILLER)] for k in range(6))
            f.write(json.dumps({"_id": f"d{i}", "title": TITLES[i % len(TITLES)], "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as f:
        for i in range(documents):
            f.write(json.dumps({"_id": f"q{i}", "text": f"{TITLES[i % len(TITLES)]} {FILLER[i * 3 % len(FILLER)]}"}))
            f.write("\n")
    for split, ids in (("train", range(documents // 2)), ("test", range(documents // 2, documents))):
        rows = "".join(f"q{i}\td{i}\t1\n" for i in ids)
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


def squad_file(path: Path, articles: int = 6, paragraphs: int = 3, questions: int = 2) -> Path:
    """A SQuAD v1.1 file of ``articles`` articles (titles ``article-<i>``), ``paragraphs`` paragraphs each,
    ``questions`` answerable questions per paragraph (ids ``a<i>-p<j>-q<k>``). Returns ``path``."""
    data = []
    for a in range(articles):
        paras = []
        for p in range(paragraphs):
            context = " ".join(FILLER[(a + p + k) % len(FILLER)] for k in range(12))
            qas = [
                {
                    "id": f"a{a}-p{p}-q{q}",
                    "question": f"{FILLER[(a + q) % len(FILLER)]} {FILLER[p]}?",
                    "answers": [{"text": context.split()[0], "answer_start": 0}],
                }
                for q in range(questions)
            ]
            paras.append({"context": context, "qas": qas})
        data.append({"title": f"article-{a}", "paragraphs": paras})
    path.write_text(json.dumps({"version": "1.1", "data": data}))
    return path
