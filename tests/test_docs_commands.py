"""Every command in README.md and docs/*.md runs as written, in two halves (machinery and rules:
``docs_factory.py``): this file runs the pages not in :data:`docs_factory.SECOND_HALF`, and checks the extractor
and the skip markers of every page; ``test_docs_commands_second_half.py`` runs the others."""

from __future__ import annotations

import re

import pytest

from docs_factory import (
    ALL_BLOCKS,
    PAGES,
    SECOND_HALF,
    SKIP_MARKER,
    Block,
    check_block,
    half_blocks,
    page_results,  # noqa: F401 (this half's pages, run once: the module's fixture)
)

pytestmark = pytest.mark.slow
BLOCKS = half_blocks(second=False)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(block: Block, request: pytest.FixtureRequest) -> None:
    check_block(block, request)


def test_every_page_has_blocks_found() -> None:
    """The extractor sees the README's quick start (a guard against a fence syntax it does not parse)."""
    readme = [b for b in ALL_BLOCKS if b.page == "README.md"]
    assert any("bertprep train" in b.code and b.skip_reason is None for b in readme)


def test_every_page_is_in_one_half() -> None:
    """The two files together run every page's blocks, each once (a page named in SECOND_HALF must exist)."""
    pages = {b.page for b in ALL_BLOCKS}
    assert set(SECOND_HALF) <= pages, set(SECOND_HALF) - pages
    halves = half_blocks(second=False) + half_blocks(second=True)
    assert sorted(b.id for b in halves) == sorted(b.id for b in ALL_BLOCKS)


def test_skip_markers_are_attached() -> None:
    """Every doc-test marker sits right above a shell block (a marker above nothing would skip nothing)."""
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if "doc-test:" not in line:
                continue
            assert SKIP_MARKER.search(line), f"{page.name}:{number}: malformed marker {line.strip()!r}"
            following = next((x for x in lines[number:] if x.strip()), "")
            assert re.match(r"\s*```+\s*(bash|sh|console)\b", following), (
                f"{page.name}:{number}: a doc-test marker must be the line above a bash/sh/console block"
            )
