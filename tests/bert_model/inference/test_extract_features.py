"""bertprep extract-features: activations equal transformers' output_hidden_states, pooling, streaming, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.inference.features import FeatureConfig, extract_features, feature_settings, read_features
from bertprep.cli.main import cli
from conftest import need_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LINES = [
    "Who was Jim Henson?",
    "Jim Henson was a puppeteer ||| He created the Muppets.",
    "",
    "Unaffordable naïveté, isn't it?",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
]


@pytest.fixture(scope="module")
def lines_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("features") / "lines.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def _run(minilm_dir, lines_file, out: Path, **kwargs) -> pa.Table:
    extract_features(FeatureConfig(str(minilm_dir), str(lines_file), str(out), progress=False, **kwargs))
    return read_features(str(out))


@pytest.mark.slow
def test_layers_equal_transformers_output_hidden_states(tmp_path, minilm_dir, lines_file):
    transformers = need_module("transformers")
    table = _run(minilm_dir, lines_file, tmp_path / "f.arrow", layers=(0, -1, -2, -3, -4), batch_size=2)
    rows = table.to_pylist()
    assert [r["line"] for r in rows] == [0, 1, 3, 4]  # the blank line is skipped, numbers kept
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    hf = transformers.BertModel.from_pretrained(minilm_dir).eval()
    for r in rows:
        text = LINES[r["line"]]
        args = [s.strip() for s in text.split("|||")] if "|||" in text else [text]
        enc = tok(*args, return_tensors="pt")
        assert r["tokens"] == tok.convert_ids_to_tokens(enc["input_ids"][0])
        assert r["token_type_ids"] == enc["token_type_ids"][0].tolist()
        with torch.no_grad():
            states = hf(**enc, output_hidden_states=True).hidden_states  # 7 = embeddings + 6 layers
        for layer in (0, -1, -2, -3, -4):
            ours = np.asarray(r[f"layer_{layer}"], dtype=np.float32)
            assert ours.shape == (len(r["tokens"]), 384)
            np.testing.assert_allclose(ours, states[layer][0].numpy(), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_offsets_point_into_each_segment_and_pooling_agrees_with_the_pieces(tmp_path, minilm_dir, lines_file):
    pieces = _run(minilm_dir, lines_file, tmp_path / "p.arrow", layers=(-1,)).to_pylist()
    pair = pieces[1]
    text_a, text_b = (s.strip() for s in LINES[1].split("|||"))
    for token, (start, end), segment in zip(pair["tokens"], pair["offsets"], pair["token_type_ids"], strict=True):
        if token in ("[CLS]", "[SEP]"):
            assert (start, end) == (-1, -1)
        else:
            assert (text_b if segment else text_a)[start:end].lower() == token.removeprefix("##")
    first = _run(minilm_dir, lines_file, tmp_path / "w.arrow", layers=(-1,), pooling="first-piece").to_pylist()
    mean = _run(minilm_dir, lines_file, tmp_path / "m.arrow", layers=(-1,), pooling="mean-word").to_pylist()
    cls = _run(minilm_dir, lines_file, tmp_path / "c.arrow", layers=(-1,), pooling="cls").to_pylist()
    sent = _run(minilm_dir, lines_file, tmp_path / "s.arrow", layers=(-1,), pooling="mean-sentence").to_pylist()
    row = 2  # "Unaffordable naïveté, isn't it?": una ##ff ##ord ##able | naive ##te | , | isn | ' | t | it | ?
    assert first[row]["words"] == ["Unaffordable", "naïveté", ",", "isn", "'", "t", "it", "?"]
    assert first[row]["word_offsets"][1] == [13, 20]
    vectors = np.asarray(pieces[row]["layer_-1"])
    np.testing.assert_allclose(first[row]["layer_-1"][0], vectors[1], atol=1e-6)
    np.testing.assert_allclose(mean[row]["layer_-1"][0], vectors[1:5].mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(mean[row]["layer_-1"][1], vectors[5:7].mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(cls[row]["layer_-1"], vectors[0], atol=1e-6)
    np.testing.assert_allclose(sent[row]["layer_-1"], vectors.mean(axis=0), atol=1e-6)
    assert first[1]["word_type_ids"] == [0] * 5 + [1] * 5  # Jim Henson was a puppeteer | He created the Muppets .


@pytest.mark.slow
def test_streams_in_record_batches_and_records_its_settings(tmp_path, minilm_dir, lines_file):
    out = tmp_path / "f.arrow"
    _run(minilm_dir, lines_file, out, layers=(-1, -2), batch_size=1, dtype="float16", max_seq_length=8)
    with pa.memory_map(str(out)) as source:
        reader = pa.ipc.open_file(source)
        assert reader.num_record_batches == 4  # one per non-empty line at batch_size 1
        assert reader.schema.field("layer_-2").type == pa.list_(pa.list_(pa.float16(), 384))
    table = read_features(str(out))
    assert max(len(t) for t in table.column("tokens").to_pylist()) == 8  # cut to max_seq_length
    settings = feature_settings(str(out))
    assert settings["layers"] == [-1, -2] and settings["layer_indices"] == [6, 5] and settings["hidden_size"] == 384


@pytest.mark.slow
def test_errors_leave_no_output(tmp_path, minilm_dir, lines_file):
    runner = CliRunner()
    out = tmp_path / "f.arrow"
    base = [
        "extract-features",
        "--model",
        str(minilm_dir),
        "--input",
        str(lines_file),
        "--output",
        str(out),
        "--no-progress",
    ]
    result = runner.invoke(cli, [*base, "--layers", "-1,9"])
    assert result.exit_code != 0 and "layer 9 does not exist" in result.output and not out.exists()
    result = runner.invoke(cli, [*base, "--layers", "last"])
    assert result.exit_code != 0 and "comma-separated integers" in result.output
    result = runner.invoke(cli, [*base, "--layers", "-1", "--pooling", "cls"])
    assert result.exit_code == 0, result.output
    assert "4 lines" in result.output and out.exists()
    again = runner.invoke(cli, [*base, "--layers", "-1"])
    assert again.exit_code != 0 and "--overwrite" in again.output
    assert list(tmp_path.iterdir()) == [out]  # no temporary files left behind
