"""The ``bertprep`` command: a thin click group; each subcommand lives in its own module."""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any

import click

from bertprep.pipeline import interrupts

# name -> "module:attribute"; modules are imported only when their command runs (torch and Beam are
# slow to import, and a user making shards need not have torch installed).
_COMMANDS = {
    "build-vocab": "bertprep.cli.build_vocab:build_vocab",
    "make-shards": "bertprep.cli.make_shards:make_shards",
    "inspect": "bertprep.cli.inspect_cmd:inspect_shards",
    "train": "bertprep.cli.train:train",
    "finetune": "bertprep.cli.finetune:finetune",
    "export": "bertprep.cli.export:export",
    "predict": "bertprep.cli.predict:predict",
    "fill-mask": "bertprep.cli.fill_mask:fill_mask",
    "extract-features": "bertprep.cli.extract_features:extract_features_cmd",
    "plot": "bertprep.cli.plot:plot",
    "evaluate": "bertprep.cli.evaluate:evaluate",
}

_HELP = {
    "build-vocab": "Train a WordPiece vocabulary (vocab.txt + tokenizer.json) on a corpus.",
    "make-shards": "Turn documents into masked BERT pre-training instances (Apache Beam) as Arrow shards.",
    "inspect": "Print a shard directory's statistics and decode instances back to text.",
    "train": "Pre-train (MLM + NSP) a BERT encoder on shards.",
    "finetune": "Fine-tune a BERT encoder on GLUE-style classification, SQuAD v1.1/v2.0, NER or multiple choice.",
    "export": "Write a Hugging Face transformers directory for a bertprep model.",
    "predict": "Run a fine-tuned model on a file and write its predictions.",
    "fill-mask": "Show the top-k word pieces a pre-trained model predicts at each [MASK].",
    "extract-features": "Write frozen BERT activations of chosen layers per word piece (Arrow, streamed).",
    "plot": "Draw the learning curves of pre-training runs (held-out accuracy, loss) in one picture.",
    "evaluate": "Score a pre-trained encoder on GLUE or SQuAD dev over the papers' sweep, as the papers' table.",
}


# The setup.cfg extra that installs what each command needs beyond the core (Beam, tokenizers, pyarrow).
_EXTRAS = {
    "train": "train",
    "finetune": "finetune",
    "export": "finetune",
    "predict": "finetune",
    "fill-mask": "finetune",
    "extract-features": "finetune",
    "plot": "train",
    "evaluate": "finetune",
}


def _missing_package(cmd_name: str, err: ModuleNotFoundError) -> click.ClickException:
    """The one line for a command whose third-party package is not installed, naming the extra to install."""
    extra = _EXTRAS.get(cmd_name)
    hint = f" (pip install 'bertprep[{extra}]')" if extra else ""
    return click.ClickException(f"'{cmd_name}' needs the package {err.name!r}, which is not installed{hint}")


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS:
            module_name, attr = _COMMANDS[cmd_name].split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as err:
                if err.name and err.name.startswith("bertprep.cli."):
                    return None
                raise _missing_package(cmd_name, err) from err
            command = getattr(module, attr)
            command.short_help = command.short_help or _HELP.get(cmd_name)  # listings say what `bertprep --help` does
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        # The commands import their work (torch, Beam, ...) in their bodies, so that --help needs none of it:
        # a package missing there gets the same one line as one missing while the command's module loads.
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as err:
            if not err.name or err.name.startswith("bertprep.") or ctx.invoked_subcommand not in _COMMANDS:
                raise
            raise _missing_package(ctx.invoked_subcommand, err) from err

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing every subcommand's dependencies.
        rows = [(name, _HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bertprep")
def cli() -> None:
    """bertprep: BERT pre-training data at any scale, and a compact BERT trainer.

    \b
    Typical run:
      bertprep build-vocab corpus/ -o vocab/
      bertprep make-shards -i 'corpus/*.txt' --vocab vocab/vocab.txt -o shards/
      bertprep inspect shards/
      bertprep train --shards shards/ --preset mini --max-steps 10000 --warmup-steps 1000 --lr 1e-3 -o runs/mini
    """


class _Stopped(BaseException):
    """SIGINT / SIGTERM before a command set up its own handling (e.g. while modules load)."""


def _stop(signum, frame) -> None:
    name = signal.Signals(signum).name
    if interrupts.in_import(frame):  # never raise inside an import; nothing is written while modules load
        interrupts.exit_now(f"bertprep: stopped by {name}")
    raise _Stopped(name)


def main() -> None:
    """Console-script entry point. SIGINT and SIGTERM end a command with one line and exit status 130 (cleanup
    in ``finally`` blocks still runs); commands with long work install their own handling (``train`` stops
    after a step with a checkpoint, ``make-shards`` stops its workers and deletes its staging folder)."""
    interrupts.install(_stop)
    try:
        cli()
    except _Stopped as err:
        sys.stderr.write(f"bertprep: stopped by {err}\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
