"""Learning curves of several pre-training runs in one picture (``bertprep plot``), so that recipes compare at a
glance: held-out MLM accuracy at ``[MASK]`` and loss, against the tokens trained on and against minutes.

In: run directories (or their ``metrics.jsonl``) written by ``bertprep train``. Out: one image (matplotlib; the
format follows the file's extension: png, svg, pdf). ``metrics.png``, drawn at the end of each run, shows one
run's curves against steps (``metrics.plot_metrics``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from bertprep.bert_model.metrics import read_jsonl
from bertprep.core.atomic import write_atomic

#: The image formats ``plot_runs`` writes (matplotlib's, by the output's extension).
FORMATS = ("png", "svg", "pdf")


@dataclass
class RunCurves:
    """One run's curves, read from its ``metrics.jsonl``; every array is float64, one entry per line."""

    name: str
    """The label in the legend (the run directory's name)."""
    train_tokens: np.ndarray
    """``tokens_seen`` of the training lines: real (non-padding) tokens trained on so far."""
    train_minutes: np.ndarray
    """``elapsed_s`` / 60 of the training lines: wall minutes since the run (its last invocation) started."""
    train_loss: np.ndarray
    eval_tokens: np.ndarray
    """The evaluations' tokens and minutes, interpolated from the training lines at the evaluation's step."""
    eval_minutes: np.ndarray
    eval_loss: np.ndarray
    eval_accuracy_at_mask: np.ndarray
    """``mlm_accuracy_at_mask`` of the evaluations (NaN where a line lacks it)."""


def metrics_file(run: str) -> str:
    """The ``metrics.jsonl`` of ``run`` (a run directory or the file itself).

    Raises:
        FileNotFoundError: there is none.
    """
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run}: no metrics.jsonl (give a run directory written by 'bertprep train')")
    return path


def read_run(run: str, name: str | None = None) -> RunCurves:
    """Read ``run``'s curves (see :class:`RunCurves`).

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` in ``run``.
        ValueError: it has no pre-training lines (no ``tokens_seen``: empty, or a ``finetune`` run's).
    """
    path = metrics_file(run)
    records = read_jsonl(path)
    train = [r for r in records if r.get("split") == "train" and "tokens_seen" in r]
    if not train:
        raise ValueError(f"{path} has no pre-training lines (with tokens_seen): is it a 'bertprep train' run?")
    evals = [r for r in records if r.get("split") == "eval"]
    steps = np.array([r["step"] for r in train], dtype=np.float64)
    tokens = np.array([r["tokens_seen"] for r in train], dtype=np.float64)
    minutes = _cumulative(np.array([r.get("elapsed_s", np.nan) for r in train], dtype=np.float64) / 60)
    eval_steps = np.array([r["step"] for r in evals], dtype=np.float64)
    return RunCurves(
        name=name or os.path.basename(os.path.dirname(os.path.abspath(path))),
        train_tokens=tokens,
        train_minutes=minutes,
        train_loss=np.array([r["loss"] for r in train], dtype=np.float64),
        eval_tokens=np.interp(eval_steps, steps, tokens),
        eval_minutes=np.interp(eval_steps, steps, minutes),
        eval_loss=np.array([r["loss"] for r in evals], dtype=np.float64),
        eval_accuracy_at_mask=np.array([_or_nan(r.get("mlm_accuracy_at_mask")) for r in evals], dtype=np.float64),
    )


def _cumulative(minutes: np.ndarray) -> np.ndarray:
    """Minutes across invocations: ``elapsed_s`` restarts with each ``--resume``; where it drops, the run's
    total so far (the previous line's) is added to the lines of the new invocation."""
    out, offset = minutes.copy(), 0.0
    for i in range(1, len(out)):
        if minutes[i] < minutes[i - 1]:
            offset = out[i - 1]
        out[i] = minutes[i] + offset
    return out


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else float(value)


def run_names(runs: list[str]) -> list[str]:
    """Legend labels: each run directory's name, or its path where two names would be the same."""
    names = [os.path.basename(os.path.dirname(os.path.abspath(metrics_file(r)))) for r in runs]
    return [r.rstrip("/") if names.count(n) > 1 else n for r, n in zip(runs, names, strict=True)]


def plot_runs(curves: list[RunCurves], output: str, title: str | None = None) -> None:
    """Draw the curves into ``output`` (written whole or not at all): top, held-out accuracy at [MASK]; bottom,
    training loss (line) and held-out loss (dots); left against tokens, right against minutes; one colour per run.

    Raises:
        ValueError: ``output``'s extension is not one of ``FORMATS``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fmt = os.path.splitext(output)[1].lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{output}: write a .png, .svg or .pdf file (the format follows the extension)")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True, sharey="row")
    for i, run in enumerate(curves):
        color = f"C{i % 10}"
        for col, (train_x, eval_x) in enumerate(
            ((run.train_tokens, run.eval_tokens), (run.train_minutes, run.eval_minutes))
        ):
            axes[0, col].plot(eval_x, run.eval_accuracy_at_mask, "o-", color=color, ms=3, label=run.name)
            axes[1, col].plot(train_x, run.train_loss, "-", color=color, lw=1, label=f"{run.name} (train)")
            axes[1, col].plot(eval_x, run.eval_loss, "o", color=color, ms=4, label=f"{run.name} (held-out)")
    axes[0, 0].set_ylabel("held-out MLM accuracy at [MASK]")
    axes[1, 0].set_ylabel("loss (MLM + NSP weight x NSP)")
    for row in range(2):
        axes[row, 0].set_xlabel("tokens trained on (real, non-padding)")
        axes[row, 0].xaxis.set_major_formatter(EngFormatter())  # 1.5M, not 1.5e6
        axes[row, 1].set_xlabel("minutes (wall clock, evaluations included)")
        for ax in axes[row]:
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[1, 1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    write_atomic(output, lambda tmp: fig.savefig(tmp, format=fmt, dpi=100))
    plt.close(fig)
