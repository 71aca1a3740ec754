"""The hyperparameter grid of an evaluation: which fine-tuning settings each task is run with.

A grid is a TOML file (read with the standard library's ``tomllib``): top-level keys give every task's
settings, a ``[tasks.NAME]`` table replaces some of them for one task. A value is a number or a list of
numbers; a list is swept (every combination is one run per seed). The keys are the fine-tuning settings of
``bertprep finetune`` (``GRID_KEYS``). Three grids ship in ``grids/``: ``bert`` (the default: batch 32,
3 epochs, learning rate in {5e-5, 4e-5, 3e-5, 2e-5}, as BERT section 4.1), ``roberta`` and ``modernbert``.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from typing import Any

import tomllib

#: Settings a grid may give, in the order run folders name them, with their short names in those names.
GRID_KEYS: dict[str, str] = {
    "learning_rate": "lr",
    "batch_size": "bs",
    "num_train_epochs": "ep",
    "warmup_proportion": "wu",
    "weight_decay": "wd",
    "adam_epsilon": "eps",
    "adam_beta1": "b1",
    "adam_beta2": "b2",
    "max_grad_norm": "clip",
    "max_seq_length": "len",
}
_INTEGER_KEYS = ("batch_size", "max_seq_length")
#: Keys that may be 0, and their range [low, high) (None: unbounded); every other key must be positive.
_RANGES: dict[str, tuple[float, float | None]] = {
    "weight_decay": (0.0, None),
    "max_grad_norm": (0.0, None),
    "warmup_proportion": (0.0, 1.0),
    "adam_beta1": (0.0, 1.0),
    "adam_beta2": (0.0, 1.0),
}
#: The grids shipped with bertprep (``--grid NAME``).
GRID_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grids")
SHIPPED_GRIDS = ("bert", "roberta", "modernbert")
#: Task names a ``[tasks.NAME]`` table may use: the GLUE tasks and the SQuAD versions.
GRID_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "squad-v1.1", "squad-v2.0")


@dataclass
class Grid:
    """Settings per key (a list: swept) for every task, and per-task replacements."""

    settings: dict[str, list[float | int]]
    tasks: dict[str, dict[str, list[float | int]]] = field(default_factory=dict)
    source: str = ""
    """The file it was read from (for messages and the record)."""

    def task_settings(self, task: str) -> dict[str, list[float | int]]:
        """The settings of ``task``: the top-level ones with the task's table applied, in ``GRID_KEYS`` order."""
        merged = {**self.settings, **self.tasks.get(task, {})}
        return {k: merged[k] for k in GRID_KEYS if k in merged}

    def points(self, task: str) -> list[dict[str, float | int]]:
        """Every combination of ``task``'s settings (the first key varies slowest), each a dict key -> value."""
        settings = self.task_settings(task)
        return [dict(zip(settings, values, strict=True)) for values in itertools.product(*settings.values())]

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "tasks": self.tasks}


def setting_slug(setting: dict[str, float | int], seed: int) -> str:
    """A run folder's name: ``lr5e-05-bs32-ep3-seed12345`` (the settings in ``GRID_KEYS`` order, then the seed)."""
    parts = [f"{GRID_KEYS[k]}{setting[k]:g}" for k in GRID_KEYS if k in setting]
    return "-".join([*parts, f"seed{seed}"])


def _values(key: str, value: Any, where: str) -> list[float | int]:
    """A grid value as a non-empty list of numbers (a scalar becomes a one-element list)."""
    values = value if isinstance(value, list) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        raise ValueError(f"{where}: {key} must be a number or a list of numbers, got {value!r}")
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"{where}: {key} must be a finite number, got {value!r}")
    if key in _INTEGER_KEYS and any(not float(v).is_integer() for v in values):
        raise ValueError(f"{where}: {key} must be whole numbers, got {value!r}")
    low, high = _RANGES.get(key, (None, None))
    if low is None and any(v <= 0 for v in values):
        raise ValueError(f"{where}: {key} must be positive, got {value!r}")
    if low is not None and any(not low <= v < (high or math.inf) for v in values):
        raise ValueError(
            f"{where}: {key} must be in [{low:g}, {'inf' if high is None else f'{high:g}'}), got {value!r}"
        )
    return [int(v) if key in _INTEGER_KEYS else v for v in values]


def _table(values: dict[str, Any], where: str) -> dict[str, list[float | int]]:
    unknown = [k for k in values if k not in GRID_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; a grid sets {', '.join(GRID_KEYS)}")
    return {k: _values(k, v, where) for k, v in values.items()}


def parse_grid(values: dict[str, Any], source: str) -> Grid:
    """A ``Grid`` from parsed TOML. Raises ``ValueError`` naming ``source`` and the first unknown key, unknown
    task or value that is not a number."""
    values = dict(values)
    tasks = values.pop("tasks", {})
    if not isinstance(tasks, dict):
        raise ValueError(f"{source}: 'tasks' must be a table of [tasks.NAME] tables")
    unknown_tasks = [t for t in tasks if t not in GRID_TASKS]
    if unknown_tasks:
        raise ValueError(f"{source}: unknown task [tasks.{unknown_tasks[0]}]; tasks are {', '.join(GRID_TASKS)}")
    settings = _table(values, source)
    per_task = {}
    for task, table in tasks.items():
        if not isinstance(table, dict):
            raise ValueError(f"{source}: tasks.{task} must be a table")
        per_task[task] = _table(table, f"{source} [tasks.{task}]")
    return Grid(settings, per_task, source)


def load_grid(name_or_path: str, overrides: dict[str, Any] | None = None) -> Grid:
    """The grid of a shipped name (``SHIPPED_GRIDS``) or a TOML file, with ``overrides`` (key -> value or list)
    replacing keys for every task (their per-task values too).

    Raises:
        FileNotFoundError: no such file or shipped grid.
        ValueError: the file is not TOML, or has an unknown key (the message names the key and the file).
    """
    path = os.path.join(GRID_DIR, f"{name_or_path}.toml") if name_or_path in SHIPPED_GRIDS else name_or_path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"grid {name_or_path}: no such file (or a shipped grid: {', '.join(SHIPPED_GRIDS)})")
    with open(path, "rb") as f:
        try:
            values = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: not a TOML file ({err})") from None
    grid = parse_grid(values, path)
    if overrides:
        replaced = _table(overrides, "--set")
        grid.settings.update(replaced)
        for table in grid.tasks.values():
            for key in replaced:
                table.pop(key, None)
    return grid
