"""``bertprep train``: options -> ``TrainConfig`` -> ``bertprep.bert_model.pretrain.trainer.train``."""

from __future__ import annotations

import logging
import os
import signal
import sys

import click
from click.core import ParameterSource

from bertprep.bert_model.precision import PRECISIONS
from bertprep.bert_model.pretrain.train_config import ARCHITECTURE_PRESETS, MODEL_OPTIONS, TASKS, TrainConfig
from bertprep.cli.options import AliasedOption, dataclass_default
from bertprep.pipeline.paths import WriteOverReadError, check_writes_apart

_default = dataclass_default(TrainConfig)  # defaults shown in --help come from the dataclass


#: What a run writes in --output-dir (checked against the inputs: none may be, or lie inside, one of them).
_RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "metrics.png")

#: Options that make the model: a resumed run continues the checkpoint's model, so they cannot change.
_FIXED_ON_RESUME = ("preset", *MODEL_OPTIONS)


def _recorded_model_settings(resume: str) -> dict | None:
    """The preset and model config recorded in the checkpoint ``--resume`` names (None: unreadable; the
    trainer then reports the damage or falls back to an earlier checkpoint)."""
    from bertprep.bert_model import checkpoint as ckpt

    try:
        state = ckpt.read_checkpoint_state(ckpt.resolve_checkpoint(resume))
        recorded = {"preset": state["train_config"]["preset"], **state["model_config"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if recorded.get("architecture") == "modernbert":  # the dropout options by the names they have on the command line
        recorded.setdefault("hidden_dropout_prob", recorded.get("mlp_dropout"))  # (architectures.with_dropout)
        recorded.setdefault("attention_probs_dropout_prob", recorded.get("attention_dropout"))
    return recorded


def _refuse_fixed_on_resume(ctx: click.Context, options: dict) -> None:
    """With --resume, refuse a model option given on the command line with another value than the checkpoint's
    (it used to be ignored silently: `--resume RUN --preset mini` went on with RUN's model)."""
    if not options.get("resume"):
        return
    given = [n for n in _FIXED_ON_RESUME if ctx.get_parameter_source(n) in _GIVEN]
    recorded = _recorded_model_settings(options["resume"]) if given else None
    for name in given:
        if recorded is None or recorded.get(name) == options[name]:
            continue  # unreadable (the trainer names the damage) or the checkpoint's own value: nothing ignored
        option = "--" + name.replace("_", "-")
        was = f" (the checkpoint's is {recorded[name]!r})" if name in recorded else ""
        raise click.BadParameter(
            f"{option} {options[name]} cannot change when resuming{was}: --resume {options['resume']} continues "
            f"that checkpoint's model; drop {option}, or start a new run from its weights with -m/--model",
            param_hint=option,
        )


_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--task",
    type=click.Choice(TASKS),
    default=_default("task"),
    help="What to train: 'pretrain' = masked LM + next-sentence prediction on shards.",
)
@click.option(
    "--shards",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="Training shard directory written by 'bertprep make-shards' (holds manifest.json).",
)
@click.option(
    "--eval-shards",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Held-out shard directory (same vocab and max_seq_length) evaluated every --eval-every steps.",
)
@click.option(
    "--output-dir",
    "-o",
    required=True,
    type=click.Path(file_okay=False),
    help="Run directory: metrics.jsonl, metrics.png and checkpoints/ are written here.",
)
@click.option(
    "--architecture",
    type=click.Choice(list(ARCHITECTURE_PRESETS)),
    default=_default("architecture"),
    help="bert: masked LM + next-sentence prediction (Devlin et al. 2018). modernbert: ModernBERT (Warner et "
    "al. 2024: RoPE, GeGLU, alternating global / local attention), masked LM alone with sparse prediction; "
    "NSP / SOP shards serve it too, their next-sentence labels ignored. Resuming takes the checkpoint's.",
)
@click.option(
    "--preset",
    type=click.Choice(sorted({p for presets in ARCHITECTURE_PRESETS.values() for p in presets})),
    default=_default("preset"),
    help="Model size (vocab size comes from the shards). bert: tiny L2/H128, mini L4/H256, small L4/H512, "
    "medium L8/H512, base L12/H768, large L24/H1024. modernbert: tiny L4/H128, mini L7/H256, small L10/H512, "
    "base L22/H768, large L28/H1024.",
)
@click.option("--num-hidden-layers", type=click.IntRange(min=1), default=None, help="Override the preset's layers.")
@click.option(
    "--hidden-size",
    type=click.IntRange(min=1),
    default=None,
    help="Override the preset's hidden size (intermediate size follows as 4x).",
)
@click.option(
    "--num-attention-heads",
    type=click.IntRange(min=1),
    default=None,
    help="Override the preset's attention heads (must divide the hidden size).",
)
@click.option(
    "--intermediate-size",
    type=click.IntRange(min=1),
    default=None,
    help="Override the feed-forward width (default 4 x hidden size).",
)
@click.option(
    "--hidden-dropout-prob",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="Dropout on embeddings and sub-layer outputs (preset: 0.1; with --model it replaces the checkpoint's).",
)
@click.option(
    "--attention-probs-dropout-prob",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="Dropout on attention probabilities (preset: 0.1; with --model it replaces the checkpoint's).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=_default("batch_size"),
    help="Instances per micro-batch on each process. Global batch = this x accumulation x processes.",
)
@click.option(
    "--gradient-accumulation-steps",
    type=click.IntRange(min=1),
    default=_default("gradient_accumulation_steps"),
    help="Micro-batches per optimizer step.",
)
@click.option(
    "--learning-rate",
    "--lr",
    type=click.FloatRange(min=0, min_open=True),
    default=_default("learning_rate"),
    help="Peak learning rate of AdamW (paper: 1e-4).",
)
@click.option(
    "--warmup-steps",
    type=click.IntRange(min=0),
    default=_default("warmup_steps"),
    help="Steps of linear warm-up, then linear decay to 0 at --max-steps (paper: 10,000).",
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=_default("max_steps"),
    help="Optimizer steps of the schedule; training stops there (paper: 1,000,000).",
)
@click.option(
    "--weight-decay",
    type=click.FloatRange(min=0),
    default=_default("weight_decay"),
    help="Decoupled weight decay, not applied to biases and LayerNorm (paper: 0.01).",
)
@click.option(
    "--adam-beta1", type=click.FloatRange(0, 1, max_open=True), default=_default("adam_beta1"), help="AdamW beta1."
)
@click.option(
    "--adam-beta2", type=click.FloatRange(0, 1, max_open=True), default=_default("adam_beta2"), help="AdamW beta2."
)
@click.option(
    "--adam-epsilon",
    type=click.FloatRange(min=0, min_open=True),
    default=_default("adam_epsilon"),
    help="AdamW epsilon (1e-6 as the original).",
)
@click.option(
    "--max-grad-norm",
    type=click.FloatRange(min=0),
    default=_default("max_grad_norm"),
    help="Clip the global gradient norm to this; 0 disables clipping.",
)
@click.option(
    "--nsp-loss-weight",
    type=click.FloatRange(min=0),
    default=_default("nsp_loss_weight"),
    help="Weight of the next-sentence loss: loss = MLM loss + this x NSP loss (paper: 1). 0 trains "
    "the masked LM alone (the paper's 'No NSP' ablation); NSP accuracy is still reported.",
)
@click.option(
    "--packing/--no-packing",
    default=_default("packing"),
    help="Token-budget batches: each micro-batch is --batch-size rows of max_seq_length tokens, filled with as "
    "many whole instances as fit (first-fit in loader order; one that fits in no row waits for the next "
    "micro-batch), positions restarting per instance, attention block-diagonal. A step holds more instances "
    "when they are short, so an epoch takes fewer steps; --max-steps and the schedules count steps. The "
    "shards stay as they are.",
)
@click.option(
    "--masked-lm-prob",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Masking rate instead of the shards' (e.g. 0.3 for ModernBERT; 80/10/10 as always). Shards made "
    "with --masking dynamic only; max_predictions_per_seq scales with it.",
)
@click.option(
    "--masked-lm-prob-final",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Masking rate at --max-steps: linear schedule from --masked-lm-prob (or the shards') at step 0.",
)
@click.option(
    "--eval-masked-lm-prob",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Masking rate of dynamic --eval-shards (default: their manifest's, 0.15 from make-shards), fixed "
    "for the whole run; reported as masked_lm_prob in the eval metrics.",
)
@click.option("--seed", type=int, default=_default("seed"), help="Seed of initialisation, dropout and data order.")
@click.option(
    "--log-every",
    type=click.IntRange(min=1),
    default=_default("log_every"),
    help="Steps between metric lines (metrics.jsonl and the progress bar).",
)
@click.option(
    "--eval-every",
    type=click.IntRange(min=0),
    default=_default("eval_every"),
    help="Steps between evaluations on --eval-shards (0 = only at the end).",
)
@click.option(
    "--eval-batches",
    type=click.IntRange(min=0),
    default=_default("eval_batches"),
    help="Batches per evaluation and process (0 = the whole eval directory).",
)
@click.option(
    "--save-every",
    type=click.IntRange(min=0),
    default=_default("save_every"),
    help="Steps between checkpoints (0 = only at the end; one is always written on exit).",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    default=_default("keep_last"),
    help="Checkpoints to keep; older ones are deleted (0 = keep all).",
)
@click.option(
    "--resume",
    type=click.Path(exists=True),
    default=None,
    help="Continue exactly from a checkpoint directory, or from the latest one of a run directory. Its "
    "files are checked against the sha256 recorded when it was written: a damaged checkpoint "
    "directory is refused; from a run directory the latest intact checkpoint is used (logged).",
)
@click.option(
    "-m",
    "--model",
    "init_from",
    cls=AliasedOption,
    aliases=("--init-from",),
    type=click.Path(exists=True),
    default=None,
    help="Start a new run from a model's weights only (new optimizer, schedule, data order). A "
    "bertprep checkpoint or run directory (e.g. phase 2 at 512 tokens after phase 1 at 128), or a "
    "Hugging Face BERT or ModernBERT directory (config.json + model.safetensors or pytorch_model.bin + "
    "vocab.txt; BertModel, BertForMaskedLM, BertForPreTraining, ModernBertModel or ModernBertForMaskedLM) for "
    "continued pre-training on your corpus: "
    "make the shards with that directory's vocab.txt. Heads it lacks are initialised as in the "
    "original. The architecture comes from the source; the dropout options still apply.",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=_default("precision"),
    show_default=True,
    help="auto: bf16 autocast on CUDA, fp32 on CPU. bf16: autocast on any device (weights and "
    "optimizer stay fp32); on CPUs with AVX512-BF16/AMX (AMD Zen 4+, Intel Sapphire Rapids+) "
    "about 1.6x faster than fp32, elsewhere usually slower. fp32: no autocast.",
)
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=_default("compile"),
    help="Compile the model with torch.compile (faster on GPU after a warm-up).",
)
@click.option(
    "--num-workers",
    type=click.IntRange(min=0),
    default=_default("num_workers"),
    help="DataLoader worker processes per process (0 = load in the training process). The shards "
    "must number at least processes x workers.",
)
@click.option(
    "--shuffle-buffer-size",
    type=click.IntRange(min=1),
    default=_default("shuffle_buffer_size"),
    help="Instances in each loader stream's shuffle buffer.",
)
@click.option(
    "--verify/--no-verify",
    "verify_shards",
    default=_default("verify_shards"),
    help="Before training, check every shard file against the sha256 recorded in its manifest, so that "
    "a truncated or altered shard is named instead of trained on. Costs one read of the shards: 0.14 s "
    "for the 163 MB (366,374 instances) of the make-shards benchmark when in the page cache, about "
    "1 s per GB; from disk, one read at disk speed (benchmarks/bench_verify.py).",
)
@click.option(
    "--device",
    default=_default("device"),
    help="'auto' (CUDA if available, else CPU), 'cpu', 'cuda' or 'cuda:N'. Under torchrun each "
    "process takes cuda:LOCAL_RANK.",
)
@click.option(
    "--max-time-minutes",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop cleanly, writing a checkpoint, after this many minutes.",
)
@click.option(
    "--stop-after-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Stop cleanly, writing a checkpoint, after this many steps in this invocation "
    "(the schedule still runs to --max-steps; continue with --resume).",
)
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@click.pass_context
def train(ctx: click.Context, compile_: bool, **options) -> None:
    """Pre-train a BERT (masked LM + next-sentence prediction) or ModernBERT (masked LM) encoder on shards.

    \b
    One GPU or CPU:
      bertprep train --shards shards/ --eval-shards heldout/ --preset base -o runs/base
    ModernBERT, packed, 30% masking (shards made with --masking dynamic):
      bertprep train --architecture modernbert --packing --masked-lm-prob 0.3 --shards shards/ -o runs/mb
    N GPUs on one machine:
      torchrun --standalone --nproc_per_node=N -m bertprep.cli.main train --shards shards/ -o runs/base

    SIGTERM (a scheduler's pre-emption) or Ctrl-C stops after the current step with a checkpoint and exits
    with 128 + the signal number; continue with --resume. A second Ctrl-C aborts at once.
    """
    from bertprep.bert_model.pretrain.trainer import train as run_training

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = TrainConfig(compile=compile_, **options)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    _refuse_fixed_on_resume(ctx, options)
    from bertprep.bert_model.checkpoint import checkpoints_dir_problem

    problem = checkpoints_dir_problem(config.output_dir)
    if problem:
        raise click.BadParameter(problem, param_hint="--output-dir")
    try:
        check_writes_apart(
            [("--output-dir", os.path.join(config.output_dir, name)) for name in _RUN_OUTPUTS],
            [("--shards", config.shards), ("--eval-shards", config.eval_shards), ("--model", config.init_from)],
            command="train",
        )
    except WriteOverReadError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    try:
        result = run_training(config)
    except (ValueError, OSError, FloatingPointError) as err:
        # OSError: an environment fault (disk full, permissions), e.g. a checkpoint that could not be written;
        # its message names the file. The loader workers are already stopped (trainer.train).
        raise click.ClickException(str(err)) from None
    if result.checkpoint:
        click.echo(f"step {result.step} ({result.stop_reason}); checkpoint {result.checkpoint}")
    if result.interrupted:
        # Interrupted: say how to go on, and exit as a signal-terminated command would (128 + number), so
        # that `bertprep train ... && next-step` does not go on with an unfinished model.
        if result.checkpoint:
            click.echo(f"interrupted by {result.stop_reason}; continue with --resume {options['output_dir']}", err=True)
        signum = getattr(signal, result.stop_reason, signal.SIGTERM)
        sys.exit(128 + int(signum))
