"""Recipe files: a training recipe as TOML, read onto :class:`TrainConfig`.

A recipe is ``key = value`` lines whose keys are ``bertprep train``'s option names without the dashes
(``lr-schedule = "wsd"``, ``batch-size = 32``, ``phase = ["steps=90%", "shards=shards/512"]``). Each key names the
:class:`TrainConfig` field of the option: the name with ``-`` made ``_`` (``lr-schedule`` -> ``lr_schedule``; the
field's own name is read too), except the spellings of :data:`KEY_FIELDS` (``phase`` -> ``phases``, ``lr`` ->
``learning_rate``, ...), so a field added to :class:`TrainConfig` is a recipe key at once. Every value must have
its field's type (an integer where the option takes one: ``batch-size = 8.9`` is refused, not cut to 8).

The recipes that ship with bertprep are package data (``recipes/*.toml`` beside this module,
:func:`shipped_recipes`): the published ones, each value with its source. ``bertprep train --config NAME|FILE``
reads one with :func:`read_recipe`; in Python::

    recipe = read_recipe(find_recipe("bert-base-paper"))
    config = recipe.train_config(shards="shards/128", output_dir="runs/bert", preset="tiny", max_steps=2)

Standard library only (besides the config it fills).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bertprep.bert_model.pretrain.train_config import TrainConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package
    import tomli as tomllib  # type: ignore[no-redef]

#: The recipe keys whose field is not the key with ``-`` made ``_``: the options whose name differs from their
#: field's (a repeated ``--phase`` fills ``phases``; ``--verify`` is ``verify_shards``) and the options' other
#: spellings (``--lr``, ``-m/--model``).
KEY_FIELDS = {
    "phase": "phases",
    "lr": "learning_rate",
    "model": "init_from",
    "verify": "verify_shards",
}


def field_of_key(key: str) -> str | None:
    """The :class:`TrainConfig` field that recipe key ``key`` sets (``lr-schedule`` -> ``lr_schedule``,
    ``phase`` -> ``phases``); None when it sets none."""
    if key in KEY_FIELDS:
        return KEY_FIELDS[key]
    name = key.replace("-", "_")
    return name if name in _field_types() else None


def key_of_field(field: str) -> str:
    """The recipe key (the option's name) of :class:`TrainConfig` field ``field``: ``phases`` -> ``phase``,
    ``learning_rate`` -> ``learning-rate``."""
    own = {f: k for k, f in KEY_FIELDS.items() if k not in ("lr", "model")}
    return own.get(field, field.replace("_", "-"))


@functools.cache
def _field_types() -> dict[str, Any]:
    """:class:`TrainConfig`'s fields -> their types (the annotations evaluated)."""
    hints = typing.get_type_hints(TrainConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainConfig)}


def shipped_recipes() -> dict[str, str]:
    """The recipe files that ship with bertprep (package data: ``bert_model/pretrain/recipes/*.toml``), name (the
    file's name without ``.toml``) -> path, through ``importlib.resources`` on the installed package."""
    from importlib import resources

    folder = resources.files("bertprep.bert_model.pretrain").joinpath("recipes")
    return {f.name.removesuffix(".toml"): str(f) for f in folder.iterdir() if f.name.endswith(".toml")}


def find_recipe(name_or_path: str) -> str:
    """The path of recipe ``name_or_path``: a file that exists (it wins over a shipped recipe of that name), else
    the file of the shipped recipe of that name (:func:`shipped_recipes`).

    Raises:
        ValueError: neither; the message names the shipped recipes.
    """
    if os.path.exists(name_or_path):
        return name_or_path
    shipped = shipped_recipes()
    if name_or_path in shipped:
        return shipped[name_or_path]
    names = ", ".join(sorted(shipped))
    if os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".toml"):
        raise ValueError(f"recipe file {name_or_path} does not exist (or name a shipped recipe: {names})")
    raise ValueError(
        f"{name_or_path!r} is neither a recipe file nor a recipe that ships with bertprep; give a TOML file's path "
        f"or one of {names}"
    )


