"""Every command in README.md and docs/*.md runs as written: the pages of :data:`docs_factory.SECOND_HALF`
(``test_docs_commands.py`` runs the others; machinery and rules: ``docs_factory.py``). A file of its own so that
pytest-xdist's second worker runs this half while the first runs the other."""

from __future__ import annotations

import pytest

from docs_factory import Block, check_block, half_blocks, page_timings, run_half

pytestmark = pytest.mark.slow
BLOCKS = half_blocks(second=True)


@pytest.fixture(scope="module")
def page_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """This half's pages with a selected runnable block, each run once, one at a time."""
    yield run_half(request.session.items, __name__, tmp_path_factory.mktemp("docs"))
    print(f"\ndoc pages: {page_timings()}")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(block: Block, request: pytest.FixtureRequest) -> None:
    check_block(block, request)
