"""``make lint``'s type check (.ci/typecheck.py): a module with more errors than the baseline's count for it fails
(an unlisted module is allowed none), and so does one with fewer, so that the baseline can only shrink."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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
    new, fewer = _typecheck().judge(LINES, {"pipeline/a.py": 2})
    assert new == ["cli/new.py:7: error: Missing return statement  [return]"] and fewer == []


def test_a_listed_module_that_gains_an_error_fails_with_its_lines():
    new, fewer = _typecheck().judge(LINES, {"pipeline/a.py": 1, "cli/new.py": 1})
    assert new == [
        "pipeline/a.py:3: error: Incompatible types in assignment  [assignment]",
        'pipeline/a.py:9:5: error: "object" has no attribute "close"  [attr-defined]',
    ]
    assert fewer == []


def test_a_module_with_fewer_errors_than_its_count_must_lower_it():
    new, fewer = _typecheck().judge(LINES, {"pipeline/a.py": 3, "cli/b.py": 1, "cli/new.py": 1})
    assert new == [] and fewer == ["cli/b.py: 0", "pipeline/a.py: 2"]  # a note is not an error


def test_the_baseline_names_existing_modules_once_with_their_counts(tmp_path):
    typecheck = _typecheck()
    baseline = typecheck.read_baseline()
    assert baseline and all((REPO / entry).is_file() for entry in baseline)
    assert all(count >= 1 for count in baseline.values())
    listed = tmp_path / "baseline.txt"
    listed.write_text("# comment\npipeline/a.py 4  # why\n\n", encoding="utf-8")
    assert typecheck.read_baseline(listed) == {"pipeline/a.py": 4}
    for bad in ("pipeline/a.py\n", "pipeline/a.py 0\n", "pipeline/a.py 2\npipeline/a.py 1\n", "a.py two\n"):
        listed.write_text(bad, encoding="utf-8")
        with pytest.raises(ValueError, match=r"baseline\.txt:"):
            typecheck.read_baseline(listed)
