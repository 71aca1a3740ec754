"""`bertprep plot` (bert_model/curves.py): runs' held-out accuracy and loss against tokens and minutes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bertprep.bert_model.curves import read_run
from bertprep.bert_model.pretrain.trainer import train
from bertprep.cli.main import cli
from model_factory import tiny_train_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_run(run: Path, lines: list[dict]) -> Path:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return run


def _train_line(step: int, tokens: int, elapsed: float, loss: float) -> dict:
    return {"step": step, "split": "train", "loss": loss, "tokens_seen": tokens, "elapsed_s": elapsed}


def _eval_line(step: int, loss: float, acc: float) -> dict:
    return {"step": step, "split": "eval", "loss": loss, "mlm_accuracy_at_mask": acc}


def test_evaluations_sit_at_the_tokens_and_minutes_of_their_step(tmp_path):
    run = _write_run(
        tmp_path / "a",
        [
            _train_line(10, 1000, 60, 5.0),
            _eval_line(15, 4.8, 0.1),
            _train_line(20, 2000, 180, 4.0),
            _eval_line(20, 4.1, 0.2),
        ],
    )
    curves = read_run(str(run))
    assert curves.name == "a"
    np.testing.assert_allclose(curves.train_tokens, [1000, 2000])
    np.testing.assert_allclose(curves.eval_tokens, [1500, 2000])  # step 15: halfway between the lines of 10 and 20
    np.testing.assert_allclose(curves.eval_minutes, [2.0, 3.0])
    np.testing.assert_allclose(curves.eval_accuracy_at_mask, [0.1, 0.2])


def test_minutes_add_up_across_resumed_invocations(tmp_path):
    """elapsed_s restarts with each --resume: the curve's minutes go on from the run's total."""
    lines = [_train_line(10, 100, 60, 5), _train_line(20, 200, 120, 4), _train_line(30, 300, 30, 3)]
    curves = read_run(str(_write_run(tmp_path / "r", [*lines, _train_line(40, 400, 90, 2)])))
    np.testing.assert_allclose(curves.train_minutes, [1.0, 2.0, 2.5, 3.5])


def test_plot_draws_two_trained_runs_and_names_bad_input(tmp_path, tiny_shards):
    for seed in (1, 2):
        settings = dict(eval_shards=str(tiny_shards / "eval"), max_steps=4, warmup_steps=1, eval_every=2, seed=seed)
        train(tiny_train_config(tiny_shards / "train", tmp_path / f"seed{seed}", **settings))
    curves = read_run(str(tmp_path / "seed1"))
    assert len(curves.eval_loss) == 2 and np.all(np.isfinite(curves.eval_accuracy_at_mask))
    assert np.all(np.diff(curves.train_tokens) > 0) and np.all(np.diff(curves.train_minutes) > 0)
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "seed1"), str(tmp_path / "seed2"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out} (2 runs)" in result.output
    assert out.read_bytes()[:8] == PNG_SIGNATURE and out.stat().st_size > 20_000

    finetune_like = _write_run(tmp_path / "ft", [{"step": 2, "split": "train", "loss": 0.7, "lr": 1e-5}])
    result = CliRunner().invoke(cli, ["plot", str(finetune_like), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "has no pre-training lines" in result.output
    result = CliRunner().invoke(cli, ["plot", str(tmp_path), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "no metrics.jsonl" in result.output
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "seed1"), "-o", str(tmp_path / "curves.jpg")])
    assert result.exit_code == 2 and ".png, .svg or .pdf" in result.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["curves.png"]  # nothing half-written
