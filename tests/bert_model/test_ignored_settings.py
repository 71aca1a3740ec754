"""Settings a run would ignore are refused, each naming the setting and why: wsd's decay settings with another
learning-rate schedule, a compile mode for a model that is not compiled, and SQuAD files of two versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import need_module

need_module("torch")

from bertprep.bert_model.loop_config import OptimConfig  # noqa: E402
from bertprep.bert_model.pretrain.train_config import TrainConfig  # noqa: E402
from bertprep.bert_model.tasks.squad import SquadTask  # noqa: E402
from bertprep.cli.main import cli  # noqa: E402


def _train(**kw) -> TrainConfig:
    return TrainConfig(shards="s", output_dir="o", **kw)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
@pytest.mark.parametrize(("name", "value"), [("decay_fraction", 0.2), ("decay_steps", 100), ("decay_shape", "linear")])
def test_a_wsd_decay_setting_with_another_schedule_is_refused(schedule, name, value):
    with pytest.raises(ValueError, match=rf"{name} {value} applies to lr_schedule wsd only .* {schedule} would ignore"):
        _train(lr_schedule=schedule, **{name: value})
    assert getattr(_train(lr_schedule="wsd", **{name: value}), name) == value  # wsd reads it


def test_the_schedules_defaults_pass_with_every_schedule():
    for schedule in ("linear", "cosine", "constant", "wsd"):
        assert OptimConfig(lr_schedule=schedule).lr_schedule == schedule


@pytest.mark.parametrize("compile_", [False, None])
def test_a_compile_mode_for_a_model_that_is_not_compiled_is_refused(compile_):
    with pytest.raises(ValueError, match=r"compile_mode reduce-overhead applies to a compiled model.*add --compile"):
        _train(compile=compile_, device="cpu", compile_mode="reduce-overhead")
    assert _train(compile=True, device="cpu", compile_mode="reduce-overhead").compile_mode == "reduce-overhead"
    assert _train(compile=compile_, device="cpu").compile_mode == "default"


def test_help_says_which_settings_are_refused_and_why():
    text = " ".join(CliRunner().invoke(cli, ["train", "--help"]).output.split())
    assert "--decay-shape" in text and "(refused with another lr_schedule)" in text
    assert "is refused: give --compile off CUDA" in text


# ------------------------------------------------------------------------------------------ SQuAD


def _squad_file(path: Path, version: str | None) -> str:
    answer = {"text": "Paris", "answer_start": 0}
    qa = {"id": "q1", "question": "Where?", "answers": [answer]}
    if version == "v2.0":
        qa["is_impossible"] = False
    data = {"data": [{"title": "t", "paragraphs": [{"context": "Paris is a city.", "qas": [qa]}]}]}
    path.write_text(json.dumps({**({"version": version} if version else {}), **data}), encoding="utf-8")
    return str(path)


def test_a_squad_dev_file_of_the_other_version_is_refused_naming_both(tmp_path):
    train = _squad_file(tmp_path / "train.json", "1.1")
    dev = _squad_file(tmp_path / "dev.json", "v2.0")
    task = SquadTask()
    task.read(train, split="train")
    with pytest.raises(ValueError, match=rf"{dev} is SQuAD v2.0 but {train} is v1.1 \(their version fields\)"):
        task.read(dev)
    # a file without a version field, or an explicit --squad-version, reads either
    untagged = SquadTask()
    untagged.read(_squad_file(tmp_path / "plain.json", None), split="train")
    assert untagged.read(dev)
    explicit = SquadTask(version="1.1")
    explicit.read(train, split="train")
    assert explicit.read(dev)


def test_evaluate_squad_refuses_a_training_file_of_the_other_version_before_any_training(tmp_path):
    train = _squad_file(tmp_path / "train.json", "1.1")
    dev = _squad_file(tmp_path / "dev.json", "v2.0")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["evaluate", "squad", "-m", str(model), "--train-file", train, "--dev-file", dev,
                                      "-o", str(out)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.output.count("Error") == 1 and "Traceback" not in result.output
    assert f"{train} is SQuAD v1.1 but {dev} is v2.0 (their version fields)" in result.output
    assert not out.exists()
