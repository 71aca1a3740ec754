"""Option types the commands share, the option vocabulary every command uses, and where defaults come from.

The same idea has the same name in every command (``--help`` and the CLI reference show only these):

- ``-i, --input``: what the command reads (files, globs or directories);
- ``-o, --output-dir``: the directory it writes, or ``-o, --output`` where it writes one file;
- ``-m, --model``: a model it reads (a bertprep checkpoint or run directory, a Hugging Face directory, or a
  Hugging Face Hub id such as ``answerdotai/ModernBERT-base``: :class:`ModelPath`).

Earlier spellings (``--input-file``, ``--init-from``, ...) still parse as hidden aliases
(:class:`AliasedOption`); docs/cli.md lists them. An option's default is its library dataclass field's, read by
:func:`dataclass_default`, never restated in ``cli/``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import click

from bertprep.pipeline.paths import web_url_message


class LocalPath(click.Path):
    """``click.Path`` that refuses a web URL with the fix (download it first) instead of "does not exist"."""

    def convert(self, value, param, ctx):
        message = web_url_message(str(value), "") if value is not None else None
        if message:
            self.fail(message.lstrip(), param, ctx)
        return super().convert(value, param, ctx)


class ModelPath(click.ParamType):
    """A model directory that exists, or a Hugging Face Hub id resolved to its cached snapshot
    (``pipeline.hub.resolve_model_dir``: downloaded unless ``HF_HUB_OFFLINE=1``); the value is the local path."""

    name = "path"

    def __init__(self, dir_okay_only: bool = True):
        self.dir_okay_only = dir_okay_only

    def convert(self, value, param, ctx):
        from bertprep.pipeline.hub import HubError, is_hub_id, resolve_model_dir

        value = str(value)
        if is_hub_id(value):
            try:
                return resolve_model_dir(value)
            except HubError as err:
                self.fail(str(err), param, ctx)
        path = click.Path(exists=True, file_okay=not self.dir_okay_only)
        return path.convert(value, param, ctx)


class AliasedOption(click.Option):
    """A ``click.Option`` that also parses older spellings (``aliases``) without showing them.

    The aliases are handed to the parser only, so ``--help``, the generated CLI reference and error
    messages name the option by its current names; a command line written with an old name still works
    and fills the same parameter.
    """

    def __init__(self, *args, aliases: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = tuple(aliases)
        clash = set(self.aliases) & set(self.opts + self.secondary_opts)
        assert not clash, f"aliases repeat the option's names: {sorted(clash)}"

    def add_to_parser(self, parser, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        if self.aliases:
            opts = self.opts
            self.opts = list(self.aliases)
            try:
                super().add_to_parser(parser, ctx)
            finally:
                self.opts = opts


def _check_report_to(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from bertprep.bert_model.reporting import report_to_unavailable

    problem = report_to_unavailable(value)
    if problem:
        raise click.BadParameter(problem.removeprefix("--report-to "), ctx=ctx, param=param)
    return value


def report_to_option(command):
    """``--report-to none|tensorboard|wandb`` (``bertprep.bert_model.reporting``), shared by train and finetune;
    a reporter whose package is missing is refused before any work starts."""
    from bertprep.bert_model.reporting import REPORT_TO

    return click.option(
        "--report-to",
        type=click.Choice(REPORT_TO),
        default="none",
        callback=_check_report_to,
        help="Also log every metrics.jsonl figure to TensorBoard (event files in OUTPUT/tensorboard/; "
        "pip install 'bertprep[tensorboard]') or Weights & Biases (a run named after OUTPUT; WANDB_MODE=offline "
        "keeps it in OUTPUT/wandb/; pip install 'bertprep[wandb]'), as train/<field> and eval/<field> at each step.",
    )(command)


def dataclass_default(*classes: type) -> Callable[[str], Any]:
    """``default(name)``: the default of field ``name`` of the first of ``classes`` (library dataclasses) that
    declares it, for an option's ``default=`` and its ``--help``.

    Raises:
        KeyError: (when the command is defined, so every test of it fails) no class declares ``name`` with a
            plain default (a required field, or one with a ``default_factory``).
    """
    fields = {}
    for cls in reversed(classes):
        fields.update({f.name: f for f in dataclasses.fields(cls)})

    def default(name: str) -> Any:
        field = fields[name]
        if field.default is dataclasses.MISSING:
            raise KeyError(f"{name} has no plain default in {', '.join(c.__name__ for c in classes)}")
        return field.default

    return default


def _check_optimizer(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse an optimizer whose package is missing before any work starts (one line: the extra to install)."""
    if value != "adamw":
        from bertprep.bert_model.optim import optimizer_class

        try:
            optimizer_class(value)
        except ValueError as err:
            raise click.BadParameter(str(err).removeprefix(f"--optimizer {value} "), ctx=ctx, param=param) from None
    return value


