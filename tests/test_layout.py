"""The code's layout: no library function so long that it hides its own order of events, and no import that runs
against the floors.

Every function and method under ``core/``, ``pipeline/``, ``bert_model/`` and ``cli/`` is at most
:data:`MAX_FUNCTION_LINES` lines long, docstring and decorators' ``def`` line included (``ast``'s
``end_lineno - lineno + 1``), and every module at most :data:`MAX_MODULE_LINES`. A longer one is split into
named helpers that read like the steps of its algorithm; those longer when the limits came down are listed in
``tests/layout-debt.txt`` with their length, a list that may only shrink.

Every import between sub-packages is one that the table "Allowed imports" of ``docs/architecture.md`` lists,
whether it stands at the top of a file, inside a function or under ``TYPE_CHECKING``; and no files import each
other in a loop (directly or through others), for an import hidden in a function is an import all the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO_ROOT

#: The longest a function may be, in lines.
MAX_FUNCTION_LINES = 60
#: The longest a module may be, in lines.
MAX_MODULE_LINES = 700
#: Functions and modules longer than the limits when the limits came down to these numbers (``path::function``
#: or ``path`` -> its length then). The list may only shrink: one that grows fails, and one that is split below
#: the limit (or renamed, or gone) fails until it is taken off, as the type checker's baseline does.
LAYOUT_DEBT = REPO_ROOT / "tests" / "layout-debt.txt"
LIBRARY_FOLDERS = ("core", "pipeline", "bert_model", "cli")
#: The page whose table of allowed imports the library follows, and the heading of that table.
ARCHITECTURE_PAGE = REPO_ROOT / "docs" / "architecture.md"
ALLOWED_IMPORTS_HEADING = "## Allowed imports"
PACKAGE = "bertprep"


def long_parts(root: Path = REPO_ROOT) -> dict[str, int]:
    """Every function (``path::qualified.name``) over :data:`MAX_FUNCTION_LINES` and every module (``path``) over
    :data:`MAX_MODULE_LINES` of the library folders under ``root`` -> its length in lines (a function's
    docstring and ``def`` line included: ``ast``'s ``end_lineno - lineno + 1``)."""
    found: dict[str, int] = {}
    for folder in LIBRARY_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            name = path.relative_to(root).as_posix()
            if len(text.splitlines()) > MAX_MODULE_LINES:
                found[name] = len(text.splitlines())
            found.update(_long_functions(ast.parse(text, filename=str(path)), f"{name}::"))
    return found


def _long_functions(node: ast.AST, prefix: str) -> dict[str, int]:
    """``prefix + qualified name`` -> length of each function under ``node`` over :data:`MAX_FUNCTION_LINES`."""
    found = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            length = child.end_lineno - child.lineno + 1
            if not isinstance(child, ast.ClassDef) and length > MAX_FUNCTION_LINES:
                found[f"{prefix}{child.name}"] = length
            found.update(_long_functions(child, f"{prefix}{child.name}."))
    return found


def read_layout_debt(path: Path = LAYOUT_DEBT) -> dict[str, int]:
    """The debt file's ``part length`` lines (``#`` starts a comment)."""
    debt = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            part, length = line.rsplit(maxsplit=1)
            debt[part] = int(length)
    return debt


def layout_findings(found: dict[str, int], debt: dict[str, int]) -> list[str]:
    """What the layout check reports: parts over the limits that the debt does not allow (new, or grown), and
    debt entries that are paid (shorter than their entry: lower it; within the limits or gone: take it off)."""
    findings = [
        f"{part}: {length} lines (limit {MAX_MODULE_LINES if '::' not in part else MAX_FUNCTION_LINES}"
        + (f", {debt[part]} allowed by the debt list" if part in debt else "")
        + "): split it into named steps"
        for part, length in sorted(found.items())
        if length > debt.get(part, 0)
    ]
    findings += [
        f"{part}: {found[part]} lines now, the debt list says {allowed}: lower its entry"
        if part in found
        else f"{part}: within the limits now (or gone): take it off {LAYOUT_DEBT.name}"
        for part, allowed in sorted(debt.items())
        if found.get(part, 0) < allowed
    ]
    return findings


def test_library_folders_hold_python_files():
    for folder in LIBRARY_FOLDERS:
        assert any((REPO_ROOT / folder).rglob("*.py")), f"{folder}/ has no Python file: the layout test reads nothing"


#: The storage layer's modules: the only ones that decide what is a remote path (``storage.is_remote``, in
#: ``core/urls.py``); no other tests for ``://``.
STORAGE_LAYER = ("core/storage.py", "core/urls.py")
_URL_TEST = re.compile(r"""["']://["']\s+(?:not\s+)?in\b""")


def url_tests_outside_the_layer(root: Path) -> list[str]:
    """``file:line`` of every ``"://" in`` / ``"://" not in`` test of the library folders under ``root`` but in
    :data:`STORAGE_LAYER`'s: each is a rule of its own of what is remote (``file://`` local or not)."""
    found = []
    for folder in LIBRARY_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if path.relative_to(root).as_posix() in STORAGE_LAYER:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if _URL_TEST.search(line):
                    found.append(f"{path.relative_to(root)}:{number}")
    return found


def test_no_remote_path_rule_outside_the_storage_layer():
    found = url_tests_outside_the_layer(REPO_ROOT)
    assert not found, 'tests of "://" outside the storage layer (call core.storage.is_remote):\n' + "\n".join(found)


def test_the_remote_path_rule_check_sees_both_quotes(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "storage.py").write_text('remote = "://" in path\n')
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "x.py").write_text("a = '://' in p\nb = \"://\" not in q\nc = p.split('://')\n")
    assert url_tests_outside_the_layer(tmp_path) == ["pipeline/x.py:1", "pipeline/x.py:2"]


