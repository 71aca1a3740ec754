"""Type-check ``core/``, ``pipeline/``, ``bert_model/`` and ``cli/`` with mypy (``make lint``), against a baseline
that may only shrink.

The packages install as ``bertprep.core``, ``bertprep.pipeline``, ``bertprep.bert_model`` and ``bertprep.cli`` from
folders of other names (setup.cfg ``package_dir``), which mypy cannot follow through the editable install's import
hook; so this script links the four folders under ``.mypy_cache/src/bertprep/`` and checks the package ``bertprep``
there (settings: setup.cfg ``[mypy]``). One mypy run reports every module's errors, and the script judges them:

* an error in a module that is not in ``.ci/mypy-baseline.txt`` fails: new and changed modules are checked;
* a module of the baseline without errors fails too, naming it: take it off the list (the list only shrinks);
* a module of the baseline with errors is passed over (those are the errors the project had when the checker
  came in; fixing one module's errors and taking it off the list is how the baseline shrinks).

Usage: ``python .ci/typecheck.py`` (exit status 1 on a finding), ``python .ci/typecheck.py --list`` prints the
modules with errors today, one a line, in the baseline's format.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).with_name("mypy-baseline.txt")
PACKAGES = ("core", "pipeline", "bert_model", "cli")
_ERROR = re.compile(r"^bertprep/(?P<path>[^:]+\.py):\d+(?::\d+)?: error: ")


def read_baseline(path: Path = BASELINE) -> set[str]:
    """The repository-relative paths the baseline lists (``#`` starts a comment)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line}


def link_sources(tree: Path) -> None:
    """``tree/bertprep/<package>`` -> this repository's folder of each package, as the installed names."""
    root = tree / "bertprep"
    root.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        link = root / package
        if link.is_symlink() and link.resolve() == REPO / package:
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(REPO / package, target_is_directory=True)


def run_mypy(tree: Path) -> list[str]:
    """mypy's output lines for the package ``bertprep`` under ``tree``; RuntimeError when mypy itself fails."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "setup.cfg"), "-p", "bertprep"]
    env = {**os.environ, "MYPY_CACHE_DIR": str(REPO / ".mypy_cache")}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 2: a crash or a configuration error, not type errors
        raise RuntimeError(f"mypy failed (status {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout.splitlines()


def judge(lines: list[str], baseline: set[str]) -> tuple[list[str], list[str]]:
    """``(new, clean)``: the error lines of modules outside ``baseline`` (paths as in the repository), and the
    baseline's modules with no error (to take off the list)."""
    failing: set[str] = set()
    new = []
    for line in lines:
        match = _ERROR.match(line)
        if not match:
            continue
        failing.add(match["path"])
        if match["path"] not in baseline:
            new.append(line.removeprefix("bertprep/"))
    return new, sorted(baseline - failing)


def main(argv: list[str]) -> int:
    tree = REPO / ".mypy_cache" / "src"
    link_sources(tree)
    lines = run_mypy(tree)
    if "--list" in argv:
        print("\n".join(sorted({m["path"] for m in map(_ERROR.match, lines) if m})))
        return 0
    new, clean = judge(lines, read_baseline())
    for line in new:
        print(line)
    if new:
        print(f"typecheck: {len(new)} mypy errors in modules outside {BASELINE.relative_to(REPO)}; fix them")
    if clean:
        print(f"typecheck: no mypy errors left in {', '.join(clean)}: take them off {BASELINE.relative_to(REPO)}")
    return 1 if new or clean else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
