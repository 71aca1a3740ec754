"""Retrieval metrics through ``pytrec_eval`` (the Python binding of NIST's ``trec_eval``), and TREC run files.

The metrics BEIR reports (Thakur et al. 2021), each the mean over the judged queries (a query the run does
not retrieve for scores 0), as fractions in [0, 1]:

- ``ndcg@10``: ``trec_eval``'s ``ndcg_cut.10``: the discounted cumulative gain of the first 10 results (gain
  = the judged score, discount ``log2(rank + 1)``) over that of the ideal order.
- ``mrr@10``: ``trec_eval``'s ``recip_rank`` of the first 10 results: 1 / the rank of the first relevant
  document among them, 0 when none is.
- ``recall@100``: ``trec_eval``'s ``recall.100``: the share of the query's relevant documents in its first 100.

Ranks are ``trec_eval``'s: by score, higher first, ties broken by document id in reverse order.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

import pytrec_eval

METRICS = ("ndcg@10", "mrr@10", "recall@100")
_TREC = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100"}

Run = Mapping[str, Mapping[str, float]]
"""Query id -> {document id: score}."""


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Document ids as ``trec_eval`` ranks them: score descending, then document id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def per_query_metrics(qrels: Mapping[str, Mapping[str, int]], run: Run) -> dict[str, dict[str, float]]:
    """Query id -> {metric: value} for every judged query (module docstring), by ``pytrec_eval``."""
    full = {q: dict(run.get(q, {})) for q in qrels}
    top10 = {q: {d: full[q][d] for d in trec_order(full[q])[:10]} for q in full}
    qrels_dict = {q: dict(j) for q, j in qrels.items()}
    cut = pytrec_eval.RelevanceEvaluator(qrels_dict, {"ndcg_cut.10", "recall.100"}).evaluate(_nonempty(full))
    rr = pytrec_eval.RelevanceEvaluator(qrels_dict, {"recip_rank"}).evaluate(_nonempty(top10))
    out = {}
    for q in qrels:
        values = cut.get(q, {})
        out[q] = {
            "ndcg@10": values.get(_TREC["ndcg@10"], 0.0),
            "mrr@10": rr.get(q, {}).get("recip_rank", 0.0),
            "recall@100": values.get(_TREC["recall@100"], 0.0),
        }
    return out


def _nonempty(run: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``trec_eval`` skips a query without results; it then scores 0 (``per_query_metrics`` fills it in)."""
    return {q: dict(d) for q, d in run.items() if d}


def mean_metrics(qrels: Mapping[str, Mapping[str, int]], run: Run) -> dict[str, float]:
    """{metric: mean over the judged queries} (module docstring)."""
    per_query = per_query_metrics(qrels, run)
    return {m: statistics.fmean(v[m] for v in per_query.values()) for m in METRICS}


def write_run(path: str, run: Run, tag: str = "bertprep") -> None:
    """A TREC run file: ``query-id Q0 doc-id rank score tag`` per line, each query's documents in
    ``trec_order`` (what ``trec_eval`` and ``ranx.Run.from_file`` read)."""
    with open(path, "w", encoding="utf-8") as f:
        for q in sorted(run):
            for rank, d in enumerate(trec_order(run[q]), start=1):
                f.write(f"{q} Q0 {d} {rank} {run[q][d]!r} {tag}\n")


def read_run(path: str) -> dict[str, dict[str, float]]:
    """A TREC run file back to query id -> {document id: score}."""
    run: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{number}: expected 'query-id Q0 doc-id rank score tag'")
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run