@dataclass(frozen=True)
class Recipe:
    """A recipe file read onto :class:`TrainConfig`'s fields (:func:`read_recipe`)."""

    name: str
    """The shipped recipe's name (``bert-base-paper``), or the file's path for a file that is not one."""
    path: str
    """The file read."""
    sha256: str
    """Hex sha256 of the file's bytes: which version of the recipe ran."""
    settings: dict[str, Any]
    """:class:`TrainConfig` field -> value, in the file's order, each of its field's type."""
    keys: dict[str, str]
    """:class:`TrainConfig` field -> the key the file gives it under (``lr`` or ``learning-rate``)."""

    def train_config(self, **overrides: Any) -> TrainConfig:
        """A :class:`TrainConfig` of this recipe's settings, ``overrides`` (fields) replacing them; the fields
        neither gives take their defaults. ``shards`` and ``output_dir`` must come from one of the two.

        Raises:
            ValueError: the settings do not make a valid config (``TrainConfig.__post_init__``), or a required
                field is missing.
        """
        settings = {**self.settings, **overrides}
        missing = [f.name for f in dataclasses.fields(TrainConfig) if _required(f) and f.name not in settings]
        if missing:
            raise ValueError(f"{self.path}: give {', '.join(missing)} (the recipe does not)")
        return TrainConfig(**settings)

    def overridden(self, given: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(key, recipe's value, given value)`` of each setting of this recipe that ``given`` (field -> value,
        e.g. the command line's) replaces, in the recipe's order; a value given equal to the recipe's is kept
        too (the command line gave it)."""
        return [(self.keys[f], v, given[f]) for f, v in self.settings.items() if f in given]


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def read_recipe(path: str) -> Recipe:
    """Recipe file ``path`` (TOML: ``key = value`` per option) as a :class:`Recipe`: every key mapped onto its
    :class:`TrainConfig` field (:func:`field_of_key`) and every value checked against the field's type.

    Raises:
        ValueError: (one line naming the file and the key) the file cannot be read or is not TOML, a key is not
            an option of ``bertprep train`` or names an option given before in the file, or a value is not of its
            option's type (``batch-size = 8.9``: an integer is expected; ``phase = "steps=3"``: a list).
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
        table = tomllib.loads(data.decode("utf-8"))
    except OSError as err:
        raise ValueError(f"{path} cannot be read: {err.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from None
    settings: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, value in table.items():
        field = field_of_key(key)
        if field is None:
            raise ValueError(
                f"{path}: unknown key {key!r}: not an option of bertprep train (keys are the option names without "
                'the dashes, e.g. lr-schedule = "wsd")'
            )
        if field in settings:
            raise ValueError(f"{path}: {key!r} names an option given before in it")
        settings[field] = _typed(path, key, value, _field_types()[field])
        keys[field] = key
    shipped = {os.path.realpath(p): n for n, p in shipped_recipes().items()}
    name = shipped.get(os.path.realpath(path), path)
    return Recipe(name, path, hashlib.sha256(data).hexdigest(), settings, keys)


def _typed(path: str, key: str, value: Any, kind: Any) -> Any:
    """``value`` of recipe key ``key`` as field type ``kind`` (``int``, ``float | None``, ``tuple[str, ...]``...);
    an integer where a float is expected becomes one.

    Raises:
        ValueError: not of that type, naming ``path``, ``key`` and what is expected.
    """
    options = [a for a in typing.get_args(kind) if a is not type(None)] if _is_union(kind) else [kind]
    for option in options:
        converted = _as(value, option)
        if converted is not _NOT:
            return converted
    expected = " or ".join(_DESCRIPTIONS.get(o, str(o)) for o in options)
    if typing.get_origin(kind) is tuple or (options and typing.get_origin(options[0]) is tuple):
        example = f'{key} = ["{value}"]' if isinstance(value, str) else f'{key} = ["..."]'
        expected += f": write {example}"
    raise ValueError(f"{path}: {key} = {_shown(value)} is not {expected}")


_NOT = object()

_DESCRIPTIONS = {
    int: "an integer (a whole number without a point: the option takes no fraction)",
    float: "a number",
    bool: "true or false",
    str: 'a string (in quotes: "...")',
    tuple[str, ...]: 'a list of strings (in brackets: ["...", "..."]), one per repeat of the option',
}


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def _as(value: Any, kind: Any) -> Any:
    """``value`` as ``kind`` when it is one (an int as a float too), else ``_NOT``; a kind this does not know
    takes the value as it is (the config checks it)."""
    if kind is bool:
        return value if isinstance(value, bool) else _NOT
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NOT
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _NOT
    if kind is str:
        return value if isinstance(value, str) else _NOT
    if typing.get_origin(kind) is tuple:
        (item, *_) = typing.get_args(kind) or (Any,)
        if not isinstance(value, list):
            return _NOT
        items = [_as(v, item) if item is not Any else v for v in value]
        return _NOT if any(v is _NOT for v in items) else tuple(items)
    return value


def _shown(value: Any) -> str:
    """``value`` as the recipe wrote it (near enough: TOML's spelling of strings and booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return "a table"
    return repr(value)


__all__ = ["KEY_FIELDS", "Recipe", "field_of_key", "find_recipe", "key_of_field", "read_recipe", "shipped_recipes"]
