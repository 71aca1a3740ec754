"""The shipped recipes against their sources: every value a source states, resolved into ``TrainConfig``, is the
source's (the numbers written here from the papers and the code named beside each), the global batch is the same
on 1, 2 or 8 processes, and each recipe trains 2 steps of the tiny preset on 1 and on 2 processes (gloo) with its
global batch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.bert_model.pretrain.phases import parse_phases
from bertprep.bert_model.pretrain.recipe_files import read_recipe
from bertprep.bert_model.pretrain.train_config import TrainConfig
from bertprep.bert_model.schedules import BatchSizeWarmup, lr_factor, token_warmup
from bertprep.cli.main import cli
from conftest import REPO_ROOT, need_module

RECIPES = REPO_ROOT / "bert_model" / "pretrain" / "recipes"

BERT_PAPER = {  # Devlin et al. 2018, appendix A.2; google-research/bert optimization.py, bert_config.json
    "optimizer": "adamw",
    "global_batch_size": 256,
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "lr_schedule": "linear",
    "warmup_steps": 10_000,
    "max_steps": 1_000_000,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "nsp_loss_weight": 1.0,
}
ROBERTA = {  # Liu et al. 2019, table 9; fairseq polynomial_decay (--power 1, --end-learning-rate 0)
    "global_batch_size": 8192,
    "learning_rate": 6e-4,
    "warmup_steps": 24_000,
    "max_steps": 500_000,
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_grad_norm": 0.0,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "nsp_loss_weight": 0.0,
    "lr_schedule": "polynomial",
    "polynomial_power": 1.0,
    "min_lr_ratio": 0.0,
}
NVIDIA_LAMB = {  # DeepLearningExamples BERT scripts/run_pretraining.sh phase 1, run_pretraining.py (FusedLAMB)
    "optimizer": "lamb",
    "global_batch_size": 8192 * 8,  # train_batch_size per GPU x 8 GPUs
    "batch_size": 8192 // 128,  # / gradient_accumulation_steps
    "learning_rate": 6e-3,
    "warmup_steps": round(0.2843 * 7038),  # warmup_proportion x train_steps
    "max_steps": 7038,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,  # FusedLAMB's max_grad_norm
    "nsp_loss_weight": 1.0,
    "lr_schedule": "polynomial-from-0",  # schedulers.py PolyWarmUpScheduler: (1 - progress)^degree
    "polynomial_power": 0.5,  # its degree
}
MODERNBERT = {  # Warner et al. 2024, section 2.2; AnswerDotAI/ModernBERT pre-training yaml, main.py, src/
    "architecture": "modernbert",
    "optimizer": "stable-adamw",
    "learning_rate": 8e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "global_batch_size": 4608,
    "batch_size_start": 768,
    "batch_size_warmup_tokens": 50 * 10**9,
    "batch_size_warmup_shape": "equal-steps",  # "each batch size has the same number of update steps"
    "warmup_tokens": 3 * 10**9,
    "lr_schedule": "wsd",
    "decay_shape": "1-sqrt",
    "masked_lm_prob": 0.3,
    "nsp_loss_weight": 0.0,
    "packing": True,
    "max_grad_norm": 0.0,  # main.py: StableAdamW replaces gradient clipping
    "embedding_dropout": 0.0,
    "mlp_dropout": 0.0,
    "attention_dropout": 0.0,  # attention_probs_dropout_prob
    "attention_output_dropout": 0.1,  # attn_out_dropout_prob
}
SOURCES = {
    "bert-base-paper": BERT_PAPER,
    "roberta-base": ROBERTA,
    "bert-large-nvidia-lamb": NVIDIA_LAMB,
    "modernbert-base": MODERNBERT,
}


def _resolved(name: str) -> TrainConfig:
    return read_recipe(str(RECIPES / f"{name}.toml")).train_config(shards="shards", output_dir="out")


def _rows(config: TrainConfig, phase: dict) -> int:
    """Rows of one step on one process in ``phase`` (a parsed phase of ``config``)."""
    keys = ("batch_size", "gradient_accumulation_steps")
    batch, accumulation = (phase.get(k, getattr(config, k)) for k in keys)
    return batch * accumulation


@pytest.mark.parametrize("name", SOURCES)
def test_every_value_the_source_states_is_the_sources(name):
    config = _resolved(name)
    assert {k: getattr(config, k) for k in SOURCES[name]} == SOURCES[name]


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize("processes", [1, 2, 8])
def test_the_global_batch_is_kept_on_any_number_of_processes(name, processes):
    config = _resolved(name)
    ran = config.for_world_size(processes)
    assert ran.batch_size * ran.gradient_accumulation_steps * processes == config.global_batch_size
    phase_batches = [_rows(ran, phase) * processes for phase in parse_phases(ran.phases, ran.max_steps)]
    stated = {"bert-base-paper": [256, 256], "modernbert-base": [4608, 576, 576]}  # (ModernBERT: 576 of 8,192)
    assert phase_batches == stated.get(name, [])


def test_modernbert_phases_come_to_the_same_steps_on_any_number_of_processes():
    """1.7T tokens at 4,608 x 1,024 a step, 250B and 50B at 576 x 8,192 (paper, section 2.2)."""
    for processes in (1, 2, 8):
        ran = _resolved("modernbert-base").for_world_size(processes)
        slots = []
        for i, phase in enumerate(parse_phases(ran.phases, ran.max_steps)):
            slots.append(_rows(ran, phase) * processes * (1024 if i == 0 else 8192))
        sized = ran.with_phase_steps(slots)
        assert [p["steps"] for p in sized.phase_settings()] == [360_277, 52_982, 10_597]


def test_a_global_batch_the_processes_cannot_divide_is_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        _resolved("bert-large-nvidia-lamb").for_world_size(3)
    assert str(err.value) == (
        "the run's global batch 65536 is not a multiple of batch_size 64 x 3 process(es) = 192; choose a "
        "--batch-size and a number of processes whose product divides it"
    )
    with pytest.raises(ValueError, match=r"give global_batch_size .* or gradient_accumulation_steps, not both"):
        TrainConfig(shards="s", output_dir="o", global_batch_size=256, gradient_accumulation_steps=8)


def test_modernbert_warm_ups_as_its_code_runs_them():
    """On 8 processes (ModernBERT's): every batch size of the warm-up takes the same number of steps (within one,
    the rounding), and the learning-rate warm-up covers 3B tokens, where warmup-steps = 636 covered 0.5B."""
    config = _resolved("modernbert-base").for_world_size(8)
    per_micro_batch = config.batch_size * 8
    batches = BatchSizeWarmup(
        start=config.batch_size_start // per_micro_batch,
        full=config.gradient_accumulation_steps,
        warmup_tokens=config.batch_size_warmup_tokens,
        tokens_per_micro_batch=per_micro_batch * 1024,
        shape=config.batch_size_warmup_shape,
    )
    steps_per_size = Counter(batches.micro_batches(s) for s in range(batches.warmup_steps))
    assert sorted(steps_per_size) == list(range(6, 36))  # 768 / 128 .. 4,480 / 128
    assert max(steps_per_size.values()) - min(steps_per_size.values()) <= 1
    factors = token_warmup(config.warmup_tokens, batches)
    assert batches.tokens_before(len(factors) - 1) < 3 * 10**9 <= batches.tokens_before(len(factors))
    assert batches.tokens_before(636) < 0.6 * 10**9  # (the recipe's warm-up before)


def test_roberta_decays_from_the_end_of_the_warm_up_as_fairseq():
    """fairseq polynomial_decay with --warmup-updates 24000 --total-num-update 500000: right after the warm-up
    the peak (BERT's linear decay from step 0 was 4.8% lower there), then linear to 0 at 500k."""
    config = _resolved("roberta-base")
    settings = config.schedule_settings(config.max_steps)

    def factor(step):
        return lr_factor(step, warmup_steps=config.warmup_steps, max_steps=config.max_steps, **settings)

    assert factor(24_000) == 1.0
    assert factor(262_000) == pytest.approx(0.5)
    assert factor(500_000) == 0.0


def nvidia_poly_warmup(step: int, *, warmup: float = 0.2843, total_steps: int = 7038, degree: float = 0.5) -> float:
    """DeepLearningExamples BERT ``schedulers.py`` ``PolyWarmUpScheduler.get_lr`` (a factor of base_lr)."""
    progress = step / total_steps
    return progress / warmup if progress < warmup else (1.0 - progress) ** degree


def test_nvidia_lamb_decays_as_nvidias_poly_warm_up_scheduler():
    """The same factor at every step; in the warm-up within 5e-5 (2001 whole steps for 0.2843 x 7038 = 2000.9)."""
    config = _resolved("bert-large-nvidia-lamb")
    settings = config.schedule_settings(config.max_steps)
    for step in [0, 1, 1000, 2000, 2001, 2002, 4000, 7000, 7037, 7038]:
        ours = lr_factor(step, warmup_steps=config.warmup_steps, max_steps=config.max_steps, **settings)
        assert ours == pytest.approx(nvidia_poly_warmup(step), rel=5e-5, abs=1e-12), step


#: What makes a recipe a 2-step run of a tiny model on shards of 8 tokens (the global batch is the recipe's).
TINY = (
    "--preset tiny --num-hidden-layers 1 --hidden-size 16 --num-attention-heads 1 --intermediate-size 32 "
    "--max-steps 2 --warmup-steps 1 --num-workers 0 --shuffle-buffer-size 16 --save-every 0 --precision fp32 "
    "--device cpu --no-progress"
).split()


@pytest.fixture(scope="module")
def short_shards(tmp_path_factory) -> Path:
    """Static (NSP) and dynamic shards of 8 tokens, 2 shards each (one per process)."""
    from shard_factory import write_shard_dir

    root = tmp_path_factory.mktemp("short-shards")
    write_shard_dir(root / "static", max_seq_length=8, max_predictions_per_seq=2, seed=5)
    write_shard_dir(root / "dynamic", max_seq_length=8, max_predictions_per_seq=2, masking="dynamic", seed=6)
    return root


def _run_args(name: str, shards: Path, out: Path) -> tuple[list[str], list[str]]:
    """The command's arguments and the log lines that show the recipe's global batch on either world size."""
    if name == "bert-base-paper":  # phase 2: 8 a micro-batch, still 256 a step
        phases = ["--phase", "steps=1", "--phase", f"shards={shards / 'static'},batch-size=8"]
        return [*phases, "--batch-size", "32"], ["global batch 256", "batch 8 x {} micro-batches"]
    if name == "roberta-base":
        return ["--batch-size", "1024"], ["global batch 8192"]
    if name == "bert-large-nvidia-lamb":
        return ["--batch-size", "4096"], ["global batch 65536"]
    phases = ["--phase", "steps=1", "--phase", f"shards={shards / 'dynamic'},batch-size=32,global-batch-size=576"]
    extra = ["--batch-size", "128", "--warmup-tokens", "3000", *phases]  # (the warm-up in tokens: 1 step)
    return extra, ["global batch 4608", "batch-size warm-up (equal-steps): global batch 768 to 4608"]


@pytest.mark.slow  # 32-51 s per recipe (a run on 1 process and one on 2) on 2 shared, busy cores
@pytest.mark.parametrize("name", SOURCES)
def test_each_recipe_trains_two_steps_on_one_and_two_processes_with_its_global_batch(
    short_shards, tmp_path, caplog, name
):
    if name == "modernbert-base":
        need_module("optimi")
    shards = short_shards / ("dynamic" if name == "modernbert-base" else "static")
    for processes in (1, 2):
        out = tmp_path / f"run{processes}"
        extra, expected = _run_args(name, short_shards, out)
        args = ["train", "--config", name, "--shards", str(shards), "-o", str(out), *TINY, *extra]
        if processes == 1:
            with caplog.at_level(logging.INFO, logger="bertprep"):
                result = CliRunner().invoke(cli, args)
            assert result.exit_code == 0, result.output[-3000:]
            log = caplog.text
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            proc = subprocess.run([*cmd, "-m", "bertprep.cli.main", *args], env=env, capture_output=True, text=True,
                                  timeout=400)  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
            log = proc.stdout + proc.stderr
        assert f"world size {processes}; global batch" in log
        for line in expected:
            assert line.format(256 // 8 // processes) in log, (line, log[-3000:])
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert [x["step"] for x in lines if x["split"] == "train"] == [1, 2]
        if name == "modernbert-base":  # the warm-up's first batch, then phase 2's
            assert [x["global_batch_size"] for x in lines if x["split"] == "train"] == [768, 576]


def test_a_phase_that_gives_its_accumulation_beside_a_global_batch_is_refused_naming_it():
    phases = ("steps=5", "batch-size=8,gradient-accumulation-steps=4")
    config = TrainConfig(shards="s", output_dir="o", global_batch_size=256, max_steps=10, warmup_steps=1, phases=phases)
    with pytest.raises(ValueError, match=r"^phase 2 \('batch-size=8,gradient-accumulation-steps=4'\) gives gradient"):
        config.for_world_size(1)
    ran = TrainConfig(
        shards="s",
        output_dir="o",
        global_batch_size=256,
        max_steps=10,
        warmup_steps=1,
        phases=phases[:1] + ("batch-size=8",),
    )
    resolved = ("steps=5,gradient-accumulation-steps=2", "batch-size=8,gradient-accumulation-steps=8")
    assert ran.for_world_size(4).phases == resolved  # (32 x 4 x 2 and 8 x 4 x 8: 256)
