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


def resume_changes_option(command):
    """``--allow-resume-changes`` (train): with ``--resume``, train with the run settings given even where they
    differ from the checkpoint's (``TrainConfig.allow_resume_changes``)."""
    return click.option(
        "--allow-resume-changes",
        is_flag=True,
        default=False,
        help="With --resume: use the optimizer, schedule, batch, seed or masking options given even where they "
        "differ from the checkpoint's (e.g. a longer --max-steps); the run then differs from an uninterrupted "
        "one. Without it such a difference is refused.",
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
