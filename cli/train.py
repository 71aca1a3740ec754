"""``bertprep train``: options -> ``TrainConfig`` -> ``bertprep.bert_model.pretrain.trainer.train``."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Mapping
from typing import NoReturn, cast

import click
from click.core import ParameterSource

from bertprep.bert_model.models.bert_config import ATTN_IMPLEMENTATIONS
from bertprep.bert_model.pretrain.phases import every_phase_sized
from bertprep.bert_model.pretrain.train_config import (
    ARCHITECTURE_PRESETS,
    MODEL_OPTIONS,
    TASKS,
    TrainConfig,
    same_setting,
    settings_kept_on_resume,
)
from bertprep.cli.options import (
    ModelPath,
    batch_size_option,
    dataclass_default,
    field_option,
    kernel_options,
    loop_options,
    masked_lm_prob_option,
    model_option,
    optimizer_options,
    output_dir_option,
    preset_option,
    recipe_options,
    resume_changes_option,
    stop_options,
    task_option,
    verify_option,
)
from bertprep.cli.recipe_option import config_option, log_recipe, recipe_header, resolved_recipe
from bertprep.cli.run_lock import run_directory_lock
from bertprep.core import urls
from bertprep.core.paths import WriteOverReadError, check_not_run_record, check_writes_apart

_default = dataclass_default(TrainConfig)  # defaults shown in --help come from the dataclass
#: Every ``--preset`` name, of either architecture. (The cast states ``ARCHITECTURE_PRESETS``' type: mypy joins
#: its two tables, whose values differ, to ``object``.)
_PRESET_NAMES = sorted(
    {p for presets in cast("dict[str, Mapping[str, object]]", ARCHITECTURE_PRESETS).values() for p in presets}
)


class ShardDirectory(click.ParamType):
    """A shard directory: an existing local folder, or a bucket's URL (``gs://...``, ``s3://...``) taken as given
    (the trainer reads its manifest and names what is missing)."""

    name = "directory|url"

    def convert(self, value, param, ctx):
        if urls.is_remote(str(value)):
            return str(value)
        return click.Path(exists=True, file_okay=False).convert(urls.local_path(str(value)), param, ctx)


#: What a run writes in --output-dir (checked against the inputs: none may be, or lie inside, one of them).
_RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "metrics.png", "tensorboard", "wandb", "config.toml")

#: Options that make the model: a resumed run continues the checkpoint's model, so they cannot change.
_FIXED_ON_RESUME = ("architecture", "preset", *MODEL_OPTIONS)


def _recorded_settings(resume: str) -> tuple[dict, dict, dict] | None:
    """``(trained, given, run)`` for the checkpoint ``--resume`` names: ``trained`` the architecture, preset and
    model config it trained (what a given option is compared with), ``given`` the architecture, preset and model
    options its run was given (what a resumed run records when they are not given again), ``run`` its whole
    recorded ``TrainConfig``. None: unreadable (the trainer then reports the damage or falls back to an earlier
    checkpoint)."""
    from bertprep.bert_model import checkpoint as ckpt

    try:
        state = ckpt.read_checkpoint_state(ckpt.resolve_checkpoint(resume))
        model, run = dict(state["model_config"]), dict(state["train_config"])
        architecture = model.get("architecture", "bert")  # (BERT's config has no such field)
        trained = {**model, "architecture": architecture, "preset": run["preset"]}
        given = {"architecture": architecture, "preset": run["preset"], **{n: run.get(n) for n in MODEL_OPTIONS}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if architecture == "modernbert":  # the dropout options by the names they have on the command line
        trained.setdefault("hidden_dropout_prob", model.get("mlp_dropout"))  # (architectures.with_dropout)
        trained.setdefault("attention_probs_dropout_prob", model.get("attention_dropout"))
    return trained, given, run


def _option_name(ctx: click.Context, name: str) -> str:
    """The long option that sets the parameter ``name`` (``--learning-rate`` for ``learning_rate``)."""
    for param in ctx.command.params:
        if param.name == name and param.opts:
            return max(param.opts, key=len)
    return "--" + name.replace("_", "-")


def _settle_options_on_resume(ctx: click.Context, options: dict) -> None:
    """With --resume, take every model option, and every setting that shapes the run (the optimizer, the
    schedules, the batches, the seed, the masking: ``settings_kept_on_resume``, new fields included), that is
    not given from the checkpoint, so the run goes on as it began and the new checkpoint records what was
    trained. A model option given with another value than the checkpoint's is refused; so is a run setting,
    unless --allow-resume-changes.

    Before, `--resume RUN` of a ModernBERT tiny run recorded the defaults (bert, base), and `--resume` without
    --warmup-steps fell back to the default 10,000 warm-up steps mid-run.
    """
    if not options.get("resume"):
        return
    recorded = _recorded_settings(options["resume"])
    if recorded is None:
        return  # unreadable: the trainer names the damage
    trained, given_before, run = recorded
    for name in _FIXED_ON_RESUME:
        if ctx.get_parameter_source(name) not in _GIVEN:
            options[name] = given_before[name]
        elif trained.get(name) != options[name]:
            option = _option_name(ctx, name)
            was = f" (the checkpoint's is {trained[name]!r})" if name in trained else ""
            raise click.BadParameter(
                f"{option} {options[name]} cannot change when resuming{was}: --resume {options['resume']} "
                f"continues that checkpoint's model; drop {option}, or start a new run from its weights with "
                "-m/--model",
                param_hint=option,
            )
    for name in settings_kept_on_resume():
        if name not in options or name not in run:
            continue  # not an option, or a setting the checkpoint's version did not record
        if ctx.get_parameter_source(name) not in _GIVEN:
            options[name] = run[name]
        elif not same_setting(run[name], options[name]) and not options.get("allow_resume_changes"):
            option = _option_name(ctx, name)
            raise click.BadParameter(
                f"{option} {options[name]} differs from the checkpoint's {run[name]!r}: --resume "
                f"{options['resume']} continues that run with its settings; drop {option}, or add "
                "--allow-resume-changes to train on with the new value",
                param_hint=option,
            )


def _max_steps_from_phases(ctx: click.Context, options: dict) -> None:
    """Without --max-steps, a run whose every --phase gives steps= or tokens= is as long as its phases:
    max_steps 0, their sum once the run knows its world size and shards (``schedule_setup.size_phases_in_steps``).
    Called before ``_settle_options_on_resume``, which puts a resumed run's own max_steps back."""
    if ctx.get_parameter_source("max_steps") not in _GIVEN and every_phase_sized(options.get("phases") or ()):
        options["max_steps"] = 0


