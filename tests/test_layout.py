"""The code's layout: no library function so long that it hides its own order of events.

Every function and method under ``pipeline/``, ``bert_model/`` and ``cli/`` is at most
:data:`MAX_FUNCTION_LINES` lines long, docstring and decorators' ``def`` line included (``ast``'s
``end_lineno - lineno + 1``). A longer one is split into named helpers that read like the steps of its
algorithm.
"""

from __future__ import annotations

import ast

from conftest import REPO_ROOT

#: The longest a function may be, in lines.
MAX_FUNCTION_LINES = 80
LIBRARY_FOLDERS = ("pipeline", "bert_model", "cli")


def _long_functions() -> list[str]:
    found = []
    for folder in LIBRARY_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_library_folders_hold_python_files():
    for folder in LIBRARY_FOLDERS:
        assert any((REPO_ROOT / folder).rglob("*.py")), f"{folder}/ has no Python file: the layout test reads nothing"


def test_no_library_function_over_the_limit():
    long = _long_functions()
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(long)
