"""From runs to the papers' tables: the best setting per task, the median over seeds, the average, Markdown.

Selection (BERT section 4.1, MosaicBERT and ModernBERT for seeds): per task, the runs of one setting (all
seeds) are scored by the median over seeds of the task's table metric on dev; the setting with the highest
median is reported, every metric as its median over those seeds, with the standard deviation over seeds as
the spread (population, 0 for one seed).

The GLUE row is BERT's Table 1: MNLI-(m/mm) accuracy, QQP F1, QNLI, SST-2 accuracy, CoLA Matthews correlation,
STS-B Spearman correlation, MRPC F1, RTE accuracy (WNLI accuracy when run), in percent. The average is BERT's:
the mean of those figures without WNLI, MNLI-m and MNLI-mm counting as two (so 9 numbers for all 8 tasks; BERT
reports 79.6 for BERT-base), which differs from the official GLUE score (WNLI included, two-metric tasks averaged
first).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bertprep.core import strict_json

#: Per task: its column header and the metric it shows (its table metric; MNLI shows matched / mismatched).
GLUE_COLUMNS = {
    "mnli": ("MNLI-(m/mm) Acc", "accuracy"),
    "qqp": ("QQP F1", "f1"),
    "qnli": ("QNLI Acc", "accuracy"),
    "sst2": ("SST-2 Acc", "accuracy"),
    "cola": ("CoLA MCC", "matthews_corrcoef"),
    "stsb": ("STS-B Spearman", "spearman"),
    "mrpc": ("MRPC F1", "f1"),
    "rte": ("RTE Acc", "accuracy"),
    "wnli": ("WNLI Acc", "accuracy"),
}
#: Tasks BERT's average leaves out.
NOT_AVERAGED = ("wnli",)
#: SQuAD: column header and metrics (the official scripts' names, already in percent).
SQUAD_COLUMNS = {
    "squad-v1.1": ("SQuAD v1.1 EM/F1", ("exact_match", "f1")),
    "squad-v2.0": ("SQuAD v2.0 EM/F1", ("exact", "f1")),
}


def _setting_key(record: dict[str, Any]) -> str:
    return strict_json.dumps(record["setting"], sort_keys=True)


def select_setting(records: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """The best setting of one task's runs: the highest median over seeds of ``metrics[metric]`` (the first
    such setting in run order on a tie). Returns ``setting``, ``seeds`` (the seeds' runs), ``metrics`` and
    ``mismatched`` (medians; MNLI's mismatched dev set, else None), ``spread`` (std over seeds, same keys)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(_setting_key(record), []).append(record)
    best = max(groups.values(), key=lambda g: statistics.median(r["metrics"][metric] for r in g))

    def medians(key: str) -> tuple[dict[str, float], dict[str, float]] | tuple[None, None]:
        if best[0].get(key) is None:
            return None, None
        names = best[0][key]
        med = {n: statistics.median(r[key][n] for r in best) for n in names}
        spread = {n: statistics.pstdev(r[key][n] for r in best) for n in names}
        return med, spread

    metrics, spread = medians("metrics")
    mismatched, mismatched_spread = medians("mismatched")
    return {
        "setting": best[0]["setting"],
        "seeds": [r["seed"] for r in best],
        "metrics": metrics,
        "spread": spread,
        "mismatched": mismatched,
        "mismatched_spread": mismatched_spread,
    }


def glue_columns(selected: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], float | None]:
    """The GLUE row of the selected settings (task -> ``select_setting``): columns in BERT's order, each
    ``name``, ``task``, ``values`` and ``spread`` (percent), ``in_average``; and BERT's average (percent)."""
    columns, averaged = [], []
    for task, (name, metric) in GLUE_COLUMNS.items():
        if task not in selected:
            continue
        s = selected[task]
        values = [100 * s["metrics"][metric]]
        spread = [100 * s["spread"][metric]]
        if task == "mnli" and s["mismatched"] is not None:
            values.append(100 * s["mismatched"][metric])
            spread.append(100 * s["mismatched_spread"][metric])
        in_average = task not in NOT_AVERAGED
        columns.append({"name": name, "task": task, "values": values, "spread": spread, "in_average": in_average})
        averaged += values if in_average else []
    return columns, (statistics.fmean(averaged) if averaged else None)


def squad_columns(selected: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The SQuAD row: one column per version, ``values`` EM and F1 (percent) of the selected setting."""
    columns = []
    for task, (name, metrics) in SQUAD_COLUMNS.items():
        if task in selected:
            s = selected[task]
            columns.append(
                {
                    "name": name,
                    "task": task,
                    "values": [s["metrics"][m] for m in metrics],
                    "spread": [s["spread"][m] for m in metrics],
                    "in_average": False,
                }
            )
    return columns


def _cell(values: Sequence[float], spread: Sequence[float] | None, bold: Sequence[bool], seeds: int) -> str:
    parts = []
    for i, v in enumerate(values):
        text = f"{v:.1f}" + (f" ±{spread[i]:.1f}" if spread and seeds > 1 else "")
        parts.append(f"**{text}**" if bold[i] else text)
    return "/".join(parts)


def render_table(rows: Sequence[dict[str, Any]], *, mark_best: bool | None = None) -> str:
    """A Markdown table, one row per model: ``rows`` are ``glue.json`` / ``squad.json`` summaries (``label``,
    ``columns``, ``average`` (None for SQuAD), ``seeds``), their columns in first-seen order, an Average column
    when a row has one. With ``mark_best`` (default: more than one row) the best figure of each column is bold.
    A row without a column shows "-"; an average over fewer tasks than another row's is marked †."""
    mark_best = len(rows) > 1 if mark_best is None else mark_best
    names: list[str] = []
    for row in rows:
        names += [c["name"] for c in row["columns"] if c["name"] not in names]
    has_average = any(row.get("average") is not None for row in rows)
    best: dict[tuple[str, int], float] = {}
    for row in rows:
        for c in row["columns"]:
            for i, v in enumerate(c["values"]):
                best[(c["name"], i)] = max(best.get((c["name"], i), -float("inf")), v)
        if row.get("average") is not None:
            best[("Average", 0)] = max(best.get(("Average", 0), -float("inf")), row["average"])
    averaged = [frozenset(c["name"] for c in row["columns"] if c["in_average"]) for row in rows]
    widest = max((len(a) for a in averaged), default=0)
    header = ["Model", *names, *(["Average"] if has_average else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":---:"] * (len(header) - 1)) + "|"]
    for row, covered in zip(rows, averaged, strict=True):
        by_name = {c["name"]: c for c in row["columns"]}
        cells = [row["label"]]
        for name in names:
            c = by_name.get(name)
            bold = (
                [mark_best and c is not None and v == best[(name, i)] for i, v in enumerate(c["values"])] if c else []
            )
            cells.append(_cell(c["values"], c["spread"], bold, len(row.get("seeds", [1]))) if c else "-")
        if has_average:
            average = row.get("average")
            mark = "†" if average is not None and len(covered) < widest else ""
            text = "-" if average is None else f"{average:.1f}"
            average_bold = average is not None and mark_best and average == best[("Average", 0)]
            cells.append((f"**{text}**" if average_bold else text) + mark)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def glue_note(seeds: int, grid_source: str, from_mnli: bool) -> str:
    """The note under a GLUE table: what the figures are and how the average is computed."""
    spread = f"the median over {seeds} seeds (± the standard deviation over seeds)" if seeds > 1 else "one seed"
    return (
        f"GLUE dev sets, in percent: per task the best setting of the grid ({grid_source}) on dev, {spread}. "
        "F1 for QQP and MRPC, Spearman correlation for STS-B, Matthews correlation for CoLA, accuracy for the "
        "others; MNLI matched/mismatched. Average: the mean of the columns without WNLI, MNLI-m and MNLI-mm "
        "counting as two, as BERT's Table 1 computes it (not the official GLUE score); † marks an average over "
        "fewer tasks than another row's." + (" RTE, MRPC and STS-B start from the MNLI model." if from_mnli else "")
    )
