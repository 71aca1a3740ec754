"""Shared pytest fixtures.

Tests that need the larger real data (Wikipedia, Gutenberg, Google's vocabs, golden outputs) find it
through one setting: the environment variable ``BERTPREP_DATA`` (default: ``../shared/data`` beside the
repository). They skip, saying why, when it is absent; the rest of the suite is self-contained.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _shared_data_dir() -> Path:
    return Path(os.environ.get("BERTPREP_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Root of the shared real data; skips the test when it is not there."""
    path = _shared_data_dir()
    if not (path / "README.md").exists():
        pytest.skip(f"shared data not found at {path} (set BERTPREP_DATA to the shared/data folder)")
    return path


@pytest.fixture(scope="session")
def uncased_vocab(shared_data: Path) -> Path:
    """Google's bert-base-uncased vocab.txt (30,522 entries)."""
    return shared_data / "vocab" / "bert-base-uncased-vocab.txt"


@pytest.fixture(scope="session")
def cased_vocab(shared_data: Path) -> Path:
    """Google's bert-base-cased vocab.txt (28,996 entries)."""
    return shared_data / "vocab" / "bert-base-cased-vocab.txt"
