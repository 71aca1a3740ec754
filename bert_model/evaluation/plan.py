"""The settings record of a resumable evaluation folder: one table's runs share one set of settings.

An evaluation (``harness.evaluate_glue`` / ``evaluate_squad``, ``retrieval.evaluate.evaluate_retrieval``) writes
into its output folder a plan file (``evaluation.json``, ``retrieval_plan.json``: every setting its numbers
depend on) and, for each run that finished, a record file under ``runs/`` (``glue_run.json``, ``metrics.json``,
...). :func:`check_plan` is the one rule for a command given a folder: the same settings continue it; other
settings are refused once a run has finished, and otherwise (the earlier command was refused or stopped before
its first run finished, e.g. one with a wrong ``--model``) the folder takes them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

from bertprep.core import strict_json
from bertprep.core.atomic import write_atomic

logger = logging.getLogger("bertprep.evaluate")


def write_json(path: str, values: Any) -> None:
    """``values`` as strict JSON in ``path``, atomically (``core.strict_json``: a NaN or an infinity is refused
    naming the file and the value's place, and nothing is written)."""
    text = strict_json.dumps(values, what=path, indent=1) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomic(path, write)


def finished_runs(output_dir: str, record_names: tuple[str, ...]) -> list[str]:
    """The run records (files named one of ``record_names``) under ``output_dir/runs/``, sorted."""
    runs = os.path.join(output_dir, "runs")
    return sorted(
        os.path.join(root, name) for root, _, names in os.walk(runs) for name in names if name in record_names
    )


def check_plan(
    output_dir: str,
    plan: dict[str, Any],
    *,
    plan_file: str,
    record_names: tuple[str, ...],
    report: Callable[[str], None] = logger.info,
    remove_unfinished: bool = False,
) -> None:
    """Write ``output_dir/plan_file`` (``plan``: JSON values), or refuse an ``output_dir`` whose finished runs
    (:func:`finished_runs` of ``record_names``) were made with other settings.

    A folder whose plan file records other settings but holds no finished run takes the new settings (one
    ``report`` line says so). With ``remove_unfinished`` (an evaluation whose unfinished runs continue from what
    they left, as retrieval's corpus encoding does) ``output_dir/runs/`` is removed first, so that nothing made
    with the old settings is continued under the new ones.

    Raises:
        ValueError: the folder holds finished runs of other settings, or its plan file is not a JSON object
            (the message names the file and what to do).
    """
    path = os.path.join(output_dir, plan_file)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                earlier = json.load(f)
            if not isinstance(earlier, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(
                f"{path} is not an evaluation record ({err}); choose another --output-dir, or delete the file "
                "when the folder's runs may be redone"
            ) from None
        changed = [k for k in sorted(set(plan) | set(earlier)) if plan.get(k) != earlier.get(k)]
        if not changed:
            return
        k = next((c for c in changed if c != "grid"), changed[0])  # (a grid is long to show)
        more = f"; {', '.join(c for c in changed if c != k)} differ too" if len(changed) > 1 else ""
        finished = finished_runs(output_dir, record_names)
        if finished:
            raise ValueError(
                f"{output_dir} holds an evaluation made with other settings ({k}: {earlier.get(k)!r} there, "
                f"{plan.get(k)!r} now{more}; {path}, {len(finished)} finished run(s)); choose another "
                "--output-dir, or repeat its settings to continue it"
            )
        removed = ""
        if remove_unfinished and os.path.isdir(os.path.join(output_dir, "runs")):
            shutil.rmtree(os.path.join(output_dir, "runs"))
            removed = " (the unfinished runs' files are removed)"
        report(
            f"{path}: no run of the settings it records finished ({', '.join(changed)}); it takes this "
            f"command's{removed}"
        )
    os.makedirs(output_dir, exist_ok=True)
    write_json(path, plan)
