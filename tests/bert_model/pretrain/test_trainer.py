"""bert_model/optim.py and trainer.py, and the `bertprep train` command."""

from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer, create_scheduler, param_groups, warmup_linear_decay
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from bertprep.cli.main import cli
from model_factory import tiny_train_args, tiny_train_config
from shard_factory import SPECIAL_TOKENS, write_shard_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(root, out, **overrides) -> TrainConfig:
    return tiny_train_config(overrides.pop("shards", root / "train"), out, **overrides)


# ------------------------------------------------------------------------------------------------- optim


def test_optimizer_groups_cover_every_parameter_once():
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=100))
    groups = param_groups(model, weight_decay=0.01)
    names = [[n for n, _ in g["params"]] for g in groups]
    decay, no_decay = set(names[0]), set(names[1])
    assert not decay & no_decay
    assert decay | no_decay == {n for n, _ in model.named_parameters()}
    assert sum(len(n) for n in names) == len({id(p) for p in model.parameters()})
    assert groups[0]["weight_decay"] == 0.01 and groups[1]["weight_decay"] == 0.0
    # The original's rule: no decay for biases and LayerNorm; decay for weights and embeddings.
    assert all(n.endswith("bias") or "LayerNorm" in n for n in no_decay)
    assert "cls.predictions.bias" in no_decay and "bert.embeddings.LayerNorm.weight" in no_decay
    assert "bert.embeddings.word_embeddings.weight" in decay
    assert "bert.encoder.layer.1.attention.self.qkv.weight" in decay  # query, key and value: one matrix
    assert "bert.encoder.layer.1.attention.self.qkv.bias" in no_decay
    optimizer = create_optimizer(model, learning_rate=1e-4)
    assert optimizer.param_groups[0]["param_names"] == names[0]


def test_warmup_then_linear_decay_as_the_original():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW([("weight", model.weight), ("bias", model.bias)], lr=1e-4)
    scheduler = create_scheduler(optimizer, warmup_steps=10, max_steps=100)
    lrs = []
    for _ in range(100):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == 0 and lrs[5] == pytest.approx(0.5e-4) and lrs[9] == pytest.approx(0.9e-4)
    assert lrs[10] == pytest.approx(0.9e-4) and lrs[50] == pytest.approx(0.5e-4) and lrs[99] == pytest.approx(1e-6)
    assert warmup_linear_decay(120, warmup_steps=10, max_steps=100) == 0.0
    with pytest.raises(ValueError, match="warmup_steps must be in"):
        create_scheduler(optimizer, warmup_steps=200, max_steps=100)


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_tiny_model_overfits_one_batch(tiny_shards):
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    batch = next(iter(ShardLoader(ShardDataset(str(tiny_shards / "train"), batch_size=8, shuffle=False))))
    optimizer = create_optimizer(model, learning_rate=2e-3, weight_decay=0.0)
    first = None
    for _ in range(150):
        out = model(**batch)
        first = first if first is not None else out.loss.item()
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    real = batch["masked_lm_ids"] != -100
    assert first > 4.0 and out.loss.item() < 0.05
    assert torch.equal(out.prediction_logits.argmax(-1)[real], batch["masked_lm_ids"][real])
    assert torch.equal(out.seq_relationship_logits.argmax(-1), batch["next_sentence_label"])


