"""One option vocabulary across the commands (cli/options.py): ``-i/--input`` for what a command reads,
``-o/--output-dir`` (a directory) or ``-o/--output`` (one file) for what it writes, ``-m/--model`` for a model
it reads. Earlier spellings still parse, to the same parameter, and stay out of ``--help``."""

from __future__ import annotations

import importlib.metadata

import click
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli

# command -> (short, long, parameter) for each name of the shared vocabulary the command has.
CANONICAL = {
    "build-vocab": [("-i", "--input", "input_files"), ("-o", "--output-dir", "output_dir")],
    "make-shards": [("-i", "--input", "input_files"), ("-o", "--output-dir", "output_dir")],
    "train": [("-m", "--model", "init_from"), ("-o", "--output-dir", "output_dir")],
    "finetune": [("-m", "--model", "init_from"), ("-o", "--output-dir", "output_dir")],
    "fill-mask": [("-m", "--model", "model_dir"), ("-i", "--input", "input_file")],
    "predict": [("-m", "--model", "model_dir"), ("-i", "--input", "input_file"), ("-o", "--output", "output_file")],
    "extract-features": [
        ("-m", "--model", "model"),
        ("-i", "--input", "input_file"),
        ("-o", "--output", "output_file"),
    ],
    "export": [("-m", "--model", "model_option"), ("-o", "--output-dir", "output_dir")],
    "plot": [("-o", "--output", "output")],
}
# group -> its subcommands, as CANONICAL.
GROUPS = {
    "evaluate": {
        "glue": [("-m", "--model", "model"), ("-o", "--output-dir", "output_dir")],
        "squad": [("-m", "--model", "model"), ("-o", "--output-dir", "output_dir")],
        "table": [("-o", "--output", "output")],
        "retrieval": [("-m", "--model", "model"), ("-o", "--output-dir", "output_dir")],
        "squad-to-beir": [("-i", "--input", "squad_file"), ("-o", "--output-dir", "output_dir")],
    }
}

# command -> (old spelling, its current long name); docs/cli.md lists the same table.
OLD_SPELLINGS = [
    ("build-vocab", "--input-file", "--input"),
    ("make-shards", "--input-file", "--input"),
    ("train", "--init-from", "--model"),
    ("finetune", "--init-from", "--model"),
]


def _command(name: str) -> click.Command:
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert command is not None, name
    return command


def _param(command: click.Command, name: str) -> click.Parameter:
    (param,) = [p for p in command.params if p.name == name]
    return param


@pytest.mark.parametrize("command_name", sorted(CANONICAL))
def test_every_command_uses_the_shared_names(command_name):
    command = _command(command_name)
    for short, long, param_name in CANONICAL[command_name]:
        assert {short, long} <= set(_param(command, param_name).opts), (command_name, long)


@pytest.mark.parametrize(("group", "command_name"), [(g, c) for g in GROUPS for c in GROUPS[g]])
def test_every_subcommand_uses_the_shared_names(group, command_name):
    command = _command(group)
    assert set(command.list_commands(click.Context(command))) == set(GROUPS[group])
    subcommand = command.get_command(click.Context(command), command_name)
    for short, long, param_name in GROUPS[group][command_name]:
        assert {short, long} <= set(_param(subcommand, param_name).opts), (group, command_name, long)


def test_every_command_of_the_group_is_covered():
    assert set(CANONICAL) | {"inspect"} | set(GROUPS) == set(cli.list_commands(click.Context(cli)))


@pytest.mark.parametrize(("command_name", "old", "new"), OLD_SPELLINGS)
def test_old_spelling_parses_to_the_same_parameter(command_name, old, new, tmp_path):
    command = _command(command_name)
    value = str(tmp_path)  # an existing directory: valid for a glob option and for --model
    via_old = command.make_context(command_name, [old, value], resilient_parsing=True).params
    via_new = command.make_context(command_name, [new, value], resilient_parsing=True).params
    (param_name,) = [p for _, long, p in CANONICAL[command_name] if long == new]
    assert via_old[param_name] == via_new[param_name] and via_new[param_name] in (value, (value,))


@pytest.mark.parametrize(("command_name", "old", "new"), OLD_SPELLINGS)
def test_help_shows_only_the_current_names(command_name, old, new):
    result = CliRunner().invoke(cli, [command_name, "--help"])
    assert result.exit_code == 0 and new in result.output and old not in result.output


def test_export_takes_the_model_as_option_or_argument(tmp_path):
    """``export MODEL_DIR`` (as before) and ``export -m MODEL_DIR`` are the same; both at once is refused."""
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    runs = [
        CliRunner().invoke(cli, ["export", *args, "-o", str(tmp_path / "out")])
        for args in ([str(not_a_model)], ["-m", str(not_a_model)])
    ]
    assert runs[0].exit_code == runs[1].exit_code != 0 and runs[0].output == runs[1].output
    both = CliRunner().invoke(cli, ["export", str(not_a_model), "-m", str(not_a_model), "-o", str(tmp_path / "o")])
    assert both.exit_code == 2 and "give the model to export once" in both.output


def test_version_is_the_installed_package_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip().endswith(importlib.metadata.version("bertprep"))
