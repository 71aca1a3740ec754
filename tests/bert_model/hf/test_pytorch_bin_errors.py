"""A ``pytorch_model.bin`` cut short, or whose pickle would run code, is one line naming the file (before: a
55-line traceback; ``weights_only`` already kept the code from running)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.hf.interop import read_hf_state_dict
from bertprep.cli.main import cli

_CONFIG = {
    "model_type": "bert",
    "architectures": ["BertForMaskedLM"],
    "vocab_size": 16,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
}


def _model_dir(tmp_path: Path, payload) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(_CONFIG))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijk"]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    torch.save(payload, directory / "pytorch_model.bin")
    return directory


class _RunsCode:
    """Unpickling this would call os.system (torch.load with weights_only=True refuses it)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _one_line(result) -> str:
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_a_truncated_pytorch_model_bin_is_named(tmp_path):
    directory = _model_dir(tmp_path, {"bert.embeddings.word_embeddings.weight": torch.zeros(16, 8)})
    weights = directory / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match="cut short or damaged"):
        read_hf_state_dict(str(directory))
    line = _one_line(CliRunner().invoke(cli, ["export", str(directory), "-o", str(tmp_path / "hf")]))
    assert str(weights) in line and "cut short" in line


def test_a_pytorch_model_bin_whose_pickle_runs_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    directory = _model_dir(tmp_path, {"weight": _RunsCode(marker)})
    line = _one_line(CliRunner().invoke(cli, ["export", str(directory), "-o", str(tmp_path / "hf")]))
    assert str(directory / "pytorch_model.bin") in line and "would run code" in line
    assert not marker.exists()
