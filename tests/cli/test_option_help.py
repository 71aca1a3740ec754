"""Each option is explained once: an option name has one help text in every command that has it (the shared
groups of cli/options.py), help comes from the dataclass field's docstring where there is one (``field_help``),
and every option has help."""

from __future__ import annotations

import collections
import dataclasses

import click
import pytest

from bertprep.cli.main import cli
from bertprep.cli.options import field_help, field_option
from conftest import need_module

#: Option names that still mean different things in different commands, each with its own help text (e.g.
#: build-vocab's --model is the tokenizer's model type, the other commands' a trained model). The list may only
#: shrink: a name that gets one help text everywhere must leave it, and no other name may join it.
HOMONYMS = {
    "--input",
    "--input-format",
    "--model",
    "--output",
    "--vocab",
}


def _help_texts() -> dict[str, dict[str, str | None]]:
    """long option name -> command -> its help text, over every command of the group."""
    need_module("torch")  # the model commands import it
    ctx = click.Context(cli)
    texts: dict[str, dict[str, str | None]] = collections.defaultdict(dict)
    for name in cli.list_commands(ctx):
        for param in cli.get_command(ctx, name).params:
            if isinstance(param, click.Option) and not param.hidden:
                for opt in param.opts + param.secondary_opts:
                    if opt.startswith("--"):  # (-o is --output-dir or --output by command, as docs/cli.md says)
                        texts[opt][name] = param.help
    return texts


def test_an_option_name_has_one_help_text_in_every_command():
    texts = _help_texts()
    several = {name for name, by_command in texts.items() if len(set(by_command.values())) > 1}
    assert not (several - HOMONYMS), {name: texts[name] for name in sorted(several - HOMONYMS)}
    assert not (HOMONYMS - several), f"one help text now: take {sorted(HOMONYMS - several)} off HOMONYMS"


def test_every_option_has_help():
    texts = _help_texts()
    assert not [(opt, command) for opt, by_command in texts.items() for command, text in by_command.items() if not text]


def test_shared_options_take_the_shared_fields_docstring():
    need_module("torch")
    from bertprep.bert_model.loop_config import DeviceConfig, OptimConfig
    from bertprep.cli.finetune import finetune
    from bertprep.cli.predict import predict
    from bertprep.cli.train import train

    for command in (train, finetune, predict):
        (device,) = [p for p in command.params if p.name == "device"]
        assert device.help == field_help(DeviceConfig, "device") and "cuda:N" in device.help
    for command in (train, finetune):
        (decay,) = [p for p in command.params if p.name == "weight_decay"]
        assert decay.help == field_help(OptimConfig, "weight_decay")


@dataclasses.dataclass
class _Base:
    seed: int = 1
    """Seeds the ``rng``; see :class:`random.Random`.
    Second line."""
    bare: int = 0


@dataclasses.dataclass
class _Config(_Base):
    name: str = "x"
    """The name."""
    seed: int = 2


def test_field_help_reads_the_docstring_under_the_field_as_one_plain_line():
    assert field_help(_Config, "name") == "The name."
    assert field_help(_Base, "seed") == "Seeds the rng; see random.Random. Second line."
    assert field_help(_Config, "seed") is None  # redeclared without a docstring: the subclass's field has none
    assert field_help(_Config, "bare") is None and field_help(_Config, "missing") is None


def test_field_option_takes_default_and_help_from_the_field():
    @click.command()
    @field_option(_Config, "name")
    @field_option(_Base, "seed", type=int, help="Given help.")
    def command(name, seed):
        """A command."""

    params = {p.name: p for p in command.params}
    assert params["name"].default == "x" and params["name"].help == "The name." and params["name"].opts == ["--name"]
    assert params["seed"].default == 1 and params["seed"].help == "Given help."


@pytest.mark.parametrize("command_name", ["finetune", "predict", "fill-mask", "extract-features", "export"])
def test_casing_option_says_the_same_in_every_command(command_name):
    texts = _help_texts()["--do-lower-case"]
    assert command_name in texts and len(set(texts.values())) == 1
