"""``train --resume`` goes on with the checkpoint's run settings: every optimizer, schedule, batch, seed and
masking setting not given is the checkpoint's, and one given with another value is refused unless
``--allow-resume-changes``.

Before, ``--resume`` without ``--warmup-steps`` fell back to the default 10,000 warm-up steps: with a short
schedule the learning rate dropped by three orders of magnitude mid-run with only a log line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.bert_model.pretrain.train_config import settings_kept_on_resume
from bertprep.cli.main import cli


def _args(tiny_shards: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        *("--shards", str(tiny_shards / "train"), "-o", str(out)),
        *("--preset", "tiny", "--hidden-size", "32", "--num-attention-heads", "2"),
        *("--no-progress", "--device", "cpu", "--num-workers", "0", "--log-every", "1"),
        *extra,
    ]


#: The first run's settings that differ from the defaults (a resume that forgets them must keep them).
_FIRST = ("--batch-size", "8", "--learning-rate", "0.002", "--warmup-steps", "2", "--max-steps", "6")


@pytest.fixture(scope="module")
def _stopped_run(tiny_shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("resume-settings") / "run"
    result = CliRunner().invoke(
        cli, _args(tiny_shards, out, *_FIRST, "--weight-decay", "0.1", "--stop-after-steps", "3")
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def stopped_run(_stopped_run, tmp_path) -> Path:
    """A run of 6 steps stopped after step 3 with its checkpoint (a copy per test)."""
    out = tmp_path / "run"
    shutil.copytree(_stopped_run, out)
    return out


def _state(out: Path, step: int) -> dict:
    return json.loads((out / "checkpoints" / f"step-{step:06d}" / "state.json").read_text())["train_config"]


def _learning_rates(out: Path) -> dict[int, float]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {m["step"]: m["lr"] for m in lines if "lr" in m}


def test_a_resume_without_the_run_options_continues_the_checkpoints_schedule(tiny_shards, stopped_run):
    result = CliRunner().invoke(
        cli, _args(tiny_shards, stopped_run, "--resume", str(stopped_run), "--stop-after-steps", "5")
    )
    assert result.exit_code == 0, result.output
    assert "step 6 (max_steps)" in result.output  # max_steps 6, not the default 1,000,000
    recorded = _state(stopped_run, 6)
    assert (recorded["learning_rate"], recorded["warmup_steps"], recorded["batch_size"]) == (0.002, 2, 8)
    assert recorded["weight_decay"] == 0.1
    rates = _learning_rates(stopped_run)
    assert rates[4] == pytest.approx(0.002 * (1 - 3 / 6))  # step 4 runs at the decay of 0-based step 3


def test_a_resume_with_another_learning_rate_is_refused_unless_meant(tiny_shards, stopped_run):
    result = CliRunner().invoke(
        cli, _args(tiny_shards, stopped_run, "--resume", str(stopped_run), "--lr", "0.0005", "--stop-after-steps", "1")
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--learning-rate" in result.output and "0.002" in result.output
    assert "--allow-resume-changes" in result.output
    assert not (stopped_run / "checkpoints" / "step-000006").exists()

    result = CliRunner().invoke(
        cli, _args(tiny_shards, stopped_run, "--resume", str(stopped_run), "--lr", "0.0005", "--allow-resume-changes")
    )
    assert result.exit_code == 0, result.output
    assert _state(stopped_run, 6)["learning_rate"] == 0.0005


def test_the_same_value_given_again_and_run_control_options_are_accepted(tiny_shards, stopped_run):
    result = CliRunner().invoke(
        cli,
        _args(tiny_shards, stopped_run, "--resume", str(stopped_run), *_FIRST, "--save-every", "1", "--keep-last", "0"),
    )
    assert result.exit_code == 0, result.output
    assert (stopped_run / "checkpoints" / "step-000005").is_dir()


def test_every_optimizer_schedule_and_data_setting_is_kept_on_resume():
    """The kept settings are every field but the run-control ones, so options added later are kept too."""
    kept = set(settings_kept_on_resume())
    assert {
        "learning_rate",
        "warmup_steps",
        "max_steps",
        "batch_size",
        "gradient_accumulation_steps",
        "seed",
        "weight_decay",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "max_grad_norm",
        "nsp_loss_weight",
        "packing",
        "masked_lm_prob",
        "masked_lm_prob_final",
        "shuffle_buffer_size",
    } <= kept
    assert not kept & {"output_dir", "resume", "device", "save_every", "stop_after_steps", "hidden_size", "preset"}
