"""Every command in README.md and docs/*.md runs as written: the pages of :data:`docs_factory.SECOND_HALF`
(``test_docs_commands.py`` runs the others; machinery and rules: ``docs_factory.py``). A file of its own so that
pytest-xdist's second worker runs this half while the first runs the other."""

from __future__ import annotations

import pytest

from docs_factory import (
    Block,
    check_block,
    half_blocks,
    page_results,  # noqa: F401 (this half's pages, run once: the module's fixture)
)

pytestmark = pytest.mark.slow
BLOCKS = half_blocks(second=True)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(block: Block, request: pytest.FixtureRequest) -> None:
    check_block(block, request)
