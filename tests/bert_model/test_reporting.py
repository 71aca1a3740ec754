"""--report-to tensorboard|wandb (bert_model/reporting.py): every metrics.jsonl figure reaches TensorBoard's event
files and an offline W&B run under ``<split>/<field>`` at its step, read back from what they wrote."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import wandb_log
from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from bertprep.bert_model.reporting import scalars
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from conftest import need_module
from finetune_factory import FILLER, write_tiny_checkpoint
from model_factory import tiny_train_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: What users watch in a pre-training run (the issue's list), by their metrics.jsonl names.
TRAIN_FIELDS = {"loss", "mlm_loss", "mlm_accuracy", "mlm_accuracy_at_mask", "nsp_accuracy", "lr", "tokens_per_s"}
EVAL_FIELDS = {"loss", "mlm_accuracy", "mlm_accuracy_at_mask", "nsp_accuracy"}


def _config(tiny_shards: Path, out: Path, **overrides) -> TrainConfig:
    values = dict(eval_shards=str(tiny_shards / "eval"), max_steps=6, warmup_steps=1, eval_every=3)
    return tiny_train_config(tiny_shards / "train", out, **{**values, **overrides})


def _expected(out: Path) -> dict[str, dict[int, float]]:
    """``{"<split>/<field>": {step: value}}`` of every numeric field in OUT/metrics.jsonl."""
    expected: dict[str, dict[int, float]] = {}
    for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        step, values = scalars(json.loads(line))
        for tag, value in values.items():
            expected.setdefault(tag, {})[step] = value
    return expected


def _tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every event
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def _assert_same(got: dict[str, dict[int, float]], expected: dict[str, dict[int, float]], rel: float) -> None:
    assert set(got) == set(expected)
    for tag, by_step in expected.items():
        assert sorted(got[tag]) == sorted(by_step), tag  # the same steps, each once
        for step, value in by_step.items():
            assert got[tag][step] == pytest.approx(value, rel=rel, abs=1e-12) or (
                math.isnan(value) and math.isnan(got[tag][step])
            ), (tag, step)


def test_scalars_are_the_records_numeric_fields_by_split():
    record = {"step": 7, "split": "eval", "loss": 2.5, "sequences": 24, "nsp_accuracy": None, "note": "x", "ok": True}
    assert scalars(record) == (7, {"eval/loss": 2.5, "eval/sequences": 24.0})


def test_tensorboard_holds_every_metrics_jsonl_figure_at_its_step(tmp_path, tiny_shards):
    need_module("tensorboard")
    out = tmp_path / "run"
    train(_config(tiny_shards, out, report_to="tensorboard"))
    expected = _expected(out)
    assert {f"train/{f}" for f in TRAIN_FIELDS} | {f"eval/{f}" for f in EVAL_FIELDS} <= set(expected)
    assert sorted(expected["train/loss"]) == [2, 4, 6] and sorted(expected["eval/loss"]) == [3, 6]
    _assert_same(_tensorboard_scalars(out / "tensorboard"), expected, rel=1e-6)  # TensorBoard stores float32


def test_tensorboard_after_resume_holds_each_step_once(tmp_path, tiny_shards):
    """A run stopped after its last checkpoint logged steps the resumed run logs again: TensorBoard shows the
    resumed run's values, once per step, as metrics.jsonl does."""
    need_module("tensorboard")
    out = tmp_path / "run"
    settings = dict(max_steps=8, save_every=4, keep_last=0, report_to="tensorboard")
    train(_config(tiny_shards, out, stop_after_steps=6, **settings))
    checkpoints = ckpt.list_checkpoints(str(out / ckpt.CHECKPOINTS_DIR))
    assert [step for step, _ in checkpoints] == [4, 6]
    shutil.rmtree(checkpoints[-1][1])  # as if killed after logging step 6 but before its checkpoint: resume at 4
    train(_config(tiny_shards, out, resume=str(out), **settings))
    expected = _expected(out)
    assert sorted(expected["train/loss"]) == [2, 4, 6, 8]
    _assert_same(_tensorboard_scalars(out / "tensorboard"), expected, rel=1e-6)


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B offline, its settings and cache in tmp_path: nothing leaves the machine or lands in $HOME."""
    need_module("wandb")
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # were anything to try the network, it fails here
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))


def _wandb_scalars(out: Path) -> dict[str, dict[int, float]]:
    (run_file,) = wandb_log.run_files(out)
    got: dict[str, dict[int, float]] = {}
    for row in wandb_log.history(run_file):
        for key, value in row.items():
            if not key.startswith("_"):
                got.setdefault(key, {})[row["_step"]] = float(value)
    return got


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_wandb_offline_run_holds_every_metrics_jsonl_figure_at_its_step(tmp_path, tiny_shards, wandb_offline):
    out = tmp_path / "run"
    train(_config(tiny_shards, out, report_to="wandb"))
    expected = _expected(out)
    assert {f"train/{f}" for f in TRAIN_FIELDS} | {f"eval/{f}" for f in EVAL_FIELDS} <= set(expected)
    _assert_same(_wandb_scalars(out), expected, rel=1e-12)


def _keyword_task(root: Path, n: int) -> Path:
    rng = random.Random(n)
    lines = ["sentence\tlabel"]
    for _ in range(n):
        label = rng.randrange(2)
        lines.append(" ".join(rng.sample(FILLER, 4) + [("good" if label else "bad")]) + f"\t{label}")
    path = root / f"task-{n}.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("report_to", ["tensorboard", "wandb"])
def test_finetune_reports_train_and_eval_figures(tmp_path, report_to, monkeypatch, request):
    need_module(report_to)
    if report_to == "wandb":
        request.getfixturevalue("wandb_offline")
    out = tmp_path / "ft"
    config = FinetuneConfig(
        train_file=str(_keyword_task(tmp_path, 64)),
        eval_file=str(_keyword_task(tmp_path, 16)),
        output_dir=str(out),
        init_from=write_tiny_checkpoint(tmp_path / "pretrain"),
        batch_size=16,
        num_train_epochs=2,
        log_every=2,
        progress=False,
        report_to=report_to,
    )
    finetune(config, make_task("glue", glue_task="sst2", max_seq_length=16))
    expected = _expected(out)
    assert sorted(expected["train/loss"]) == [2, 4, 6, 8] and sorted(expected["eval/accuracy"]) == [4, 8]
    got = _tensorboard_scalars(out / "tensorboard") if report_to == "tensorboard" else _wandb_scalars(out)
    _assert_same(got, expected, rel=1e-6)


def test_report_to_without_its_package_is_refused_before_any_work(tmp_path, tiny_shards, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli, ["train", "--shards", str(tiny_shards / "train"), "-o", str(out), "--report-to", "tensorboard"]
    )
    assert result.exit_code == 2
    assert "needs the package 'tensorboard'" in result.output and "bertprep[tensorboard]" in result.output
    assert not out.exists()
