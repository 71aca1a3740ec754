"""``bertprep train --resume``: the checkpoint's model and settings are the run's, and the record says so; a
model option that would change them is refused in one line. The real CLI, run in this process
(``cli_factory.invoke``: click's runner, each run bounded in time), with the user's run byte-for-byte intact
after a refusal. What is asserted is the command's exit status, its ``Error:`` line (no traceback: ``invoke``
puts an uncaught exception's on stderr as the interpreter would), the files on disk and the time to a refusal;
none of it needs a process of its own, which would cost ~3 s of CPU a run to import torch.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from cli_factory import error_line, invoke, snapshot
from conftest import need_module

need_module("torch")


def bertprep(*args, timeout: float = 300, **kw):
    """``cli_factory.invoke`` with a bound for a training run on a busy machine."""
    return invoke(*args, timeout=timeout, **kw)


def train_args(shards: Path, *extra) -> list:
    """A tiny, quick ``train`` (one thread, no loader worker unless ``extra`` says so)."""
    return ["train", "--shards", shards, "--batch-size", 4, "--warmup-steps", 0, "--num-workers", 0, "--no-progress",
            *extra]  # fmt: skip


def recorded(run: Path, step: int) -> dict:
    state = json.loads((run / "checkpoints" / f"step-{step:06d}" / "state.json").read_text())
    return {"architecture": state["train_config"]["architecture"], "preset": state["train_config"]["preset"],
            "model": state["model_config"]}  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tiny_shards, tmp_path_factory) -> Path:
    """A real 2-step `bertprep train` run (preset tiny, hidden 32), so its checkpoint records its settings."""
    out = tmp_path_factory.mktemp("trained") / "run"
    proc = bertprep(
        "train", "--shards", tiny_shards / "train", "-o", out, "--preset", "tiny", "--hidden-size", 32,
        "--num-attention-heads", 2, "--batch-size", 4, "--max-steps", 2, "--warmup-steps", 0, "--num-workers", 0,
        "--no-progress", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize(
    "option", [["--preset", "mini"], ["--num-hidden-layers", "4"], ["--hidden-dropout-prob", "0.5"]]
)
@pytest.mark.slow  # ~19 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_resume_refuses_a_model_option(trained_run, tiny_shards, option):
    """Before: `train --resume RUN --preset mini` ignored the preset silently (and logged nothing)."""
    before = snapshot(trained_run)
    start = time.monotonic()
    proc = bertprep(
        "train",
        "--shards",
        tiny_shards / "train",
        "--resume",
        trained_run,
        "-o",
        trained_run,
        *option,
        "--max-steps",
        4,
        "--warmup-steps",
        0,
    )
    line = error_line(proc)
    assert f"Invalid value for {option[0]}: {option[0]} {option[1]} cannot change when resuming" in line
    assert "the checkpoint's is" in line and "start a new run from its weights with -m/--model" in line
    assert time.monotonic() - start < 60
    assert snapshot(trained_run) == before


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_resume_accepts_the_checkpoints_own_model_options(trained_run, tiny_shards, tmp_path):
    """Repeating the run's own options on --resume (as scripts do) is not a change and is accepted."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    proc = bertprep(
        "train", "--shards", tiny_shards / "train", "--resume", run, "-o", run, "--preset", "tiny", "--hidden-size", 32,
        "--num-attention-heads", 2, "--batch-size", 4, "--max-steps", 3, "--warmup-steps", 0, "--num-workers", 0,
        "--no-progress", "--allow-resume-changes", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (run / "checkpoints" / "step-000003").is_dir()