#: Where an option counts as given: the command line, the environment or a recipe file (--config).
_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP)

#: What a first run on a CPU should use instead of the paper's defaults (docs/pretraining.md, on a laptop).
CPU_RECIPE = "--preset mini --max-steps 10000 --warmup-steps 1000 --lr 1e-3"


def _warn_if_paper_scale_on_cpu(ctx: click.Context, config: TrainConfig) -> None:
    """One line when the paper's scale (preset base, 1,000,000 steps: the defaults) is about to start on a CPU,
    where it would run for months: the recipe to use instead."""
    if config.resume or config.init_from or not config.max_steps or ctx.get_parameter_source("max_steps") in _GIVEN:
        return
    if config.preset not in ("base", "large"):
        return
    from bertprep.bert_model.runtime import resolve_device

    try:
        on_cpu = resolve_device(config.device).type == "cpu"
    except ValueError:
        return  # --device cuda without CUDA: the trainer says so
    if on_cpu:
        click.echo(
            f"train: --preset {config.preset} for {config.max_steps:,} steps (the paper's scale) would take months "
            f"on a CPU; for a first run use {CPU_RECIPE} (docs: Pre-training on a laptop)",
            err=True,
        )


def _aborted(output_dir: str) -> NoReturn:
    """End the command after a second Ctrl-C: one line saying what is left, exit 130 (128 + SIGINT) as a
    command killed by Ctrl-C, not click's "Aborted!" and status 1 (the loader workers are already stopped)."""
    from bertprep.bert_model import checkpoint as ckpt

    found = ckpt.list_checkpoints(os.path.join(output_dir, ckpt.CHECKPOINTS_DIR))
    left = f"continue with --resume {output_dir} (step {found[-1][0]})" if found else "no checkpoint was written"
    sys.stderr.write(f"bertprep: aborted by a second SIGINT without a checkpoint of the step under way; {left}\n")
    sys.exit(128 + int(signal.SIGINT))


