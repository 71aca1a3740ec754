"""Type-check ``core/``, ``pipeline/``, ``bert_model/`` and ``cli/`` with mypy (``make lint``), against a baseline
that may only shrink.

The packages install as ``bertprep.core``, ``bertprep.pipeline``, ``bertprep.bert_model`` and ``bertprep.cli`` from
folders of other names (setup.cfg ``package_dir``), which mypy cannot follow through the editable install's import
hook; so this script links the four folders under ``.mypy_cache/src/bertprep/`` and checks the package
``bertprep`` there (settings: setup.cfg ``[mypy]``). One mypy run reports every module's errors, and the script
judges them:

* ``.ci/mypy-baseline.txt`` lists ``module count`` lines: the modules with errors the project still has, and how
  many each;
* a module with more errors than its count fails (a module the baseline does not list has a count of 0), with
  its error lines: a listed module cannot gain new errors unnoticed;
* a module with fewer errors than its count fails too, naming its new count: lower it (or take the module off
  the list at 0), so the baseline can only shrink.

Usage: ``python .ci/typecheck.py`` (exit status 1 on a finding), ``python .ci/typecheck.py --list`` prints the
modules with errors today and their counts, one a line, in the baseline's format.
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


def read_baseline(path: Path = BASELINE) -> dict[str, int]:
    """Repository-relative path -> the errors the baseline allows it (``path count`` lines; ``#`` starts a
    comment). Raises ``ValueError`` naming the line for a line of another form or a module listed twice."""
    baseline: dict[str, int] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit() or int(fields[1]) < 1 or fields[0] in baseline:
            raise ValueError(
                f"{path.name}:{number}: expected 'module.py COUNT' (COUNT >= 1, once a module), got {raw!r}"
            )
        baseline[fields[0]] = int(fields[1])
    return baseline


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


def error_counts(lines: list[str]) -> dict[str, int]:
    """Repository-relative path -> its number of mypy errors (notes are not errors)."""
    counts: dict[str, int] = {}
    for match in filter(None, map(_ERROR.match, lines)):
        counts[match["path"]] = counts.get(match["path"], 0) + 1
    return counts


def judge(lines: list[str], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """``(new, fewer)``: the error lines of every module with more errors than ``baseline`` allows it (paths as
    in the repository; an unlisted module is allowed none), and ``module: N`` for each module with fewer errors
    than its count (lower the count to N, or take the module off at 0)."""
    counts = error_counts(lines)
    over = {path for path, count in counts.items() if count > baseline.get(path, 0)}
    new = [line.removeprefix("bertprep/") for line in lines if (m := _ERROR.match(line)) and m["path"] in over]
    fewer = [
        f"{path}: {counts.get(path, 0)}" for path, allowed in sorted(baseline.items()) if counts.get(path, 0) < allowed
    ]
    return new, fewer


def main(argv: list[str]) -> int:
    tree = REPO / ".mypy_cache" / "src"
    link_sources(tree)
    lines = run_mypy(tree)
    if "--list" in argv:
        print("\n".join(f"{path} {count}" for path, count in sorted(error_counts(lines).items())))
        return 0
    new, fewer = judge(lines, read_baseline())
    for line in new:
        print(line)
    if new:
        print(
            f"typecheck: {len(new)} mypy errors in modules over their count in {BASELINE.relative_to(REPO)}; fix them"
        )
    if fewer:
        print(
            f"typecheck: fewer errors than {BASELINE.relative_to(REPO)} allows (lower the count, or take the module "
            f"off at 0): {', '.join(fewer)}"
        )
    return 1 if new or fewer else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
