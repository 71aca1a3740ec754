"""Every JSON bertprep writes is strict JSON: ``core.strict_json`` refuses NaN and Infinity, naming the place,
and the library writes JSON through it only."""

from __future__ import annotations

import ast
import io
import json
import math

import pytest

from bertprep.core import strict_json
from conftest import REPO_ROOT

LIBRARY_FOLDERS = ("core", "pipeline", "bert_model", "cli")


def _strict_load(text: str):
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_finite_values_round_trip_as_strict_json():
    value = {"lr": 5e-5, "runs": [{"metrics": {"accuracy": 0.91}}], "name": "x", "n": 3, "none": None}
    assert _strict_load(strict_json.dumps(value, indent=1)) == value


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, float("1e999")])
def test_non_finite_values_are_refused_naming_their_place(bad):
    value = {"runs": [{"setting": {"learning_rate": 5e-5}}, {"setting": {"learning_rate": bad}}]}
    with pytest.raises(ValueError, match=r"glue\.json: runs\[1\]\.setting\.learning_rate is (inf|-inf|nan)"):
        strict_json.dumps(value, what="glue.json")


def test_a_refused_value_leaves_the_file_untouched():
    f = io.StringIO()
    with pytest.raises(ValueError, match="JSON cannot hold"):
        strict_json.dump({"loss": math.nan}, f)
    assert f.getvalue() == ""


def test_the_library_writes_json_through_strict_json_only():
    """``json.dump`` / ``json.dumps`` write ``Infinity`` and ``NaN`` by default; the library calls them only in
    ``core/strict_json.py``."""
    found = []
    for folder in LIBRARY_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if path == REPO_ROOT / "core" / "strict_json.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                func = getattr(node, "func", None)
                if (
                    isinstance(node, ast.Call)
                    and isinstance(func, ast.Attribute)
                    and func.attr in ("dump", "dumps")
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "json"
                ):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not found, "json.dump(s) outside core/strict_json.py (use strict_json.dump(s)):\n" + "\n".join(found)
