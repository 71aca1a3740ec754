"""The documentation site builds with ``mkdocs build --strict`` (mkdocs, mkdocs-material and mkdocs-click are
in the ``dev`` extra): no broken link or anchor, every page in the nav, the CLI reference generated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    "build-vocab",
    "make-shards",
    "inspect",
    "train",
    "finetune",
    "export",
    "predict",
    "fill-mask",
    "extract-features",
)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with mkdocs --strict: no broken link, no missing page, the CLI reference generated."""
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    cli_page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for command in COMMANDS:
        assert f'id="bertprep-{command}"' in cli_page, f"the CLI reference lacks bertprep {command}"
    # The benchmark result pages are served from benchmarks/, with their figure.
    assert (site / "benchmarks" / "pretraining_cpu_study" / "index.html").exists()
    assert (site / "benchmarks" / "pretraining_cpu_curves.png").exists()
