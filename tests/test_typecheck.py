"""``make lint``'s type check (.ci/typecheck.py): errors outside the baseline fail, and so does a baseline module
that has none left, so that the baseline can only shrink."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _typecheck():
    spec = importlib.util.spec_from_file_location("typecheck", REPO / ".ci" / "typecheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINES = [
    "bertprep/pipeline/a.py:3: error: Incompatible types in assignment  [assignment]",
    'bertprep/pipeline/a.py:9:5: error: "object" has no attribute "close"  [attr-defined]',
    "bertprep/cli/b.py:1: note: By default the bodies of untyped functions are not checked",
    "bertprep/cli/new.py:7: error: Missing return statement  [return]",
    "Found 3 errors in 2 files (checked 3 source files)",
]


def test_errors_outside_the_baseline_are_reported_with_repository_paths():
    new, clean = _typecheck().judge(LINES, {"pipeline/a.py"})
    assert new == ["cli/new.py:7: error: Missing return statement  [return]"] and clean == []


def test_a_baseline_module_without_errors_must_leave_the_list():
    new, clean = _typecheck().judge(LINES, {"pipeline/a.py", "cli/b.py", "cli/new.py"})
    assert new == [] and clean == ["cli/b.py"]  # a note is not an error


def test_the_baseline_names_existing_modules_once(tmp_path):
    typecheck = _typecheck()
    text = typecheck.BASELINE.read_text(encoding="utf-8")
    entries = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(entries) == len(set(entries)) == len(typecheck.read_baseline())
    assert all((REPO / entry).is_file() for entry in entries)
    listed = tmp_path / "baseline.txt"
    listed.write_text("# comment\npipeline/a.py  # why\n\n", encoding="utf-8")
    assert typecheck.read_baseline(listed) == {"pipeline/a.py"}
