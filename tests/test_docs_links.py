"""The links of ``docs/*.md`` work where the Markdown is read in the repository (on GitHub, in an editor), not
only on the site: before, ``benchmarks/pretraining_cpu_study.md`` from ``docs/pretraining.md`` pointed at a
``docs/benchmarks/`` that does not exist. (The site's hook rewrites ``../benchmarks/`` links for mkdocs, whose
build ``tests/test_docs_site.py`` checks.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO_ROOT

#: Inline Markdown links and images: ``[text](target)``, the target without a title.
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _relative_targets(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # (code blocks hold no links)
    targets = [m.group(1) for m in _LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", sorted((REPO_ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_relative_links_of_docs_resolve_in_the_repository(page):
    broken = [t for t in _relative_targets(page) if not (page.parent / t.split("#", 1)[0]).exists()]
    assert not broken, f"{page.name}: links to nothing in the repository: {broken}"


def test_the_site_rewrites_links_into_benchmarks():
    import importlib.util  # (docs/hooks/site.py by path: "site" is the standard library's module)

    spec = importlib.util.spec_from_file_location("bertprep_site_hooks", REPO_ROOT / "docs" / "hooks" / "site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class _File:
        src_uri = "pretraining.md"

    class _Page:
        file = _File()

    text = "see [the study](../benchmarks/pretraining_cpu_study.md)"
    assert module.on_page_markdown(text, _Page(), {}, None) == "see [the study](benchmarks/pretraining_cpu_study.md)"
