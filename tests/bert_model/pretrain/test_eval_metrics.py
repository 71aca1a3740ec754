"""Evaluation lines of ``metrics.jsonl`` carry ``tokens_seen``, ``elapsed_s`` and ``process_cpu_s`` as training
lines do, so that held-out curves against tokens or minutes need no interpolation from training lines."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bertprep.cli.main import cli


def test_eval_lines_carry_tokens_seen_elapsed_and_cpu_seconds(tiny_shards, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--shards", str(tiny_shards / "train"), "--eval-shards", str(tiny_shards / "eval"), "-o", str(out)]
    args += ["--preset", "tiny", "--hidden-size", "32", "--num-attention-heads", "2", "--batch-size", "8"]
    args += ["--max-steps", "3", "--warmup-steps", "0", "--log-every", "1", "--eval-every", "2", "--eval-batches", "1"]
    result = CliRunner().invoke(cli, [*args, "--no-progress", "--device", "cpu", "--num-workers", "0"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = {r["step"]: r for r in lines if r["split"] == "train"}
    evals = [r for r in lines if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [2, 3]
    for record in evals:
        assert record["tokens_seen"] == train[record["step"]]["tokens_seen"] > 0
        assert record["elapsed_s"] >= train[record["step"]]["elapsed_s"]
        assert record["process_cpu_s"] >= train[record["step"]]["process_cpu_s"]
