"""The make-shards and inspect commands through click's CliRunner: options, pass-through to Beam, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from conftest import FIXTURES
from pipeline_factory import make_shards

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _make(out: Path, *extra: str):
    return make_shards(out, *extra, num_shards=3)


def test_make_shards_then_inspect(tmp_path):
    out = tmp_path / "shards"
    result = _make(out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["shards"]) == 3
    assert f"Wrote {manifest['statistics']['instances']:,} instances in 3 shards" in result.output

    shown = _run(["inspect", str(out), "-n", "2"])
    assert shown.exit_code == 0, shown.output
    assert "NotNext" in shown.output and "[MASK]" in shown.output
    examples = [line for line in shown.output.splitlines() if line.startswith("#")]
    assert len(examples) == 2
    for line in examples:
        assert line.count("[SEP]") >= 2 and "[CLS]" in line
        assert line.rstrip().endswith("tokens)") and ("(IsNext" in line or "(NotNext" in line)
        assert "→" in line  # masked positions are shown with their labels


def test_summary_and_inspect_show_numbers_formatted_and_dynamic_masking_said(tmp_path):
    """Figures rounded for reading (no 'mean length 83.782089', no 'bucket_size=None'); dynamic shards, which
    hold no masks, say they are masked at training time instead of 'masked/token 0.0, n/a'."""
    static = _make(tmp_path / "static")
    assert re.search(r"masked/token 0\.\d{3}, \[MASK\]/random/kept \d+\.\d%/", static.output), static.output
    shown = _run(["inspect", str(tmp_path / "static"), "-n", "0"]).output
    assert re.search(r"\(mean length \d+\.\d\),", shown) and "=None" not in shown and "bucket_tokens=" in shown
    assert re.search(r"masked positions  [\d,]+ \(0\.\d{3} per token, \d+\.\d per instance\)", shown), shown
    dynamic = _make(tmp_path / "dynamic", "--masking", "dynamic")
    assert "masked at training time (--masking dynamic)" in dynamic.output and "n/a" not in dynamic.output
    shown = _run(["inspect", str(tmp_path / "dynamic"), "-n", "0"]).output
    assert "masked positions  masked at training time (--masking dynamic, masked_lm_prob 0.15)" in shown


def test_options_and_pass_through_reach_the_manifest(tmp_path):
    out = tmp_path / "shards"
    result = _make(out, "--do-whole-word-mask", "--random-seed", "7", "--pairing-scope", "file", "--bucket-size", "5")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert config["do_whole_word_mask"] is True and config["random_seed"] == 7
    assert config["pairing_scope"] == "file" and config["bucket_size"] == 5


def test_help_explains_every_option():
    result = _run(["make-shards", "--help"])
    assert result.exit_code == 0
    for option in (
        "--input",
        "--vocab",
        "--output-dir",
        "--do-lower-case",
        "--max-seq-length",
        "--max-predictions-per-seq",
        "--masked-lm-prob",
        "--short-seq-prob",
        "--dupe-factor",
        "--random-seed",
        "--do-whole-word-mask",
        "--input-format",
        "--pairing-scope",
        "--bucket-size",
        "--num-shards",
        "--masking",
        "--overwrite",
    ):
        assert option in result.output
    assert "DataflowRunner" in result.output
    assert "%%" not in result.output and "80%, random 10%, kept 10%" in " ".join(result.output.split())


def test_max_predictions_must_be_below_max_seq_length(tmp_path):
    result = _run(
        [
            "make-shards",
            "-i",
            f"{FIXTURES}/a.txt",
            "--vocab",
            VOCAB,
            "-o",
            str(tmp_path / "o"),
            "--max-seq-length",
            "32",
            "--max-predictions-per-seq",
            "32",
        ]
    )
    assert result.exit_code == 2
    assert "max_predictions_per_seq (32) must be smaller than max_seq_length (32)" in result.output
    assert not (tmp_path / "o").exists()


def test_glob_matching_nothing_is_a_clear_error(tmp_path):
    result = _run(
        [
            "make-shards",
            "-i",
            str(tmp_path / "nothing-*.txt"),
            "--vocab",
            VOCAB,
            "-o",
            str(tmp_path / "o"),
            *BEAM_IN_PROCESS,
        ]
    )
    assert result.exit_code == 1
    assert "nothing-*.txt" in result.output and "Error" in result.output


def test_missing_vocab_is_a_clear_error(tmp_path):
    result = _run(
        ["make-shards", "-i", f"{FIXTURES}/a.txt", "--vocab", str(tmp_path / "nope.txt"), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "nope.txt: vocab file not found" in result.output


@pytest.mark.slow
def test_existing_output_is_refused(tmp_path):
    out = tmp_path / "shards"
    assert _make(out).exit_code == 0
    again = _make(out)
    assert again.exit_code == 1 and "already holds shards" in again.output and "--overwrite" in again.output
    assert _make(out, "--overwrite").exit_code == 0


def test_casing_mismatch_is_warned(tmp_path):
    result = _make(tmp_path / "shards", "--no-do-lower-case")
    assert result.exit_code == 0
    assert "uncased vocab" in result.output and "--do-lower-case" in result.output


def test_casing_contradicting_a_tokenizer_json_is_refused(tmp_path):
    from bertprep.core.vocab_files import read_vocab_file, tokenizer_files

    tokenizer_json = tmp_path / "tokenizer.json"  # records lowercase=True, as build-vocab's default writes it
    tokenizer_json.write_text(tokenizer_files(read_vocab_file(VOCAB), do_lower_case=True)["tokenizer.json"])
    result = _run(
        [
            "make-shards",
            "-i",
            f"{FIXTURES}/a.txt",
            "--vocab",
            str(tokenizer_json),
            "-o",
            str(tmp_path / "shards"),
            "--no-do-lower-case",
            "-q",
            *BEAM_IN_PROCESS,
        ]
    )
    assert result.exit_code == 2, result.output
    assert "Invalid value for --no-do-lower-case: " in result.output
    assert "built with lowercase=True but --no-do-lower-case was given" in result.output
    assert "pass --do-lower-case (or leave it out)" in result.output
    assert not (tmp_path / "shards").exists()


def test_inspect_refuses_an_unfinished_directory(tmp_path):
    (tmp_path / "shard-00000-of-00001.arrow").write_bytes(b"")
    result = _run(["inspect", str(tmp_path)])
    assert result.exit_code == 1 and "no manifest.json" in result.output


def test_verify_passes_on_good_shards_and_catches_broken_ones(tmp_path):
    import hashlib

    import pyarrow as pa

    out = tmp_path / "shards"
    assert _make(out).exit_code == 0
    good = _run(["inspect", str(out), "-n", "0", "--no-stats", "--verify"])
    assert good.exit_code == 0 and "verified:" in good.output

    manifest = json.loads((out / "manifest.json").read_text())
    first = out / manifest["shards"][0]["file"]
    table = pa.ipc.open_file(pa.memory_map(str(first))).read_all()
    rows = table.to_pylist()
    rows[0]["input_ids"][0] = 7  # no longer [CLS]
    rows[1]["token_type_ids"] = [0] * len(rows[1]["token_type_ids"])  # B typed as A
    with pa.OSFile(str(first), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=table.schema))
    bad = _run(["inspect", str(out), "-n", "0", "--no-stats", "--verify"])
    assert bad.exit_code == 1
    assert "sha256 differs" in bad.output
    assert "rows not starting with [CLS]" in bad.output
    assert "token_type_ids do not switch to 1" in bad.output
    manifest["shards"][0]["sha256"] = hashlib.sha256(first.read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))
    again = _run(["inspect", str(out), "-n", "0", "--no-stats", "--verify"])
    assert again.exit_code == 1 and "sha256 differs" not in again.output and "[CLS]" in again.output


@pytest.mark.parametrize(
    "command, module, extra",
    [("train", "torch", "train"), ("finetune", "seqeval", "finetune"), ("predict", "sklearn", "finetune")],
)
def test_missing_optional_package_names_the_extra_to_install(monkeypatch, command, module, extra):
    import importlib

    from click.testing import CliRunner

    from bertprep.cli import main as cli_main

    real_import = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name.startswith(f"bertprep.cli.{command.replace('-', '_')}"):
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(cli_main.importlib, "import_module", fake_import)
    result = CliRunner().invoke(cli_main.cli, [command, "--help"])
    assert result.exit_code != 0
    assert f"'{command}' needs the package '{module}'" in result.output
    assert f"pip install 'bertprep[{extra}]'" in result.output


def test_defaults_and_choices_come_from_the_library():
    """make-shards and build-vocab show the dataclasses' defaults and the library's choice lists."""
    import dataclasses

    from bertprep.cli.build_vocab import build_vocab
    from bertprep.cli.make_shards import make_shards
    from bertprep.pipeline.config import (
        MASKING_MODES,
        PAIRING_SCOPES,
        SAMPLING_MODES,
        InstanceConfig,
        ReadOptions,
        ShardsConfig,
    )
    from bertprep.pipeline.masking.config import MaskingConfig
    from bertprep.pipeline.readers import INPUT_FORMATS
    from bertprep.pipeline.text.vocab import VocabConfig

    commands = (
        (make_shards, (InstanceConfig, MaskingConfig, ShardsConfig), 16),
        (build_vocab, (VocabConfig, ReadOptions), 9),
    )
    for command, classes, expected in commands:
        params = {p.name: p for p in command.params}
        fields = {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        # (options with no value default: None means "decided at run time", e.g. --do-lower-case from the
        # vocab; plain flags such as --overwrite have click's unset marker)
        shared = sorted(n for n in params if n in fields and isinstance(params[n].default, (int, float, str)))
        assert len(shared) >= expected, shared
        for name in shared:
            assert params[name].default == fields[name].default, name
    params = {p.name: p for p in make_shards.params}
    assert tuple(params["input_format"].type.choices) == INPUT_FORMATS
    assert tuple(params["pairing_scope"].type.choices) == PAIRING_SCOPES
    assert tuple(params["masking"].type.choices) == MASKING_MODES
    assert tuple(params["sampling"].type.choices) == SAMPLING_MODES