@pytest.mark.slow  # two real training runs (10-30 s on 2 shared cores)
def test_a_modernbert_run_resumes_with_its_own_dropout_options(tiny_shards, tmp_path):
    """ModernBERT records the dropout options as embedding/mlp/attention_dropout: repeating
    `--hidden-dropout-prob 0 --attention-probs-dropout-prob 0` on --resume (the CPU recipe's options) was
    refused as a change; another value still is."""
    run = tmp_path / "run"
    common = ["--shards", tiny_shards / "train", "--architecture", "modernbert", "--preset", "tiny",
              "--hidden-dropout-prob", 0, "--attention-probs-dropout-prob", 0, "--batch-size", 4,
              "--warmup-steps", 0, "--num-workers", 0, "--no-progress"]  # fmt: skip
    proc = bertprep("train", *common, "-o", run, "--max-steps", 2, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = bertprep("train", *common, "--resume", run, "-o", run, "--max-steps", 3, "--allow-resume-changes",
                    timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (run / "checkpoints" / "step-000003").is_dir()
    changed = list(common)
    changed[changed.index("--hidden-dropout-prob") + 1] = 0.5
    proc = bertprep("train", *changed, "--resume", run, "-o", run, "--max-steps", 4, "--allow-resume-changes",
                    timeout=300)  # fmt: skip
    line = error_line(proc)
    assert "--hidden-dropout-prob 0.5 cannot change when resuming (the checkpoint's is 0.0)" in line


@pytest.fixture(scope="module")
def modernbert_run(tiny_shards, tmp_path_factory) -> Path:
    """A 2-step ModernBERT tiny run, packed (the issue's MB1)."""
    out = tmp_path_factory.mktemp("mb") / "MB1"
    proc = bertprep(*train_args(tiny_shards / "train", "--architecture", "modernbert", "--preset", "tiny",
                                "--packing", "-o", out, "--max-steps", 6, "--stop-after-steps", 2))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow  # three real training runs (5-15 s each on 2 shared cores)
def test_resume_without_model_options_records_the_checkpoints_model(modernbert_run, tiny_shards, tmp_path):
    """Before: `--resume MB1 --no-packing` (no --architecture / --preset) recorded {bert, base} in the new
    checkpoint, and the next resume with the true `--architecture modernbert --preset tiny` was refused."""
    run = tmp_path / "MB1"
    shutil.copytree(modernbert_run, run)
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", run, "-o", run, "--no-packing", "--max-steps", 6,
                                "--stop-after-steps", 1, "--allow-resume-changes"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first, second = recorded(run, 2), recorded(run, 3)
    assert second == first and second["architecture"] == "modernbert" and second["preset"] == "tiny"
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", run, "-o", run, "--architecture", "modernbert",
                                "--preset", "tiny", "--max-steps", 6, "--stop-after-steps", 1))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert recorded(run, 4) == first


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_resume_refuses_another_architecture(modernbert_run, tiny_shards):
    """Before: `--resume <a BERT run> --architecture modernbert` exited 0, trained BERT and recorded modernbert
    (here the other way round: the architecture is compared whichever it is)."""
    before = snapshot(modernbert_run)
    start = time.monotonic()
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", modernbert_run, "-o", modernbert_run,
                                "--architecture", "bert", "--max-steps", 6))  # fmt: skip
    line = error_line(proc)
    assert "Invalid value for --architecture: --architecture bert cannot change when resuming" in line
    assert "(the checkpoint's is 'modernbert')" in line and "drop --architecture" in line
    assert time.monotonic() - start < 60  # refused before any model is built
    assert snapshot(modernbert_run) == before


def test_recorded_train_config_is_the_trained_model():
    """The checkpoint's train_config takes the architecture from the model, and on resume the preset and model
    options from the checkpoint resumed, whatever the TrainConfig says (a library caller's defaults)."""
    from bertprep.bert_model.models.modernbert_config import ModernBertConfig
    from bertprep.bert_model.pretrain.start import Start, recorded_train_config
    from bertprep.bert_model.pretrain.train_config import TrainConfig

    model_config = ModernBertConfig.from_preset("tiny", vocab_size=64, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                                                bos_token_id=2, eos_token_id=3)  # fmt: skip
    saved = {"train_config": {"architecture": "modernbert", "preset": "tiny", "hidden_size": None,
                              "hidden_dropout_prob": 0.0}}  # fmt: skip
    config = TrainConfig(shards="s", output_dir="o", resume="o")  # defaults: bert, base
    got = recorded_train_config(config, Start(checkpoint="o/checkpoints/step-000002", saved=saved), model_config)
    assert (got["architecture"], got["preset"], got["hidden_dropout_prob"]) == ("modernbert", "tiny", 0.0)
    config = TrainConfig(shards="s", output_dir="o", init_from="hf", num_hidden_layers=9, hidden_dropout_prob=0.0)
    got = recorded_train_config(config, Start(), model_config)
    assert (got["architecture"], got["num_hidden_layers"], got["hidden_dropout_prob"]) == ("modernbert", None, 0.0)


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_the_logged_loss_is_the_optimised_one(tiny_shards, tmp_path):
    """Before: the logged `loss` was mlm_loss + nsp_loss whatever --nsp-loss-weight (0 trains the MLM alone)."""
    out = tmp_path / "run"
    proc = bertprep(
        "train", "--shards", tiny_shards / "train", "--eval-shards", tiny_shards / "eval", "-o", out, "--preset",
        "tiny", "--hidden-size", 32, "--num-attention-heads", 2, "--batch-size", 4, "--max-steps", 2,
        "--warmup-steps", 0, "--num-workers", 0, "--log-every", 1, "--nsp-loss-weight", 0.25, "--no-progress",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for split in ("train", "eval"):
        logged = [r for r in records if r.get("split") == split and r.get("nsp_loss") is not None]
        assert logged, split
        for r in logged:
            assert r["loss"] == pytest.approx(r["mlm_loss"] + 0.25 * r["nsp_loss"]), r
