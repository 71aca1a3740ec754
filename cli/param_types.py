"""The click parameter and option types the commands share: paths that refuse a web URL (:class:`LocalPath`), a
model directory or Hugging Face Hub id (:class:`ModelPath`), options that still parse their earlier spellings
(:class:`AliasedOption`) and floats that refuse ``inf`` and ``nan`` (:class:`FiniteFloat`). ``options.py`` builds
the shared options from them.
"""

from __future__ import annotations

import math
from typing import Any

import click

from bertprep.core.paths import web_url_message


class LocalPath(click.Path):
    """``click.Path`` that refuses a web URL with the fix (download it first) instead of "does not exist"."""

    def convert(self, value, param, ctx):
        message = web_url_message(str(value), "") if value is not None else None
        if message:
            self.fail(message.lstrip(), param, ctx)
        return super().convert(value, param, ctx)


class ModelPath(click.ParamType):
    """A model directory that exists, or a Hugging Face Hub id resolved to its cached snapshot
    (``core.hub.resolve_model_dir``: downloaded unless ``HF_HUB_OFFLINE=1``); the value is the local path."""

    name = "path"

    def __init__(self, dir_okay_only: bool = True):
        self.dir_okay_only = dir_okay_only

    def convert(self, value, param, ctx):
        from bertprep.core.hub import HubError, is_hub_id, resolve_model_dir

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


class FiniteFloat(click.FloatRange):
    """click's ``FloatRange`` (or plain float) that also refuses ``inf`` and ``nan``: ``float("1e999")`` is
    ``inf``, which passes every lower bound (and ``nan`` every bound), so a learning rate of ``1e999`` would train.
    ``field_option`` gives every float option this type."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.min is None and self.max is None:
            self.name = "float"  # shown as FLOAT, as a plain float option

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if isinstance(converted, float) and not math.isfinite(converted):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return converted


def finite_float_type(type_: Any) -> Any:
    """``type_`` with infinities and NaN refused when it is a float type (``float``, ``click.FLOAT``, a
    ``click.FloatRange``, keeping its bounds); any other type as it is."""
    if type_ is float or type_ is click.FLOAT:
        return FiniteFloat()
    if isinstance(type_, click.FloatRange) and not isinstance(type_, FiniteFloat):
        return FiniteFloat(type_.min, type_.max, type_.min_open, type_.max_open, type_.clamp)
    return type_


__all__ = ["AliasedOption", "FiniteFloat", "LocalPath", "ModelPath", "finite_float_type"]