def test_no_library_function_or_module_over_the_limits():
    findings = layout_findings(long_parts(), read_layout_debt())
    assert not findings, f"functions over {MAX_FUNCTION_LINES} lines, modules over {MAX_MODULE_LINES}:\n" + "\n".join(
        findings
    )


def test_the_layout_check_finds_new_grown_and_paid_parts(tmp_path):
    (tmp_path / "pipeline").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "pipeline" / "m.py").write_text(
        f"def long():\n{body}\n\nclass C:\n    def short(self):\n        pass\n"
    )
    for folder in LIBRARY_FOLDERS[1:]:
        (tmp_path / folder).mkdir(exist_ok=True)
    found = long_parts(tmp_path)
    assert found == {"pipeline/m.py::long": MAX_FUNCTION_LINES + 1}
    assert layout_findings(found, {"pipeline/m.py::long": MAX_FUNCTION_LINES + 1}) == []
    assert "split it" in layout_findings(found, {})[0]
    assert "split it" in layout_findings(found, {"pipeline/m.py::long": MAX_FUNCTION_LINES})[0]
    assert "lower its entry" in layout_findings(found, {"pipeline/m.py::long": MAX_FUNCTION_LINES + 5})[0]
    assert "take it off" in layout_findings({}, {"pipeline/m.py::long": 70})[0]


# ------------------------------------------------------------------------------------------- import floors


def library_modules(root: Path) -> dict[str, Path]:
    """``bertprep.<hall>.<...>`` -> file, for every module of the library folders under ``root``."""
    modules = {}
    for hall in LIBRARY_FOLDERS:
        for path in sorted((root / hall).rglob("*.py")):
            parts = [p for p in path.relative_to(root / hall).with_suffix("").parts if p != "__init__"]
            modules[".".join([PACKAGE, hall, *parts])] = path
    return modules


def unit_of(module: str, modules: dict[str, Path]) -> str:
    """The row of the table a module belongs to: ``hall/sub`` for a sub-package's modules, ``hall`` for the
    modules at a hall's top (``pipeline/config.py``, ``pipeline/__init__.py``)."""
    parts = module.split(".")[1:]
    in_package = modules[module].name == "__init__.py"
    return "/".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and in_package) else parts[0]


