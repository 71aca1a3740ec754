"""``--config NAME|FILE`` of ``bertprep train``: a recipe, read by the library (``pretrain.recipe_files``), whose
values become the options' defaults (click's ``default_map``), so that the command line overrides each; where the
settings came from (the recipe's name and sha256, the values the command line overrode) at the start of the log and
in ``OUTPUT/config.toml``, itself a recipe file."""

from __future__ import annotations

import logging
import math
from typing import Any

import click
from click.core import ParameterSource

from bertprep.bert_model.pretrain.recipe_files import (
    Recipe,
    field_of_key,
    find_recipe,
    read_recipe,
    shipped_recipes,
)
from bertprep.cli.options import LocalPath
from bertprep.core import strict_json

#: ``ctx.meta`` key of the :class:`Recipe` that ``--config`` read.
RECIPE_META = "bertprep.recipe"

#: Where a value counts as the command line's rather than the recipe's.
_COMMAND_LINE = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


class RecipeParam(click.ParamType):
    """``--config``'s value: a recipe file that exists, else the name of a shipped recipe
    (``recipe_files.find_recipe``); the value is the file's path."""

    name = "NAME|FILE"

    def convert(self, value, param, ctx):
        try:
            path = find_recipe(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if path == value:  # a file of the user's (not a shipped recipe's name)
            return LocalPath(exists=True, dir_okay=False).convert(value, param, ctx)
        return path


def param_field(param: click.Parameter) -> str | None:
    """The ``TrainConfig`` field option ``param`` sets (the recipe key of its long name,
    ``recipe_files.field_of_key``: ``--phase`` -> ``phases``, ``--compile`` -> ``compile``); None for one that sets
    none (``--config``, ``--help``)."""
    longs = [o[2:] for o in getattr(param, "opts", ()) if o.startswith("--")]
    return next((f for f in map(field_of_key, longs) if f is not None), None)


#: Option types whose check of a recipe value has no side effect and needs no other option: checked when the
#: recipe is read, so that their message names the file (paths and models are checked when used, as given).
_PURE_TYPES = (click.types.IntParamType, click.types.FloatParamType, click.Choice, click.types.BoolParamType)


def _defaults_of(recipe: Recipe, ctx: click.Context) -> dict[str, Any]:
    """``{parameter name: value}`` of ``recipe`` for click's ``default_map``; a number, choice or flag is checked by
    its option's type as the command line's would be (ranges and choices: ``_PURE_TYPES``).

    Raises:
        click.BadParameter: a value the option refuses, or a setting the command has no option for, naming the
            file and the key.
    """
    params = {param_field(p): p for p in ctx.command.params if isinstance(p, click.Option)}
    defaults = {}
    for field, value in recipe.settings.items():
        key, param = recipe.keys[field], params.get(field)
        if param is None or param.name is None:
            raise click.BadParameter(f"{recipe.path}: {key!r} is not an option of bertprep {ctx.command.name}")
        try:
            if isinstance(param.type, _PURE_TYPES):
                param.type_cast_value(ctx, value)
        except click.BadParameter as err:
            raise click.BadParameter(f"{recipe.path}: {key} = {_toml_value(value)}: {err.message}") from None
        defaults[param.name] = value
    return defaults


def _load_recipe(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            recipe = read_recipe(value)
        except ValueError as err:
            raise click.BadParameter(str(err), ctx=ctx, param=param) from None
        try:
            defaults = _defaults_of(recipe, ctx)
        except click.BadParameter as err:
            raise click.BadParameter(err.message, ctx=ctx, param=param) from None
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        ctx.meta[RECIPE_META] = recipe
    return value


def config_option(command):
    """``--config NAME|FILE``: a recipe, shipped (by name) or a file (TOML), whose keys are the command's option
    names; its values become the defaults (click's ``default_map``), so the command line overrides each. Read
    first (``is_eager``)."""
    return click.option(
        "--config",
        type=RecipeParam(),
        is_eager=True,
        expose_value=False,
        callback=_load_recipe,
        default=None,
        help=f"A recipe: the name of one that ships with bertprep ({', '.join(sorted(shipped_recipes()))}: the "
        "published recipes, each value with its source) or a recipe file (TOML): 'option-name = value' lines, "
        'e.g. lr-schedule = "wsd". An existing file of that name wins over a shipped recipe. Options given on '
        "the command line override it; the settings that ran are written to OUTPUT/config.toml.",
    )(command)


def overridden_by_command_line(ctx: click.Context, options: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(recipe key, recipe's value, value given)`` of each setting of ``--config``'s recipe that the command
    line (or the environment) gave too; empty without a recipe. ``options`` are the command's parameters."""
    recipe = ctx.meta.get(RECIPE_META)
    if recipe is None:
        return []
    given = {}
    for param in ctx.command.params:
        field = param_field(param)
        if field and param.name in options and ctx.get_parameter_source(param.name) in _COMMAND_LINE:
            given[field] = options[param.name]
    return recipe.overridden(given)


def log_recipe(ctx: click.Context, options: dict[str, Any], logger: logging.Logger) -> None:
    """Log where the settings came from: ``--config``'s recipe (name, file, sha256) and each of its values that
    the command line overrode, with both values; nothing without a recipe."""
    recipe = ctx.meta.get(RECIPE_META)
    if recipe is None:
        return
    changed = overridden_by_command_line(ctx, options)
    won = "; ".join(f"{key} = {_toml_value(new)} (recipe: {_toml_value(old)})" for key, old, new in changed)
    logger.info(
        "recipe %s: %d settings; the command line overrode %s",
        _named(recipe),
        len(recipe.settings),
        f"{len(changed)}: {won}" if changed else "none of them",
    )


def _named(recipe: Recipe) -> str:
    """``NAME, sha256 HEX (FILE)`` of a shipped recipe, ``FILE, sha256 HEX`` of another."""
    where = f" ({recipe.path})" if recipe.name != recipe.path else ""
    return f"{recipe.name}, sha256 {recipe.sha256}{where}"


def recipe_header(ctx: click.Context, options: dict[str, Any]) -> str:
    """``config.toml``'s comment lines that record ``--config``'s recipe (name, sha256, file) and the keys the
    command line overrode; empty without a recipe."""
    recipe = ctx.meta.get(RECIPE_META)
    if recipe is None:
        return ""
    changed = [key for key, _, _ in overridden_by_command_line(ctx, options)]
    return f"# recipe: {_named(recipe)}\n# overridden on the command line: {', '.join(changed) or 'none'}\n"


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
    return strict_json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


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