def _write_resolved_settings(ctx: click.Context, values: dict, output_dir: str) -> None:
    """Write the settings that run (the recipe file's, the command line's, the checkpoint's on --resume, the
    defaults) to ``output_dir/config.toml`` as a recipe file, ``--config`` of which repeats the run, under a
    comment naming ``--config``'s recipe and its sha256 (main process only under torchrun)."""
    from bertprep.core.atomic import write_atomic, write_text_synced

    if int(os.environ.get("RANK", "0")) != 0:
        return
    os.makedirs(output_dir, exist_ok=True)
    header = "# The settings of this run (bertprep train --config of this file repeats it).\n"
    text = header + recipe_header(ctx, values) + resolved_recipe(ctx.command, values)
    write_atomic(os.path.join(output_dir, "config.toml"), lambda tmp: write_text_synced(tmp, text))


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@config_option
@task_option(type=click.Choice(TASKS), default=_default("task"))
@click.option(
    "--shards",
    required=True,
    type=ShardDirectory(),
    help="Training shard directory written by 'bertprep make-shards' (holds manifest.json): a local folder, or "
    "a gs:// or s3:// URL read through --cache-dir.",
)
@click.option(
    "--eval-shards",
    type=ShardDirectory(),
    default=None,
    help="Held-out shard directory (same vocab and max_seq_length) evaluated every --eval-every steps; a "
    "folder or a gs:// / s3:// URL.",
)
@output_dir_option(type=click.Path(file_okay=False))
@field_option(TrainConfig, "architecture", type=click.Choice(list(ARCHITECTURE_PRESETS)))
@preset_option(_PRESET_NAMES, _default("preset"))
@field_option(TrainConfig, "num_hidden_layers", type=click.IntRange(min=1))
@field_option(TrainConfig, "hidden_size", type=click.IntRange(min=1))
@field_option(TrainConfig, "num_attention_heads", type=click.IntRange(min=1))
@field_option(TrainConfig, "intermediate_size", type=click.IntRange(min=1))
@field_option(TrainConfig, "hidden_dropout_prob", type=click.FloatRange(0, 1, max_open=True))
@field_option(TrainConfig, "attention_probs_dropout_prob", type=click.FloatRange(0, 1, max_open=True))
@field_option(TrainConfig, "embedding_dropout", type=click.FloatRange(0, 1, max_open=True))
@field_option(TrainConfig, "mlp_dropout", type=click.FloatRange(0, 1, max_open=True))
@field_option(TrainConfig, "attention_dropout", type=click.FloatRange(0, 1, max_open=True))
@field_option(TrainConfig, "attention_output_dropout", type=click.FloatRange(0, 1, max_open=True))
@batch_size_option(TrainConfig)
@field_option(TrainConfig, "gradient_accumulation_steps", type=click.IntRange(min=1))
@optimizer_options(TrainConfig)
@field_option(TrainConfig, "warmup_steps", type=click.IntRange(min=0))
@stop_options(TrainConfig, phases=True)
@field_option(TrainConfig, "nsp_loss_weight", type=click.FloatRange(min=0))
@field_option(TrainConfig, "packing", "--packing/--no-packing")
@masked_lm_prob_option(type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None)
@field_option(TrainConfig, "masked_lm_prob_final", type=click.FloatRange(0, 1, min_open=True, max_open=True))
@field_option(TrainConfig, "eval_masked_lm_prob", type=click.FloatRange(0, 1, min_open=True, max_open=True))
@loop_options(TrainConfig)
@field_option(TrainConfig, "eval_batches", type=click.IntRange(min=0))
@field_option(TrainConfig, "save_every", type=click.IntRange(min=0))
@field_option(TrainConfig, "keep_last", type=click.IntRange(min=0))
@click.option(
    "--resume",
    type=click.Path(exists=True),
    default=None,
    help="Continue exactly from a checkpoint directory, or from the latest one of a run directory. Its "
    "files are checked against the sha256 recorded when it was written: a damaged checkpoint "
    "directory is refused; from a run directory the latest intact checkpoint is used (logged). The run goes on "
    "with the checkpoint's settings: every model, optimizer, schedule, batch, seed and masking option not given "
    "is the checkpoint's; a model option given with another value is refused, and so is any other of those "
    "unless --allow-resume-changes. Output, logging, evaluation, device and stopping options may change.",
)
@resume_changes_option
@model_option(
    "init_from",
    type=ModelPath(dir_okay_only=False),
    default=None,
    help="Start a new run from a model's weights only (new optimizer, schedule, data order). A "
    "bertprep checkpoint or run directory (e.g. phase 2 at 512 tokens after phase 1 at 128), or a "
    "Hugging Face BERT, RoBERTa or ModernBERT directory (config.json + model.safetensors or pytorch_model.bin + "
    "vocab.txt or tokenizer.json; BertModel, BertForMaskedLM, BertForPreTraining, RobertaForMaskedLM, "
    "ModernBertModel or ModernBertForMaskedLM) or Hub id (answerdotai/ModernBERT-base, roberta-base: "
    "huggingface_hub's cache; HF_HUB_OFFLINE=1 reads the cache only) for continued pre-training on your corpus: "
    "make the shards with --vocab set to the same directory or id (RoBERTa: --objective none). Heads it lacks "
    "are initialised as in the original. The architecture comes from the source; the dropout options still apply.",
)
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=None,
    show_default="on for CUDA, off on CPU",
    help="Compile the model with torch.compile (fused kernels; the first steps take longer while it compiles). "
    "A compiled run draws dropout from inductor's own random stream: with dropout it is not step-for-step equal "
    "to an eager run of the same seed (the same distribution); with dropout 0 they agree to float rounding.",
)
@kernel_options(TrainConfig)
@click.option(
    "--attn-implementation",
    type=click.Choice(ATTN_IMPLEMENTATIONS),
    default=_default("attn_implementation"),
    help="Attention kernel. auto: FlashAttention-2's varlen kernel on a CUDA GPU of compute capability 8.0+ "
    "in bf16 (the flash_attn package where installed, else PyTorch's own), sdpa elsewhere. sdpa: "
    "scaled_dot_product_attention with a dense mask, any device. varlen / flash_attention_2: the variable-length "
    "kernel, packed rows attended per instance with no masked work. flex_attention: a document block mask, CUDA only "
    "(no attention dropout). The kernel used is logged once.",
)
@field_option(TrainConfig, "num_workers", type=click.IntRange(min=0))
@field_option(TrainConfig, "shuffle_buffer_size", type=click.IntRange(min=1))
@verify_option("--verify/--no-verify", "verify_shards", default=_default("verify_shards"))
@field_option(TrainConfig, "cache_dir", type=click.Path(file_okay=False), show_default=False)
@field_option(TrainConfig, "cache_max_gb", type=click.FloatRange(min=0, min_open=True))
@click.option(
    "--stop-after-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Stop cleanly, writing a checkpoint, after this many steps in this invocation "
    "(the schedule still runs to --max-steps; continue with --resume).",
)
@recipe_options(TrainConfig)
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
    if int(os.environ.get("RANK", "0")) == 0:
        log_recipe(ctx, {**options, "compile_": compile_}, logging.getLogger("bertprep.train"))
    _max_steps_from_phases(ctx, options)
    _settle_options_on_resume(ctx, options)
    try:
        config = TrainConfig(compile=compile_, **options)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    _warn_if_paper_scale_on_cpu(ctx, config)
    from bertprep.bert_model.checkpoint import checkpoints_dir_problem

    problem = checkpoints_dir_problem(config.output_dir)
    if problem:
        raise click.BadParameter(problem, param_hint="--output-dir")
    try:
        written = [("--output-dir", os.path.join(config.output_dir, name)) for name in _RUN_OUTPUTS]
        check_writes_apart(
            written,
            [("--shards", config.shards), ("--eval-shards", config.eval_shards), ("--model", config.init_from)],
            command="train",
        )
        check_not_run_record(written, "--model", config.init_from, command="train")
    except WriteOverReadError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    try:
        with run_directory_lock(config.output_dir, "train", own_files=("config.toml",)):
            _write_resolved_settings(ctx, {**options, "compile_": compile_}, config.output_dir)
            result = run_training(config)
    except KeyboardInterrupt:  # the second Ctrl-C (StopSignals): click would print "Aborted!" and exit 1
        _aborted(config.output_dir)
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
