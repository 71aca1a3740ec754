"""``--model`` (and ``make-shards --vocab``) take a Hugging Face Hub id, resolved through huggingface_hub's cache
(core/hub.py). The tests lay the cache out themselves (``models--owner--name/refs/main`` and
``snapshots/<commit>/``, as huggingface_hub writes it) and run with ``HF_HUB_OFFLINE=1``: nothing is downloaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core.hub import is_hub_id, resolve_model_dir
from conftest import FIXTURES, need_module
from tokenizer_factory import roberta_tokenizer_dir

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()

REPO = "test-org/tiny-roberta"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A huggingface_hub cache holding ``test-org/tiny-roberta`` (a random RobertaForMaskedLM and its BPE)."""
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    roberta_tokenizer_dir(snapshot)
    vocab_size = transformers.AutoTokenizer.from_pretrained(str(snapshot)).vocab_size
    config = transformers.RobertaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=34,
        type_vocab_size=1,
        pad_token_id=1,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    torch.manual_seed(0)
    transformers.RobertaForMaskedLM(config).save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub_cache


def test_ids_and_paths_are_told_apart(tmp_path):
    assert is_hub_id("roberta-base") and is_hub_id("answerdotai/ModernBERT-base")
    for path in ("./model", "runs/a/b", "gs://b/vocab.txt", "vocab.txt", "tokenizer.json", str(tmp_path)):
        assert not is_hub_id(path)
    (tmp_path / "org").mkdir()
    shutil.copytree(FIXTURES / "pipeline", tmp_path / "org" / "model")
    assert resolve_model_dir(str(tmp_path / "org" / "model")) == str(tmp_path / "org" / "model")  # a path wins


def test_an_id_in_the_cache_is_its_snapshot(offline):
    path = resolve_model_dir(REPO)
    assert path == str(offline / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT)


def test_fill_mask_and_make_shards_take_the_id(offline, tmp_path):
    filled = CliRunner().invoke(cli, ["fill-mask", "--model", REPO, "The man said <mask>.", "--json"])
    assert filled.exit_code == 0, filled.output
    assert '"pieces": ["<s>"' in filled.output
    args = ["make-shards", "-i", str(FIXTURES / "pipeline" / "a.txt"), "--input-format", "bert", "--vocab", REPO]
    args += ["-o", str(tmp_path / "shards"), "--objective", "none", "--max-seq-length", "32", "--dupe-factor", "1"]
    made = CliRunner().invoke(cli, args + ["-q", "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert made.exit_code == 0, made.output
    snapshot = resolve_model_dir(REPO)
    assert (tmp_path / "shards" / "tokenizer.json").read_bytes() == Path(snapshot, "tokenizer.json").read_bytes()


def test_an_id_missing_offline_says_how_to_download_it(offline):
    result = CliRunner().invoke(cli, ["fill-mask", "--model", "test-org/missing", "a <mask>"])
    assert result.exit_code == 2
    assert "not in the Hugging Face cache" in result.output and "hf download test-org/missing" in result.output
    assert "Traceback" not in result.output


def test_a_mistyped_local_path_says_no_such_folder_before_the_hub_hint(hub_cache, tmp_path, monkeypatch):
    """Before: `--model runs/mbtypo` was told to unset HF_HUB_OFFLINE, which was not set. The Hub is a closed
    port on localhost here (nothing leaves the machine)."""
    import socket

    import huggingface_hub.constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["fill-mask", "--model", "runs/mbtypo", "a <mask>"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    text = " ".join(result.output.split())
    assert f"runs/mbtypo: no such local folder ({tmp_path / 'runs' / 'mbtypo'})" in text
    assert "hf download runs/mbtypo" in text and "HF_HUB_OFFLINE" not in text