def imported_modules(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """``(line, module)`` of every library module ``path`` imports: at its top, in functions, under
    ``TYPE_CHECKING``; ``from package import name`` counts as the submodule ``name`` where there is one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # ``import bertprep.pipeline.x.y`` of a name inside a module
                name = name.rpartition(".")[0]
            if name and name != module and (node.lineno, name) not in found:
                found.append((node.lineno, name))
    return found


def allowed_imports(page: Path) -> dict[str, set[str]]:
    """The table under :data:`ALLOWED_IMPORTS_HEADING`: sub-package -> the entries it may import."""
    text = page.read_text(encoding="utf-8")
    assert ALLOWED_IMPORTS_HEADING in text, f"{page} has no section {ALLOWED_IMPORTS_HEADING!r}"
    section = text.split(ALLOWED_IMPORTS_HEADING, 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 2 and re.fullmatch(r"`[^`]+`", cells[0]):
            table[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", cells[1]))
    return table


def _is_allowed(target: str, target_unit: str, entries: set[str]) -> bool:
    hall = target_unit.split("/")[0]
    top_module = f"{hall}:{target.split('.')[2]}" if target_unit == hall and len(target.split(".")) > 2 else None
    return target_unit in entries or f"{hall}/*" in entries or (top_module is not None and top_module in entries)


def floor_violations(root: Path, table: dict[str, set[str]]) -> list[str]:
    """Every import from one sub-package into another that ``table`` does not allow, and every sub-package
    the table lacks, as ``file:line`` lines."""
    modules = library_modules(root)
    found = sorted(
        {f"{unit_of(m, modules)}: no row in the table" for m in modules} - {f"{u}: no row in the table" for u in table}
    )
    for module, path in modules.items():
        unit = unit_of(module, modules)
        for line, target in imported_modules(module, path, modules):
            target_unit = unit_of(target, modules)
            if target_unit != unit and not _is_allowed(target, target_unit, table.get(unit, set())):
                found.append(f"{path.relative_to(root)}:{line} imports {target} ({unit} -> {target_unit})")
    return found


def import_loops(root: Path) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected components of more than one
    module, Tarjan's algorithm), every import counted."""
    modules = library_modules(root)
    graph = {m: sorted({t for _, t in imported_modules(m, p, modules)}) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return loops


def test_every_import_follows_the_allowed_floors():
    table = allowed_imports(ARCHITECTURE_PAGE)
    assert {"core", "pipeline", "bert_model/models", "cli"} <= set(table), sorted(table)
    violations = floor_violations(REPO_ROOT, table)
    assert not violations, (
        "imports against the table 'Allowed imports' of docs/architecture.md (move the shared piece to the floor "
        "both use, or add the arrow to the table if it belongs there):\n" + "\n".join(violations)
    )


def test_no_files_import_each_other_in_a_loop():
    loops = import_loops(REPO_ROOT)
    assert not loops, "files that import each other (directly or through others):\n" + "\n".join(map(str, loops))


def test_the_floor_check_sees_hidden_imports_and_loops(tmp_path):
    """The checks above catch what they exist for: an import inside a function or under TYPE_CHECKING against
    the table, a sub-package missing from it, and a loop made of a file-level and a function-level import."""
    files = {
        "pipeline/__init__.py": "",
        "pipeline/config.py": "",
        "pipeline/readers/__init__.py": "from bertprep.pipeline import config\n",
        "pipeline/readers/files.py": "def f():\n    from bertprep.pipeline.text import tok\n",
        "pipeline/text/__init__.py": "",
        "pipeline/text/tok.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bertprep.pipeline.readers.files import f\n"
        ),
        "pipeline/beam/__init__.py": "",
        "bert_model/__init__.py": "",
        "cli/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    table = {"pipeline": set(), "pipeline/readers": {"pipeline"}, "pipeline/text": {"pipeline"}, "bert_model": set()}
    found = floor_violations(tmp_path, table)
    assert "pipeline/readers/files.py:2 imports bertprep.pipeline.text.tok (pipeline/readers -> pipeline/text)" in found
    assert "pipeline/text/tok.py:3 imports bertprep.pipeline.readers.files (pipeline/text -> pipeline/readers)" in found
    assert {"pipeline/beam: no row in the table", "cli: no row in the table"} <= set(found)
    assert not any("readers/__init__.py" in v for v in found)  # pipeline/readers -> pipeline is allowed
    assert import_loops(tmp_path) == [["bertprep.pipeline.readers.files", "bertprep.pipeline.text.tok"]]
    table["pipeline/readers"].add("pipeline/text")
    table["pipeline/text"].add("pipeline/readers")
    assert not [v for v in floor_violations(tmp_path, table) if " imports " in v]  # allowed once listed
