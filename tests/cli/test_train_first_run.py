"""What a first `bertprep train` shows: a line per step of a short run without a progress bar, and a warning
(with the recipe to use) when the paper's scale is about to start on a CPU."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.cli.train import CPU_RECIPE

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_run_shorter_than_log_every_reports_every_step_on_stderr(tmp_path, tiny_shards):
    out = tmp_path / "run"
    args = ["train", "--shards", str(tiny_shards / "train"), "-o", str(out), "--preset", "tiny", "--hidden-size", "32",
            "--num-attention-heads", "2", "--batch-size", "8", "--max-steps", "5", "--warmup-steps", "1",
            "--num-workers", "0", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(cli, args)  # --log-every 50 (the default) > --max-steps 5
    assert result.exit_code == 0, result.output
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]
    lines = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == [f"step {s}/5" for s in range(1, 6)]
    assert all("loss " in line and "mlm_accuracy " in line and "tokens_per_s " in line for line in lines)
    assert "paper's scale" not in result.stderr  # tiny, 5 steps: no warning


def test_the_papers_scale_on_a_cpu_is_warned_with_the_recipe(tmp_path, tiny_shards, monkeypatch):
    started = []

    def fake_training(config):
        started.append(config)
        raise ValueError("stopped by the test before any step")

    monkeypatch.setattr("bertprep.bert_model.pretrain.trainer.train", fake_training)
    base = ["train", "--shards", str(tiny_shards / "train"), "--device", "cpu"]
    result = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "a")])
    warning = [line for line in result.stderr.splitlines() if "paper's scale" in line]
    assert len(warning) == 1 and CPU_RECIPE in warning[0] and "1,000,000 steps" in warning[0]
    assert started[0].preset == "base" and started[0].max_steps == 1_000_000  # warned, not refused
    result = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "b"), "--max-steps", "20", "--warmup-steps", "2"])
    assert "paper's scale" not in result.stderr  # a step limit given: the user chose