def test_mlm_accuracy_at_mask_counts_only_mask_inputs():
    """A model that copies its input and otherwise guesses token 7: right on the kept and the one lucky [MASK]
    position, wrong on the other [MASK] and the random-replaced ones (hand-counted)."""
    from types import SimpleNamespace

    from bertprep.bert_model.metrics import PretrainingMetrics

    MASK, V = 4, 10
    input_ids = torch.tensor([[2, 4, 5, 4, 3, 9, 3, 0], [2, 6, 4, 8, 3, 4, 3, 0]])
    positions = torch.tensor([[1, 2, 3, 0], [1, 2, 3, 5]])
    labels = torch.tensor(
        [
            [7, 5, 8, -100],  # [MASK]->7 right, kept 5 right, [MASK]->8 wrong, padding
            [9, 1, 8, 2],
        ]
    )  # random 6 for 9 wrong, [MASK]->1 wrong, kept 8 right, [MASK]->2 wrong
    guesses = torch.where(torch.gather(input_ids, 1, positions) == MASK, 7, torch.gather(input_ids, 1, positions))
    logits = torch.nn.functional.one_hot(guesses, V).float()
    out = SimpleNamespace(
        prediction_logits=logits,
        seq_relationship_logits=torch.zeros(2, 2),
        mlm_loss=torch.tensor(1.0),
        nsp_loss=torch.tensor(0.5),
    )
    batch = {
        "input_ids": input_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "next_sentence_label": torch.tensor([0, 1]),
        "attention_mask": (input_ids != 0).long(),
    }
    metrics = PretrainingMetrics("cpu", mask_token_id=MASK)
    metrics.update(batch, out)
    m = metrics.compute()
    assert m["mlm_accuracy"] == pytest.approx(3 / 7)  # 7 real predictions, 3 right
    assert m["mlm_accuracy_at_mask"] == pytest.approx(1 / 4)  # 4 at [MASK], 1 right
    assert "mlm_accuracy_at_mask" not in PretrainingMetrics("cpu").compute()


# ------------------------------------------------------------------------------------------------- train