def _optimizer_and_schedule_options(default: Callable[[str], Any]) -> list:
    """``--optimizer`` and the learning-rate schedule's options (``OptimConfig``), then the others of
    ``recipe_options``."""
    from bertprep.bert_model.loop_config import OPTIMIZER_NAMES
    from bertprep.bert_model.schedules import DECAY_SHAPES, LR_SCHEDULES

    options = [
        click.option(
            "--optimizer",
            type=click.Choice(OPTIMIZER_NAMES),
            default=default("optimizer"),
            callback=_check_optimizer,
            help="adamw: torch's AdamW (BERT's). stable-adamw: StableAdamW (ModernBERT's; torch-optimi). lamb: "
            "LAMB (NVIDIA's BERT at 64k batch; pytorch-optimizer). The last two: pip install 'bertprep[recipes]'. "
            "All take --weight-decay, --adam-beta1/2 and --adam-epsilon; no decay on biases and LayerNorm.",
        ),
        click.option(
            "--lr-schedule",
            type=click.Choice(LR_SCHEDULES),
            default=default("lr_schedule"),
            help="After the linear warm-up: linear (BERT's: linear decay to 0 at --max-steps), cosine (half a "
            "cosine to 0), wsd (warm-up, stable, decay: constant, then a decay over the last --decay-fraction of "
            "the steps; ModernBERT's trapezoidal schedule) or constant.",
        ),
        click.option(
            "--decay-fraction",
            type=click.FloatRange(0, 1),
            default=default("decay_fraction"),
            help="wsd: the fraction of --max-steps the final decay takes.",
        ),
        click.option(
            "--decay-steps",
            type=click.IntRange(min=0),
            default=default("decay_steps"),
            help="wsd: the steps of the final decay, instead of --decay-fraction.",
        ),
        click.option(
            "--decay-shape",
            type=click.Choice(DECAY_SHAPES),
            default=default("decay_shape"),
            help="wsd: the decay's shape; 1-sqrt is ModernBERT's (1 - sqrt(progress)).",
        ),
        click.option(
            "--min-lr-ratio",
            type=click.FloatRange(0, 1),
            default=default("min_lr_ratio"),
            help="The learning rate the decay ends at, as a fraction of the peak (linear, cosine, wsd).",
        ),
    ]
    return options + _batch_and_phase_options(default)


def _batch_and_phase_options(default: Callable[[str], Any]) -> list:
    """``--phase`` and the batch-size warm-up's options (``TrainConfig``)."""
    return [
        click.option(
            "--phase",
            "phases",
            multiple=True,
            default=default("phases"),
            metavar="KEY=VALUE,...",
            help="One phase of the run, in order (repeat the option; none = one phase): steps=N (the last phase "
            "may leave it out: the rest of --max-steps), shards=DIR, batch-size=B, gradient-accumulation-steps=A, "
            "and for ModernBERT global-rope-theta / local-rope-theta (context extension). E.g. the BERT paper's "
            "90% at 128 then 512: --max-steps 1000000 --phase steps=900000 --phase shards=shards/512,batch-size=8. "
            "One learning-rate schedule runs over all phases; --resume continues inside the checkpoint's phase.",
        ),
        click.option(
            "--batch-size-warmup-tokens",
            type=click.IntRange(min=0),
            default=default("batch_size_warmup_tokens"),
            help="Batch-size warm-up (ModernBERT's): the global batch grows linearly from --batch-size-start to "
            "the full batch over this many tokens (token slots: rows x max_seq_length), in whole micro-batches of "
            "--gradient-accumulation-steps; 0 = none. Logged as global_batch_size.",
        ),
        click.option(
            "--batch-size-start",
            type=click.IntRange(min=1),
            default=default("batch_size_start"),
            help="The global batch the batch-size warm-up starts from (rounded to whole micro-batches per process).",
        ),
    ]


