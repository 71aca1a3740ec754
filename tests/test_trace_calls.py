"""benchmarks/trace_calls.py's counting, on two small modules laid out as layers: the files entered in order,
the returns to a file already left, the climbs, and the bodies of modules imported during a pass left out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

LOW = """
def helper():
    return 1

def call_back(function):
    return function()
"""
HIGH = """
import low

def callback():
    return 2

def run():
    import late  # a module body run by an import: left out, with the calls it makes
    return low.helper() + low.call_back(callback)
"""
LATE = """
import low
low.helper()
"""


@pytest.fixture
def trace_calls(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("trace_calls", REPO_ROOT / "benchmarks" / "trace_calls.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for folder, name, text in (("core", "low", LOW), ("cli", "high", HIGH), ("cli", "late", LATE)):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / f"{name}.py").write_text(text, encoding="utf-8")
        monkeypatch.syspath_prepend(str(tmp_path / folder))
    monkeypatch.setattr(module, "REPO", tmp_path.resolve())
    for name in ("low", "high", "late"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return module


def test_entries_returns_and_climbs_of_a_pass(trace_calls):
    import high

    trace = trace_calls.CallTrace()
    assert trace.run(high.run) == 3
    # run (cli) > helper (core) > back in run > call_back (core) > callback (cli: a climb) > call_back > run
    assert trace.entered == [
        "cli/high.py",
        "core/low.py",
        "cli/high.py",
        "core/low.py",
        "cli/high.py",
        "core/low.py",
        "cli/high.py",
    ]
    assert trace.returns() == 5 and len(set(trace.entered)) == 2
    assert dict(trace.climbs) == {("core/low.py", "cli/high.py"): 1}
    assert trace.calls == {"cli/high.py": 2, "core/low.py": 2}  # late.py's body and its call: not counted