def test_train_writes_metrics_plot_and_checkpoints(tiny_shards, tmp_path):
    config = _config(
        tiny_shards,
        tmp_path / "run",
        eval_shards=str(tiny_shards / "eval"),
        eval_every=4,
        save_every=4,
        keep_last=1,
        gradient_accumulation_steps=2,
    )
    result = train(config)
    assert result.step == 8 and result.stop_reason == "max_steps"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["split"] == "train"]
    eval_lines = [x for x in lines if x["split"] == "eval"]
    assert [x["step"] for x in train_lines] == [2, 4, 6, 8] and [x["step"] for x in eval_lines] == [4, 8]
    for key in (
        "loss",
        "mlm_loss",
        "mlm_accuracy",
        "mlm_accuracy_at_mask",
        "nsp_loss",
        "nsp_accuracy",
        "lr",
        "tokens_per_s",
        "grad_norm",
    ):
        assert key in train_lines[0]
    assert "mfu" not in train_lines[0]  # CPU: no peak to compare with
    assert train_lines[0]["loss"] == pytest.approx(train_lines[0]["mlm_loss"] + train_lines[0]["nsp_loss"])
    assert 0 <= eval_lines[-1]["mlm_accuracy"] <= 1 and eval_lines[-1]["sequences"] == 24
    assert 0 <= eval_lines[-1]["mlm_accuracy_at_mask"] <= 1
    assert train_lines[-1]["tokens_seen"] > 8 * 2 * 8 * 5  # 8 steps x 2 micro-batches x 8 rows x >= 5 tokens
    assert (tmp_path / "run" / "metrics.png").stat().st_size > 10_000
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == ["step-000008"]  # keep_last=1
    files = sorted(os.listdir(result.checkpoint))
    assert files == ["config.json", "model.safetensors", "optimizer.safetensors", "state.json", "vocab.txt"]


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("num_workers,accumulation", [(0, 2), (2, 3)])
@pytest.mark.slow
def test_resume_equals_uninterrupted_run(tiny_shards, tmp_path, num_workers, accumulation):
    # Dropout on, shuffling on, evaluation in between: everything that draws random numbers is exercised.
    common = dict(
        num_workers=num_workers,
        gradient_accumulation_steps=accumulation,
        eval_shards=str(tiny_shards / "eval"),
        eval_every=3,
        eval_batches=2,
    )
    full = train(_config(tiny_shards, tmp_path / "full", **common))
    first = train(_config(tiny_shards, tmp_path / "parts", stop_after_steps=4, **common))
    assert first.step == 4 and first.stop_reason == "stop_after_steps"
    assert os.path.isdir(tmp_path / "parts" / "checkpoints" / "step-000004")
    second = train(_config(tiny_shards, tmp_path / "parts", resume=str(tmp_path / "parts"), **common))
    assert second.step == 8
    a, b = _weights(full.model), _weights(second.model)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert full.data_cursor == second.data_cursor
    # And training did move the weights (the comparison is not between two initialisations).
    init = BertForPreTraining(full.model.config).state_dict()
    assert not torch.equal(init["bert.pooler.dense.weight"], a["bert.pooler.dense.weight"])
    # The resumed run's log continues the first one's instead of starting over.
    steps = [
        json.loads(x)["step"]
        for x in (tmp_path / "parts" / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["split"] == "train"
    ]
    assert steps == [2, 4, 6, 8]


def test_resume_refuses_shards_of_another_length_but_init_from_accepts(tiny_shards, tmp_path):
    train(_config(tiny_shards, tmp_path / "phase1", max_steps=2))
    long_shards = tmp_path / "long"
    write_shard_dir(long_shards, num_shards=1, rows_per_shard=16, vocab_size=64, max_seq_length=48, seed=5)
    with pytest.raises(ValueError, match=r"max_seq_length=48 but checkpoint .* uses max_seq_length=32"):
        train(_config(tiny_shards, tmp_path / "phase1", shards=str(long_shards), resume=str(tmp_path / "phase1")))
    phase2 = train(
        _config(
            tiny_shards,
            tmp_path / "phase2",
            shards=str(long_shards),
            max_steps=2,
            init_from=str(tmp_path / "phase1"),
            hidden_dropout_prob=0.0,
            hidden_size=48,
        )
    )
    assert phase2.step == 2
    # The weights fix the architecture (hidden_size 48 is ignored); dropout is a training setting and applies.
    saved = json.loads((tmp_path / "phase2" / "checkpoints" / "step-000002" / "config.json").read_text())
    assert saved["hidden_size"] == 32 and saved["hidden_dropout_prob"] == 0.0
    assert saved["attention_probs_dropout_prob"] == 0.1
    other_vocab = tmp_path / "other_vocab"
    write_shard_dir(
        other_vocab,
        num_shards=1,
        rows_per_shard=16,
        vocab_size=64,
        max_seq_length=32,
        vocab=SPECIAL_TOKENS + [f"t{i}" for i in range(59)],
    )
    with pytest.raises(ValueError, match="made with another vocab"):
        train(_config(tiny_shards, tmp_path / "phase3", shards=str(other_vocab), init_from=str(tmp_path / "phase1")))


def test_max_time_stops_cleanly_with_a_checkpoint(tiny_shards, tmp_path):
    result = train(_config(tiny_shards, tmp_path / "run", max_time_minutes=1e-6, max_steps=1000))
    assert result.step == 1 and result.stop_reason == "max_time"
    assert os.path.isdir(tmp_path / "run" / "checkpoints" / "step-000001")
    # A new run into the same directory would mix two runs' checkpoints: refused, pointing at --resume.
    with pytest.raises(ValueError, match="already holds checkpoints of a run; continue it with --resume"):
        train(_config(tiny_shards, tmp_path / "run"))


# --------------------------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_train_runs_and_resumes(tiny_shards, tmp_path):
    out = tmp_path / "cli"
    args = tiny_train_args(
        tiny_shards / "train", out, "--eval-shards", str(tiny_shards / "eval"), "--max-steps", "4", "--warmup-steps",
        "1", "--log-every", "2", "--eval-every", "2", "--num-workers", "0", "--no-progress", "--stop-after-steps", "2",
        batch_size=4,
    )  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "step 2 (stop_after_steps); checkpoint" in result.output
    result = CliRunner().invoke(cli, args[:-2] + ["--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert "step 4 (max_steps)" in result.output
    state = json.loads((out / "checkpoints" / "step-000004" / "state.json").read_text())
    assert state["model_config"]["hidden_size"] == 32 and state["train_config"]["batch_size"] == 4
    assert state["data"]["vocab_size"] == 64 and state["data"]["max_seq_length"] == 32


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_signal_stops_after_the_step_with_a_checkpoint_and_resumes(tiny_shards, tmp_path, signame):
    """A scheduler's SIGTERM (or Ctrl-C) to the whole process group, loader worker included: the run writes a
    checkpoint at the step it reached, exits 128 + signal number and says how to go on; --resume continues."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = tiny_train_args(
        tiny_shards / "train", out, "--max-steps", "100000", "--warmup-steps", "1", "--log-every", "1",
        "--num-workers", "1", "--no-progress", "--device", "cpu", batch_size=4,
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertprep.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "training did not start within 120 s"
        time.sleep(0.1)
    os.killpg(proc.pid, getattr(signal, signame))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, signame), stderr
    assert f"interrupted by {signame}; continue with --resume {out}" in stderr
    (step,) = [int(name.split("-")[1]) for name in os.listdir(out / "checkpoints")]
    assert f"step {step} ({signame}); checkpoint" in stdout and step >= 3
    result = train(
        _config(
            tiny_shards,
            out,
            batch_size=4,
            max_steps=100000,
            warmup_steps=1,
            log_every=1,
            num_workers=1,
            resume=str(out),
            stop_after_steps=1,
        )
    )
    assert result.step == step + 1 and result.stop_reason == "stop_after_steps"


def test_cli_reports_bad_settings_clearly(tiny_shards, tmp_path):
    base = [
        "train",
        "--shards",
        str(tiny_shards / "train"),
        "-o",
        str(tmp_path / "x"),
        "--preset",
        "tiny",
        "--num-workers",
        "0",
        "--no-progress",
    ]
    result = CliRunner().invoke(cli, base + ["--warmup-steps", "50", "--max-steps", "10"])
    assert result.exit_code == 2 and "warmup_steps (50) exceeds max_steps (10)" in result.output
    result = CliRunner().invoke(cli, base + ["--num-workers", "8", "--max-steps", "1", "--warmup-steps", "0"])
    assert result.exit_code == 1 and "4 shard file(s) but training reads 8 streams" in result.output
    mismatched = tmp_path / "eval128"
    write_shard_dir(mismatched, num_shards=1, rows_per_shard=8, vocab_size=64, max_seq_length=40)
    result = CliRunner().invoke(
        cli, base + ["--eval-shards", str(mismatched), "--max-steps", "1", "--warmup-steps", "0"]
    )
    assert result.exit_code == 1 and "max_seq_length=40 but the training shards" in result.output
    result = CliRunner().invoke(cli, base + ["--preset", "huge"])
    assert result.exit_code == 2 and "'huge' is not one of" in result.output


def test_cli_help_documents_every_option():
    command = cli.get_command(None, "train")
    for param in command.params:
        if param.name != "help":
            assert getattr(param, "help", None), f"--{param.name} has no help"
    result = CliRunner().invoke(cli, ["train", "--help"])
    assert result.exit_code == 0 and "torchrun --standalone --nproc_per_node=N" in result.output


# --------------------------------------------------------------------------------------------- precision


def test_bf16_autocast_on_cpu_matches_fp32_and_keeps_fp32_weights(tiny_shards):
    """--precision bf16 on the CPU: the same batch gives losses within bf16 rounding of fp32's, the matrix
    products really run in bf16, and the parameters (and so the optimizer) stay fp32."""
    from bertprep.bert_model.precision import autocast_context, uses_bf16

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=64))
    model.eval()
    batch = next(iter(ShardLoader(ShardDataset(str(tiny_shards / "train"), batch_size=8, shuffle=False))))
    cpu = torch.device("cpu")
    assert not uses_bf16(cpu, "auto") and uses_bf16(cpu, "bf16") and uses_bf16(torch.device("cuda"), "auto")
    with torch.no_grad():
        fp32 = model(**batch)
        with autocast_context(cpu, "bf16"):
            bf16 = model(**batch)
    assert bf16.prediction_logits.dtype == torch.bfloat16 and fp32.prediction_logits.dtype == torch.float32
    assert bf16.loss.item() == pytest.approx(fp32.loss.item(), rel=0.02)
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.slow  # 150 emulated-bf16 steps; the bf16 path is in the fast loop too (test_train_with_bf16_precision...)
def test_bf16_autocast_on_cpu_still_overfits_one_batch(tiny_shards):
    from bertprep.bert_model.precision import autocast_context

    torch.manual_seed(0)
    model = BertForPreTraining(
        BertConfig.from_preset("tiny", vocab_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )
    batch = next(iter(ShardLoader(ShardDataset(str(tiny_shards / "train"), batch_size=8, shuffle=False))))
    optimizer = create_optimizer(model, learning_rate=2e-3, weight_decay=0.0)
    for _ in range(150):
        with autocast_context(torch.device("cpu"), "bf16"):
            out = model(**batch)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad(), autocast_context(torch.device("cpu"), "bf16"):
        out = model(**batch)
    real = batch["masked_lm_ids"] != -100
    assert out.loss.item() < 0.1
    assert torch.equal(out.prediction_logits.argmax(-1)[real], batch["masked_lm_ids"][real])


def test_train_with_bf16_precision_follows_fp32_and_saves_fp32(tiny_shards, tmp_path):
    losses = {}
    for precision in ("fp32", "bf16"):
        result = train(_config(tiny_shards, tmp_path / precision, precision=precision))
        lines = [json.loads(x) for x in (tmp_path / precision / "metrics.jsonl").read_text().splitlines()]
        losses[precision] = [x["loss"] for x in lines if x["split"] == "train"]
    assert len(losses["bf16"]) == 4
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)  # the same run, within bf16 rounding
    from safetensors.torch import load_file

    weights = load_file(os.path.join(result.checkpoint, "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.float32}
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16"):
        _config(tiny_shards, tmp_path / "x", precision="fp16")


# ------------------------------------------------------------------------------------------ nsp_loss_weight


def test_nsp_loss_weight_zero_trains_the_masked_lm_alone(tiny_shards, tmp_path):
    """--nsp-loss-weight 0 (the paper's 'No NSP' ablation): no gradient reaches the NSP classifier, NSP is
    still reported, and the MLM part still trains."""
    from safetensors.torch import load_file

    runs = {}
    for weight in (0.0, 1.0):
        config = _config(tiny_shards, tmp_path / f"w{weight}", nsp_loss_weight=weight, weight_decay=0.0)
        runs[weight] = load_file(os.path.join(train(config).checkpoint, "model.safetensors"))
        lines = [json.loads(x) for x in (tmp_path / f"w{weight}" / "metrics.jsonl").read_text().splitlines()]
        assert "nsp_accuracy" in lines[-1] and lines[-1]["mlm_loss"] > 0
    key = "cls.seq_relationship.weight"
    # Same seed, so the same initial weights: with weight 0 (and no weight decay) the NSP head is untouched
    # (its bias starts at 0 and stays there); with weight 1 it moved.
    assert not torch.equal(runs[1.0][key], runs[0.0][key])
    assert torch.equal(runs[0.0]["cls.seq_relationship.bias"], torch.zeros(2))
    assert not torch.equal(runs[1.0]["cls.seq_relationship.bias"], torch.zeros(2))


def test_nsp_loss_weight_must_not_be_negative(tiny_shards, tmp_path):
    with pytest.raises(ValueError, match="nsp_loss_weight must be >= 0"):
        _config(tiny_shards, tmp_path, nsp_loss_weight=-1.0)