def recipe_options(default: Callable[[str], Any]):
    """The options of today's training recipes (``OptimConfig``'s optimizer and schedule settings, the phases and
    batch-size warm-up of ``TrainConfig``), one group applied by ``train`` with one line; ``default`` is the
    command's ``dataclass_default``."""
    options = _optimizer_and_schedule_options(default)

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _recipe_keys(command: click.Command) -> dict[str, click.Parameter]:
    """Every key a recipe file of ``command`` may hold -> its parameter: each long option name without its
    dashes (``lr-schedule``, ``learning-rate`` and ``lr``), and the parameter's name (``lr_schedule``)."""
    keys: dict[str, click.Parameter] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in ("config", "help"):
            continue
        for opt in [*param.opts, *param.secondary_opts, *getattr(param, "aliases", ())]:
            if opt.startswith("--") and not opt.startswith("--no-"):
                keys[opt[2:]] = param
        keys[param.name] = param
    return keys


def read_recipe(path: str, command: click.Command) -> dict[str, Any]:
    """The settings of recipe file ``path`` (TOML: ``key = value`` per option, keys as ``_recipe_keys``), as
    ``{parameter name: value}`` for click's ``default_map``.

    Raises:
        click.BadParameter: the file cannot be read or parsed, or holds a key that is not an option of
            ``command`` or names one option twice (the message names the file and the key).
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except OSError as err:
        raise click.BadParameter(f"{path} cannot be read: {err.strerror}", param_hint="--config") from None
    except tomllib.TOMLDecodeError as err:
        raise click.BadParameter(f"{path} is not valid TOML: {err}", param_hint="--config") from None
    keys, settings = _recipe_keys(command), {}
    for key, value in table.items():
        param = keys.get(key)
        if param is None:
            raise click.BadParameter(
                f"{path}: unknown key {key!r}: not an option of bertprep {command.name} (keys are the option "
                'names without the dashes, e.g. lr-schedule = "wsd")',
                param_hint="--config",
            )
        if param.name in settings:
            raise click.BadParameter(f"{path}: {key!r} names an option given before in it", param_hint="--config")
        settings[param.name] = value
    return settings


def _load_recipe(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.default_map = {**(ctx.default_map or {}), **read_recipe(value, ctx.command)}
    return value


def config_option(command):
    """``--config FILE``: a recipe file (TOML) whose keys are the command's option names; its values become the
    defaults (click's ``default_map``), so the command line overrides each. Read first (``is_eager``)."""
    return click.option(
        "--config",
        type=LocalPath(exists=True, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_recipe,
        default=None,
        help="A recipe file (TOML; the repository's recipes/ folder has the published ones): 'option-name = "
        'value\' lines, e.g. lr-schedule = "wsd". Options given on the command line override it; the settings '
        "that ran are written to OUTPUT/config.toml.",
    )(command)


def _toml_value(value: Any) -> str:
    """``value`` (str, bool, int, float, or a list of them) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


def resolved_recipe(command: click.Command, values: dict[str, Any]) -> str:
    """A recipe file (TOML) of the settings ``values`` (``{parameter name: value}``, as they ran) under their
    options' names, one per line in the command's order; unset ones (None) as comments. ``--config`` of it
    repeats the run."""
    lines = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in ("config", "help") or param.name not in values:
            continue
        name = next(o[2:] for o in param.opts if o.startswith("--"))
        value = values[param.name]
        lines.append(f"# {name}: not set" if value is None else f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
